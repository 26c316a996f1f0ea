#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_plan
short_description: Check a MIG layout against a node's GPUs and plan it, changing nothing
version_added: 0.1.0
description:
  - Pure planning; never changes anything. Runs on the controller (C(delegate_to=localhost)) or on a host.
  - Hardware comes from one of O(gpu_info) (the registered result of M(gpufleet.gpu_operator.gpu_info); its live
    profile table wins over the built-in catalog), O(gpu_model) with O(gpu_count), or O(node_labels) (a node's
    GFD labels, for planning from the controller when NVML cannot be read).
  - The layout is O(config_name) (a MIG Manager config name, from O(config) or, without it, from the config
    MIG Manager generates from the hardware), or O(mig_devices) applied to every GPU.
  - Returns per GPU the target instances with placements and a creation order that works when the driver
    picks placements itself (as MIG Manager creates them), the current to target difference when the facts
    carry current instances, whether a MIG mode change (GPU reset, maybe a reboot) is needed, and for an
    infeasible layout the reason and the nearest feasible alternatives.
  - Fails when the layout is infeasible unless O(fail_on_infeasible=false). A profile the model does not have
    always fails, naming the model's valid profiles of the same size.
author:
  - gpufleet contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.gpu_operator.attributes
options:
  gpu_info:
    description: Result of M(gpufleet.gpu_operator.gpu_info) (a dict with C(gpus)).
    type: dict
  gpu_model:
    description: GPU model name as NVML reports it, for example C(NVIDIA A100-SXM4-40GB) or C(NVIDIA H200).
    type: str
  gpu_count:
    description: Number of GPUs of O(gpu_model) on the node.
    type: int
    default: 1
  pci_device_id:
    description: PCI device id of O(gpu_model) (C(0xDDDDVVVV)); picks the catalog entry and device filters.
    type: str
  node_labels:
    description: A node's labels as GFD sets them (C(nvidia.com/gpu.product), C(nvidia.com/gpu.count), MIG labels).
    type: dict
  config_name:
    description: MIG config name, for example C(all-balanced), C(all-1g.18gb), C(all-disabled).
    type: str
  config:
    description:
      - A mig-parted v1 config as a dict, as YAML text, or as the path of a YAML file on the host running the module.
      - Without it, O(config_name) is looked up in the config MIG Manager (v0.14 and later) generates from the hardware.
    type: raw
  config_source:
    description: Name of the config's origin used in messages, for example C(ConfigMap gpu-operator/custom-mig-config).
    type: str
  mig_devices:
    description: 'Profile to count applied to every GPU, for example C({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}).'
    type: dict
  strategy:
    description:
      - The cluster's MIG strategy. When set, the result also holds the resources the device plugin and the
        labels GFD would show, and a layout that strategy cannot expose (for example two profiles under
        V(single)) counts as infeasible.
    type: str
    choices: [none, single, mixed]
  fail_on_infeasible:
    description: Fail when the layout does not fit. With V(false) the module returns RV(feasible=false) instead.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Changes nothing in any mode.
  diff_mode:
    support: full
    details: Shows each GPU's current and target instances when the facts carry current instances.
"""

EXAMPLES = r"""
- name: Does this fit an A100-40GB?
  gpufleet.gpu_operator.mig_plan:
    gpu_model: NVIDIA A100-SXM4-40GB
    mig_devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
  delegate_to: localhost

- name: Read the host's GPUs
  gpufleet.gpu_operator.gpu_info:
  register: gpu

- name: Plan all-balanced from live facts
  gpufleet.gpu_operator.mig_plan:
    gpu_info: "{{ gpu }}"
    config_name: all-balanced
    strategy: mixed

- name: Read the host's Kubernetes node (its GFD labels)
  kubernetes.core.k8s_info:
    kind: Node
    name: "{{ gpu_node_name }}"
  delegate_to: localhost
  register: node

# gpu_operator_mig_config: the custom mig-parted config of group_vars/gpu_nodes.yml (inventories/example).
- name: Validate a custom config from the controller before labelling nodes
  gpufleet.gpu_operator.mig_plan:
    node_labels: "{{ node.resources[0].metadata.labels }}"
    config_name: inference-small
    config: "{{ gpu_operator_mig_config }}"
    config_source: gpu_operator_mig_config in group_vars/gpu_nodes.yml
  delegate_to: localhost
"""

RETURN = r"""
feasible:
  description: Whether every GPU can hold the layout (and the strategy can expose it, when given).
  returned: success
  type: bool
reason:
  description: Why not, naming the GPU and the limit; null when feasible.
  returned: success
  type: str
mode_change_required:
  description: Whether some GPU must switch MIG mode (a GPU reset, or a reboot where the reset fails).
  returned: success
  type: bool
layout_changes:
  description: Whether applying the layout would change anything (MIG mode or instances).
  returned: success
  type: bool
plan:
  description:
    - The full plan. C(gpus) lists per GPU C(index), C(model), C(mig_enabled), C(target) and C(current)
      (profile to count), C(placements) (profile, start, size), C(creation_order), C(keep), C(destroy),
      C(create), C(mode_change_required), C(feasible), C(reason), C(alternatives).
  returned: success
  type: dict
  contains:
    feasible:
      description: Whether every GPU can hold the layout.
      returned: always
      type: bool
    reason:
      description: Why not, naming the GPU and the limit; null when feasible.
      returned: always
      type: str
    mode_change_required:
      description: Whether some GPU must switch MIG mode.
      returned: always
      type: bool
    reset_gpus:
      description:
        - GPUs a GPU reset touches. Every GPU of the node when any GPU's MIG mode changes, as MIG Manager's
          nvidia-mig-parted resets all GPUs together; empty for a layout-only change.
      returned: always
      type: list
      elements: int
    changed:
      description: Whether applying the plan changes anything.
      returned: always
      type: bool
    config_name:
      description: The MIG config planned (O(config_name)), or null with O(mig_devices).
      returned: always
      type: str
    gpus:
      description: One entry per GPU, by index.
      returned: always
      type: list
      elements: dict
      contains:
        index:
          description: GPU index.
          returned: always
          type: int
        model:
          description: GPU model name.
          returned: always
          type: str
        pci_device_id:
          description: PCI device and vendor id, C(0xDDDDVVVV).
          returned: always
          type: str
        profiles_source:
          description: Where the profile table came from, V(catalog) or the hardware facts.
          returned: always
          type: str
        mig_enabled:
          description: Whether the target has MIG on; null when the config has no entry for the GPU.
          returned: always
          type: bool
        current_mig_enabled:
          description: Whether MIG is on now.
          returned: always
          type: bool
        pending_mig_enabled:
          description: Whether MIG will be on after the next GPU reset.
          returned: always
          type: bool
        target:
          description: The target layout, a map of profile name to count (empty with MIG off).
          returned: always
          type: dict
          sample: {"1g.18gb": 2, "3g.71gb": 1}
        current:
          description: The current layout, a map of profile name to count.
          returned: always
          type: dict
        placements:
          description: Where each target instance goes.
          returned: always
          type: list
          elements: dict
          contains:
            profile:
              description: Profile name.
              returned: always
              type: str
            start:
              description: First memory slice.
              returned: always
              type: int
            size:
              description: Memory slices.
              returned: always
              type: int
        creation_order:
          description: Profile names in the order the instances are created.
          returned: always
          type: list
          elements: str
        keep:
          description: Current instances that stay (C(profile), C(start), C(size)).
          returned: always
          type: list
          elements: dict
          contains:
            profile:
              description: Profile name.
              returned: always
              type: str
            start:
              description: First memory slice.
              returned: always
              type: int
            size:
              description: Memory slices.
              returned: always
              type: int
        destroy:
          description: Current instances to destroy, as the hardware facts list them (C(profile), C(start), C(size), ...).
          returned: always
          type: list
          elements: dict
          contains:
            profile:
              description: Profile name.
              returned: always
              type: str
            start:
              description: First memory slice, when known.
              returned: when the facts have it
              type: int
            size:
              description: Memory slices, when known.
              returned: when the facts have it
              type: int
        create:
          description: Instances to create, in creation order.
          returned: always
          type: list
          elements: dict
          contains:
            profile:
              description: Profile name.
              returned: always
              type: str
            start:
              description: First memory slice.
              returned: always
              type: int
            size:
              description: Memory slices.
              returned: always
              type: int
        mode_change_required:
          description: Whether the GPU's MIG mode must change (a GPU reset).
          returned: always
          type: bool
        mode_write_required:
          description: Whether the pending MIG mode must be written.
          returned: always
          type: bool
        reset_pending:
          description: Whether a wanted MIG mode change only waits for a GPU reset.
          returned: always
          type: bool
        reset:
          description: Whether the GPU is reset with the others (in C(reset_gpus)).
          returned: always
          type: bool
        feasible:
          description: Whether the GPU can hold its target.
          returned: always
          type: bool
        reason:
          description: Why not; null when feasible.
          returned: always
          type: str
        alternatives:
          description: Feasible layouts nearest to an infeasible target, each a map of profile name to count.
          returned: always
          type: list
          elements: dict
          sample: [{"1g.18gb": 7}]
        changed:
          description: Whether the GPU changes.
          returned: always
          type: bool
expected_resources:
  description: Extended resources the device plugin would advertise under O(strategy), a map of resource name to count.
  returned: when O(strategy) is set
  type: dict
  sample: {"nvidia.com/mig-1g.18gb": 2, "nvidia.com/mig-2g.35gb": 1, "nvidia.com/mig-3g.71gb": 1}
expected_gfd_labels:
  description: MIG labels GFD would set under O(strategy), a map of label name to value.
  returned: when O(strategy) is set
  type: dict
strategy_conflict:
  description: Why O(strategy) cannot expose the layout (GFD would label the node C(-MIG-INVALID)); null if it can.
  returned: when O(strategy) is set
  type: str
profile:
  description: The unknown MIG profile.
  returned: when a profile is not one the GPU model has
  type: str
model:
  description: The GPU model that lacks RV(profile).
  returned: when a profile is not one the GPU model has
  type: str
gpu_index:
  description: The GPU whose model lacks RV(profile).
  returned: when a profile is not one the GPU model has, for a GPU
  type: int
alternatives:
  description: The nearest valid profile names.
  returned: when a profile is not one the GPU model has
  type: list
  elements: str
config_name:
  description: The config name the config source does not define.
  returned: when O(config_name) is unknown
  type: str
source:
  description: Where the config came from (O(config_source), the config file, or the built-in catalog).
  returned: when O(config_name) is unknown
  type: str
known:
  description: The config names the source defines.
  returned: when O(config_name) is unknown
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError


def _hardware(params):
    if params["gpu_info"] is not None:
        gpus = params["gpu_info"].get("gpus")
        if not isinstance(gpus, list):
            raise PlanningError("gpu_info has no 'gpus' list; pass the registered result of gpufleet.gpu_operator.gpu_info")
        return {"gpus": gpus}
    if params["node_labels"] is not None:
        return facts.hardware_from_gfd_labels(params["node_labels"])
    if params["gpu_count"] < 1:
        raise PlanningError("gpu_count must be 1 or more, got %d" % params["gpu_count"])
    return {"gpus": [{"index": i, "name": params["gpu_model"], "pci_device_id": params["pci_device_id"],
                      "mig": {"current": False, "pending": False}} for i in range(params["gpu_count"])]}


def _config(params):
    config = params["config"]
    source = params["config_source"]
    if isinstance(config, str) and "\n" not in config and os.path.isfile(config):
        with open(config) as handle:
            return handle.read(), source or config
    if isinstance(config, str) and "\n" not in config and config.strip().endswith((".yaml", ".yml")):
        raise PlanningError("config file %s does not exist on this host" % config)
    return config, source or ("the given config" if config is not None else None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu_info=dict(type="dict"),
            gpu_model=dict(type="str"),
            gpu_count=dict(type="int", default=1),
            pci_device_id=dict(type="str"),
            node_labels=dict(type="dict"),
            config_name=dict(type="str"),
            config=dict(type="raw"),
            config_source=dict(type="str"),
            mig_devices=dict(type="dict"),
            strategy=dict(type="str", choices=["none", "single", "mixed"]),
            fail_on_infeasible=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("gpu_info", "gpu_model", "node_labels"), ("config_name", "mig_devices"),
                            ("mig_devices", "config")],
        required_one_of=[("gpu_info", "gpu_model", "node_labels"), ("config_name", "mig_devices")],
        supports_check_mode=True,
    )
    params = module.params
    try:
        hardware = _hardware(params)
        config, source = _config(params)
        result = plan.plan_node(hardware, config_name=params["config_name"], config=config,
                                mig_devices=params["mig_devices"], config_source=source)
        output = dict(changed=False, feasible=result["feasible"], reason=result["reason"],
                      mode_change_required=result["mode_change_required"], layout_changes=result["changed"],
                      plan=result)
        if params["strategy"]:
            conflict = plan.strategy_conflict(result, params["strategy"])
            output.update(strategy_conflict=conflict,
                          expected_resources=plan.expected_resources(result, params["strategy"]),
                          expected_gfd_labels=plan.expected_gfd_labels(result, params["strategy"]))
            if conflict:
                output["feasible"] = False
                output["reason"] = "; ".join(x for x in (result["reason"], conflict) if x)
    except PlanningError as exc:
        details = dict((k, getattr(exc, k)) for k in ("profile", "model", "gpu_index", "alternatives", "config_name",
                                                      "source", "known") if getattr(exc, k, None) is not None)
        module.fail_json(msg=str(exc), **details)
    if module._diff:
        output["diff"] = plan.plan_diff(result)
    if not output["feasible"] and params["fail_on_infeasible"]:
        module.fail_json(msg="MIG layout is not feasible: %s" % output["reason"], **dict(
            (k, v) for k, v in output.items() if k != "changed"))
    module.exit_json(**output)


if __name__ == "__main__":
    main()
