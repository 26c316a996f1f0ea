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
      returned: always
      type: int
    name:
      description: Model name as NVML reports it.
      returned: always
      type: str
      sample: NVIDIA H200
    uuid:
      description: GPU UUID.
      returned: always
      type: str
    pci_bus_id:
      description: PCI bus id.
      returned: always
      type: str
    pci_device_id:
      description: PCI device and vendor id, C(0xDDDDVVVV), as mig-parted device filters write it.
      returned: always
      type: str
      sample: "0x233510DE"
    pci_subsystem_id:
      description: PCI subsystem id.
      returned: always
      type: str
    memory_mb:
      description: Total memory in MiB.
      returned: always
      type: int
    mig_capable:
      description: Whether the GPU supports MIG.
      returned: always
      type: bool
    mig:
      description: MIG mode (they differ until a GPU reset); both false on a GPU without MIG.
      returned: always
      type: dict
      contains:
        current:
          description: Whether MIG mode is enabled now.
          returned: always
          type: bool
        pending:
          description: Whether MIG mode will be enabled after the next GPU reset.
          returned: always
          type: bool
    profiles:
      description:
        - GPU-instance profiles from the hardware; empty when O(profiles=false) or the GPU has no MIG.
        - On GPUs whose NVML instance counts are known to be wrong (A30, as mig-parted hard-codes its table),
          RV(gpus[].profiles[].instance_count) comes from the built-in catalog.
      returned: always
      type: list
      elements: dict
      contains:
        name:
          description: Profile name as nvidia-smi and mig-parted write it.
          returned: always
          type: str
          sample: 1g.18gb
        id:
          description: nvidia-smi profile id (NVML's profile info id).
          returned: always
          type: int
        index:
          description: NVML profile constant (C(NVML_GPU_INSTANCE_PROFILE_*)).
          returned: always
          type: int
        slices:
          description: Compute slices the profile uses.
          returned: always
          type: int
        memory_slices:
          description: Memory slices the profile uses (the largest placement size).
          returned: always
          type: int
        instance_count:
          description: Most instances of the profile the GPU holds.
          returned: always
          type: int
        nvml_instance_count:
          description: NVML's instance count, kept where the catalog's replaces it.
          returned: when instance_count_source is catalog
          type: int
        instance_count_source:
          description: V(catalog) where RV(gpus[].profiles[].instance_count) comes from the built-in catalog.
          returned: when NVML's count is known to be wrong
          type: str
        multiprocessors:
          description: Streaming multiprocessors of an instance.
          returned: always
          type: int
        memory_mb:
          description: Memory of an instance in MiB.
          returned: always
          type: int
        copy_engines:
          description: Copy engines of an instance.
          returned: always
          type: int
        decoders:
          description: Video decoders of an instance.
          returned: always
          type: int
        encoders:
          description: Video encoders of an instance.
          returned: always
          type: int
        jpegs:
          description: JPEG decoders of an instance.
          returned: always
          type: int
        ofas:
          description: Optical flow accelerators of an instance.
          returned: always
          type: int
        p2p:
          description: Whether the profile supports peer-to-peer.
          returned: always
          type: bool
        placements:
          description: Possible placements of an instance, each C(start) and C(size) in memory slices.
          returned: always
          type: list
          elements: dict
          contains:
            start:
              description: First memory slice.
              returned: always
              type: int
            size:
              description: Number of memory slices.
              returned: always
              type: int
        remaining:
          description: Instances of the profile that can still be created now.
          returned: always
          type: int
    instances:
      description: Current GPU instances, by placement; empty when MIG is off or O(instances=false).
      returned: always
      type: list
      elements: dict
      contains:
        id:
          description: GPU instance id.
          returned: always
          type: int
        profile:
          description: Profile name.
          returned: always
          type: str
          sample: 3g.71gb
        profile_id:
          description: NVML profile id.
          returned: always
          type: int
        start:
          description: First memory slice of the placement.
          returned: always
          type: int
        size:
          description: Memory slices of the placement.
          returned: always
          type: int
        compute_instances:
          description: The compute instances inside the GPU instance.
          returned: always
          type: list
          elements: dict
          contains:
            id:
              description: Compute instance id.
              returned: always
              type: int
            profile_id:
              description: NVML compute-instance profile id.
              returned: always
              type: int
            slices:
              description: Compute slices of the compute instance.
              returned: always
              type: int
            start:
              description: First slice of its placement.
              returned: always
              type: int
            size:
              description: Slices of its placement.
              returned: always
              type: int
    processes:
      description: Processes holding the GPU; empty when O(processes=false).
      returned: always
      type: list
      elements: dict
      contains:
        pid:
          description: Process id.
          returned: always
          type: int
        name:
          description: Process name.
          returned: always
          type: str
        used_mb:
          description: GPU memory it uses in MiB; null where NVML does not say.
          returned: always
          type: int
        gpu_instance_id:
          description: GPU instance it runs in; null without MIG.
          returned: always
          type: int
        compute_instance_id:
          description: Compute instance it runs in; null without MIG.
          returned: always
          type: int
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.checks import input_problems, refuse
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
    refuse(module, input_problems(module.params, numbers={"gpus[]": {"minimum": 0}}))
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
