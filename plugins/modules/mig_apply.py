#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_apply
short_description: Apply a MIG layout to this host's GPUs through NVML (hosts without Kubernetes, or break-glass)
version_added: 0.1.0
description:
  - Reads the GPUs through NVML, plans the layout with the same planner as M(gpufleet.gpu_operator.mig_plan) and
    fails before any change when the layout does not fit, names an unknown profile, or names an unknown config.
  - Switches MIG mode where needed and destroys and creates GPU instances (each with one compute instance
    spanning it, as MIG Manager creates them) at explicit placements. Instances the target still wants stay
    where they are when the rest fits around them.
  - Refuses while processes use a GPU it would change and lists them, unless O(force=true).
  - When a MIG mode change stays pending (the GPU needs a reset, or the host a reboot), reports
    RV(reset_required) and the GPUs, warns, and creates that GPU's instances on the next run after the reset.
  - On a failure the GPU being changed is rolled back, nothing further is changed, and the result says for
    every GPU whether it is in its C(old) or C(new) layout (C(partial) only when the rollback failed too).
  - On Kubernetes nodes use the GPU Operator's MIG Manager (node label C(nvidia.com/mig.config)) instead, so the
    device plugin and GFD are paused around the change.
author:
  - gpufleet contributors (@gpufleet)
requirements:
  - nvidia-ml-py (pynvml) and the NVIDIA driver's libnvidia-ml.so.1 on the managed host; root
extends_documentation_fragment:
  - gpufleet.gpu_operator.attributes
options:
  config_name:
    description: MIG config name, for example C(all-balanced), C(all-1g.18gb), C(all-disabled).
    type: str
  config:
    description:
      - A mig-parted v1 config as a dict, as YAML text, or as the path of a YAML file on the managed host.
      - Without it, O(config_name) is looked up in the config MIG Manager (v0.14 and later) generates from the hardware.
    type: raw
  config_source:
    description: Name of the config's origin used in messages.
    type: str
  mig_devices:
    description: 'Profile to count applied to every GPU, for example C({"1g.18gb": 7}).'
    type: dict
  force:
    description: Change GPUs even while processes use them (those processes lose their GPU).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Makes no NVML write; returns the plan and the actions it would take.
  diff_mode:
    support: full
    details: Each GPU's MIG mode and instances before and after.
"""

EXAMPLES = r"""
- name: Split every GPU of a standalone host into all-balanced
  gpufleet.gpu_operator.mig_apply:
    config_name: all-balanced
  become: true

- name: A custom layout on every GPU of an H100 80GB host
  gpufleet.gpu_operator.mig_apply:
    mig_devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
  become: true
  register: mig

- name: Tell the operator a reset is pending
  ansible.builtin.debug:
    msg: "GPUs {{ mig.reset_required_gpus }} need a reset (nvidia-smi -r) or a reboot"
  when: mig.reset_required

- name: Back to whole GPUs
  gpufleet.gpu_operator.mig_apply:
    config_name: all-disabled
  become: true
"""

RETURN = r"""
plan:
  description: The plan applied (see M(gpufleet.gpu_operator.mig_plan) RV(gpufleet.gpu_operator.mig_plan#module:plan)).
  returned: success or when the layout could not be applied
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
        - GPUs MIG Manager would reset (every GPU of the host when any GPU's MIG mode changes; empty otherwise).
          This module itself resets none; see RV(reset_required_gpus).
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
          description: Whether MIG Manager would reset this GPU with the others (any GPU of the node changing MIG mode).
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
gpu_states:
  description:
    - A map of GPU index to its state, C(unchanged), C(new) (target applied), C(old) (untouched or rolled back),
      C(pending-reset) (MIG mode change waits for a reset), or C(partial) (rollback failed; inspect with gpu_info).
  returned: always when the plan was computed
  type: dict
  sample: {"0": "new", "1": "pending-reset"}
actions:
  description: NVML changes made, or in check mode the ones that would be made.
  returned: success
  type: list
  elements: str
reset_required:
  description: Whether some GPU's MIG mode change waits for a GPU reset or a reboot.
  returned: success
  type: bool
reset_required_gpus:
  description: Indices of those GPUs.
  returned: success
  type: list
  elements: int
mismatches:
  description:
    - GPUs whose NVML state after applying is not the plan's target.
  returned: when the check after applying failed
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      returned: always
      type: int
    mig_enabled:
      description: Whether MIG is on now; null when the GPU is missing from NVML's answer.
      returned: always
      type: bool
    mig_pending:
      description: Whether MIG will be on after a GPU reset; null when the GPU is missing.
      returned: always
      type: bool
    current:
      description: The GPU's instances now, a map of profile name to count; null when the GPU is missing.
      returned: always
      type: dict
    target_mig_enabled:
      description: Whether the plan wants MIG on.
      returned: always
      type: bool
    target:
      description: The plan's layout, a map of profile name to count.
      returned: always
      type: dict
    text:
      description: The difference in words, naming the GPU.
      returned: always
      type: str
      sample: GPU 0 has MIG on with 3g.71gb:2, wants MIG on with 1g.18gb:7
holders:
  description: Processes using GPUs the plan changes.
  returned: when processes were found
  type: list
  elements: dict
  contains:
    gpu:
      description: GPU index.
      returned: always
      type: int
    pid:
      description: Process id.
      returned: always
      type: int
    name:
      description: Process name, or null.
      returned: always
      type: str
    gpu_instance_id:
      description: GPU instance the process runs in, or null (whole GPU).
      returned: always
      type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import apply as nvml_apply
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import session as nvml
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan as planner
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import verify as mig_verify
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import parse_profile


def _config(params):
    config, source = params["config"], params["config_source"]
    if isinstance(config, str) and "\n" not in config and os.path.isfile(config):
        with open(config) as handle:
            return handle.read(), source or config
    return config, source or ("the given config" if config is not None else None)


def _holder_text(found):
    texts = []
    for holder in found:
        where = " on GPU instance %s" % holder["gpu_instance_id"] if holder["gpu_instance_id"] is not None else ""
        texts.append("GPU %d: pid %d (%s)%s" % (holder["gpu"], holder["pid"], holder["name"] or "unknown", where))
    return "; ".join(texts)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config_name=dict(type="str"),
            config=dict(type="raw"),
            config_source=dict(type="str"),
            mig_devices=dict(type="dict"),
            force=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("config_name", "mig_devices"), ("mig_devices", "config")],
        required_one_of=[("config_name", "mig_devices")],
        supports_check_mode=True,
    )
    if not nvml.HAS_PYNVML:
        module.fail_json(msg=missing_required_lib("nvidia-ml-py"), exception=nvml.PYNVML_IMPORT_ERROR)
    params = module.params
    try:
        with nvml.NvmlSession() as session:
            hardware = {"gpus": [session.read_gpu(i) for i in range(session.device_count())]}
            if not hardware["gpus"]:
                module.fail_json(msg="no GPU found on this host; nothing to apply")
            config, source = _config(params)
            plan = planner.plan_node(hardware, config_name=params["config_name"], config=config,
                                     mig_devices=params["mig_devices"], config_source=source)
            if not plan["feasible"]:
                module.fail_json(msg="MIG layout is not feasible, nothing changed: %s" % plan["reason"], plan=plan)
            partial = sorted(set(p for e in plan["gpus"] for p in e["target"] if parse_profile(p).c != parse_profile(p).g))
            if partial:
                module.fail_json(msg="compute-instance profiles %s are applied by MIG Manager (mig-reconfigure.yml); this "
                                     "module creates GPU instances with one compute instance spanning each, nothing "
                                     "changed" % ", ".join(partial), plan=plan)
            result = dict(changed=plan["changed"], plan=plan, reset_required=False, reset_required_gpus=[],
                          gpu_states=dict((e["index"], "unchanged") for e in plan["gpus"]))
            if module._diff:
                result["diff"] = planner.plan_diff(plan)
            pending = [e["index"] for e in plan["gpus"] if e["reset_pending"]]
            if not plan["changed"] or module.check_mode:
                result["actions"] = nvml_apply.planned_actions(plan)
                result["reset_required"] = bool(pending)
                result["reset_required_gpus"] = pending
                module.exit_json(**result)
            found = nvml_apply.holders(plan, hardware)
            if found:
                result["holders"] = found
                if not params["force"]:
                    module.fail_json(msg="processes are using GPUs this layout changes, nothing changed (force=true "
                                         "to proceed): %s" % _holder_text(found), **result)
                module.warn("changing GPUs in use (force=true): %s" % _holder_text(found))
            try:
                applied = nvml_apply.apply_plan(session, plan, hardware)
            except nvml_apply.ApplyError as exc:
                states = exc.states
                module.fail_json(msg="applying the MIG layout failed: %s. GPUs in their new layout: %s; in their old "
                                     "layout: %s%s" % (exc, [i for i, s in states.items() if s == "new"] or "none",
                                                       [i for i, s in states.items() if s in ("old", "unchanged")] or "none",
                                                       "; NOT restored: %s" % [i for i, s in states.items() if s == "partial"]
                                                       if "partial" in states.values() else ""),
                                 plan=plan, gpu_states=states)
            result.update(gpu_states=applied["states"], actions=applied["actions"],
                          reset_required=bool(applied["reset_required"]), reset_required_gpus=applied["reset_required"])
            if applied["reset_required"]:
                module.warn("GPUs %s: the MIG mode change is pending until the GPU is reset (nvidia-smi -r) or the "
                            "host reboots; their instances are created by the next run after that"
                            % applied["reset_required"])
            # Verify what NVML now reports against the target (the same comparison as the rollout's hardware check).
            applied_new = [i for i, state in applied["states"].items() if state == "new"]
            now = {"gpus": [session.read_gpu(i, processes=False) for i in applied_new]}
            problems = mig_verify.mismatches(now, plan, indices=applied_new)
            if problems:
                module.fail_json(msg="after applying, NVML disagrees with the plan: %s"
                                     % "; ".join(p["text"] for p in problems), mismatches=problems, **result)
    except PlanningError as exc:
        module.fail_json(msg="%s; nothing changed" % exc)
    except nvml.NvmlError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
