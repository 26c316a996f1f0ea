#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_info
short_description: Read a GPU host's NVML facts, MIG profile table and MIG instances
version_added: 0.1.0
description:
  - Reads through NVML (one C(nvmlInit) per run) the driver, NVML and CUDA driver versions and, per GPU, its
    index, name, UUID, PCI bus and device ids, memory, whether it is MIG-capable and its MIG mode (current and
    pending).
  - For MIG-capable GPUs, the GPU-instance profile table as the hardware reports it (profile id, NVML index,
    slices, instance count, memory, engines, possible placements and remaining capacity), the current GPU
    and compute instances, and the processes holding each GPU.
  - The result is a C(hardware) input for M(gpufleet.gpu_operator.mig_plan) (option O(gpufleet.gpu_operator.mig_plan#module:gpu_info)).
  - A host with no GPU returns RV(gpus=[]). A host without the NVML library fails with a message that says so.
  - Read-only; never changes the GPU.
author:
  - gpufleet contributors (@gpufleet)
requirements:
  - nvidia-ml-py (pynvml) and the NVIDIA driver's libnvidia-ml.so.1 on the managed host
extends_documentation_fragment:
  - gpufleet.gpu_operator.attributes
options:
  gpus:
    description: GPU indices to read; all GPUs when omitted.
    type: list
    elements: int
  profiles:
    description: Read the MIG profile table with placements (the slowest part of the read).
    type: bool
    default: true
  instances:
    description: Read current GPU and compute instances of GPUs in MIG mode.
    type: bool
    default: true
  processes:
    description: Read the processes holding each GPU.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
notes:
  - Profile names follow C(nvidia-smi mig -lgip) (for example C(1g.18gb), C(1g.18gb+me)); placements are
    C({start, size}) in memory slices as C(nvidia-smi mig -lgipp) prints them.
"""

EXAMPLES = r"""
- name: Read GPU and MIG facts
  gpufleet.gpu_operator.gpu_info:
  register: gpu

- name: Only identities and MIG mode, fast
  gpufleet.gpu_operator.gpu_info:
    profiles: false
    instances: false
    processes: false

- name: Plan all-balanced from the facts
  gpufleet.gpu_operator.mig_plan:
    gpu_info: "{{ gpu }}"
    config_name: all-balanced
"""

RETURN = r"""
driver_version:
  description: NVIDIA driver version.
  returned: success
  type: str
  sample: 580.159.04
nvml_version:
  description: NVML library version.
  returned: success
  type: str
  sample: 13.580.159.04
cuda_driver_version:
  description: CUDA version the driver supports, major.minor.
  returned: success
  type: str
  sample: "13.0"
gpu_count:
  description: Number of GPUs NVML sees on the host (also those not read because of O(gpus)).
  returned: success
  type: int
  sample: 8
read_seconds:
  description: Seconds spent in NVML, init to shutdown.
  returned: success
  type: float
  sample: 0.12
gpus:
  description: One entry per GPU read, in index order.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
    name:
      description: Model name as NVML reports it.
      type: str
      sample: NVIDIA H200
    uuid:
      description: GPU UUID.
      type: str
    pci_bus_id:
      description: PCI bus id.
      type: str
    pci_device_id:
      description: PCI device and vendor id, C(0xDDDDVVVV), as mig-parted device filters write it.
      type: str
      sample: "0x233510DE"
    pci_subsystem_id:
      description: PCI subsystem id.
      type: str
    memory_mb:
      description: Total memory in MiB.
      type: int
    mig_capable:
      description: Whether the GPU supports MIG.
      type: bool
    mig:
      description: MIG mode, C(current) and C(pending) (they differ until a GPU reset).
      type: dict
    profiles:
      description:
        - GPU-instance profiles from the hardware, each with C(name), C(id) (nvidia-smi profile id), C(index)
          (NVML constant), C(slices), C(memory_slices), C(instance_count), C(multiprocessors), C(memory_mb),
          C(copy_engines), C(decoders), C(encoders), C(jpegs), C(ofas), C(p2p), C(placements) (list of
          C(start)/C(size)) and C(remaining) (instances that can still be created).
        - On GPUs whose NVML instance counts are known to be wrong (A30, as mig-parted hard-codes its table),
          C(instance_count) comes from the built-in catalog; NVML's figure is kept as C(nvml_instance_count)
          and C(instance_count_source) is C(catalog).
      type: list
      elements: dict
    instances:
      description:
        - Current GPU instances with C(id), C(profile), C(profile_id), C(start), C(size) and
          C(compute_instances).
      type: list
      elements: dict
    processes:
      description: Processes holding the GPU, with C(pid), C(name), C(used_mb), C(gpu_instance_id), C(compute_instance_id).
      type: list
      elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import session as nvml


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="int"),
            profiles=dict(type="bool", default=True),
            instances=dict(type="bool", default=True),
            processes=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    if not nvml.HAS_PYNVML:
        module.fail_json(msg=missing_required_lib("nvidia-ml-py"), exception=nvml.PYNVML_IMPORT_ERROR)
    try:
        facts = nvml.read_host(profiles=module.params["profiles"], instances=module.params["instances"],
                               processes=module.params["processes"], indices=module.params["gpus"])
    except nvml.NvmlError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
