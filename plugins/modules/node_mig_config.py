#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_mig_config
short_description: The MIG step for one Kubernetes GPU node - pre-flight, label, follow, verify, diagnose, un-wedge, roll back
version_added: 0.1.0
description:
  - V(preflight) checks, changing nothing, that O(config) exists in the config source MIG Manager uses on the
    node (the ClusterPolicy's custom ConfigMap, else the generated C(<node>-mig-config), else the built-in
    default), that it fits the node's GPUs (hardware facts when given, else GFD labels and the built-in catalog),
    and that the node's MIG strategy can advertise it (under C(single) one uniform profile per node).
  - V(apply) runs the pre-flight, sets C(nvidia.com/mig.config), follows C(nvidia.com/mig.config.state) with a
    watch through C(pending) and C(rebooting) to C(success) or C(failed) within O(timeout) (after C(rebooting),
    until the node is Ready again), then verifies that allocatable and GFD labels match the plan. It does not
    drain; use M(gpufleet.gpu_operator.gpu_drain) before and after it, or M(gpufleet.gpu_operator.mig_rollout).
  - V(diagnose) collects MIG Manager logs, operands left C(paused-for-mig-change) and pods still using GPUs.
  - V(unwedge) restores operands left paused and re-triggers MIG Manager for the node's current target.
  - V(rollback) points the node back at the config recorded before the last change made by this collection.
  - V(unwedge) and V(rollback) pre-flight their config first (a bad one fails before any change) and, like
    V(apply), succeed only once allocatable and GFD labels match the plan.
  - Failures and timeouts return the diagnostics.
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes
  - gpufleet.gpu_operator.node
options:
  action:
    description: What to do, see the description.
    type: str
    choices: [preflight, apply, diagnose, unwedge, rollback]
    default: apply
  config:
    description: MIG config name to apply (required for V(preflight) and V(apply)).
    type: str
  operator_namespace:
    description: Namespace of the GPU Operator when the ClusterPolicy status does not name it.
    type: str
    default: gpu-operator
  strategy:
    description: MIG strategy to plan for; default is the ClusterPolicy's, else the node's label.
    type: str
    choices: [none, single, mixed]
  timeout:
    description: Seconds for MIG Manager to report success or failure.
    type: int
    default: 900
  verify_timeout:
    description: Seconds for allocatable and GFD labels to match the plan after success.
    type: int
    default: 180
  hardware:
    description: Hardware facts of the node as gpu_info returns them (GFD labels and the catalog otherwise).
    type: dict
  log_lines:
    description: Lines of MIG Manager log to include in diagnostics.
    type: int
    default: 100
attributes:
  check_mode:
    support: full
    details: V(apply), V(unwedge) and V(rollback) report what they would change and change nothing.
  diff_mode:
    support: full
    details: Shows the node's C(nvidia.com/mig.config) label before and after.
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
# In a play on the GPU hosts: each host's Kubernetes node is its gpu_node_name, the API is called from the controller.
- name: Is all-balanced valid for this node?
  gpufleet.gpu_operator.node_mig_config:
    name: "{{ gpu_node_name }}"
    config: all-balanced
    action: preflight
  delegate_to: localhost

- name: Apply it (after gpufleet.gpu_operator.gpu_drain)
  gpufleet.gpu_operator.node_mig_config:
    name: "{{ gpu_node_name }}"
    config: all-balanced
    timeout: 600
  delegate_to: localhost

- name: Un-wedge a node stuck in pending
  gpufleet.gpu_operator.node_mig_config:
    name: "{{ gpu_node_name }}"
    action: unwedge
  delegate_to: localhost
"""

RETURN = r"""
plan:
  description: The pre-flight of the node for the config.
  returned: for preflight, apply, unwedge and rollback (not when rollback has nothing to do)
  type: dict
  contains:
    node:
      description: Node name.
      returned: always
      type: str
    target_config:
      description: The MIG config planned.
      returned: always
      type: str
    errors:
      description: Why the node cannot be changed to the target, each naming the node; empty when it can.
      returned: always
      type: list
      elements: str
    model:
      description: GPU model name, or null when the layout could not be planned.
      returned: always
      type: str
    strategy:
      description: The MIG strategy used (the option, else the ClusterPolicy's or the node's).
      returned: when the node was read
      type: str
    current_config:
      description: The node's C(nvidia.com/mig.config) label now.
      returned: when the node was read
      type: str
    current_state:
      description: The node's C(nvidia.com/mig.config.state) label now.
      returned: when the node was read
      type: str
    unschedulable:
      description: Whether the node is cordoned now.
      returned: when the node was read
      type: bool
    cordoned_by_us:
      description: Whether a cordon of this collection is recorded on the node (an interrupted or held change).
      returned: when the node was read
      type: bool
    admin_cordoned:
      description: Whether the node was cordoned by someone else before this collection cordoned it.
      returned: when the node was read
      type: bool
    in_progress_target:
      description: The config of a change in progress (the in-progress annotation), or null.
      returned: when the node was read
      type: str
    previous_config:
      description: The config recorded before the last change (what a rollback returns to), or null.
      returned: when the node was read
      type: str
    config_source:
      description: Where the MIG config comes from (a ConfigMap namespace/name or the built-in default config).
      returned: when the config source was found
      type: str
    hardware_source:
      description: V(nvml) (hardware facts given) or V(gfd labels).
      returned: when the config source was found
      type: str
    gpu_count:
      description: Number of GPUs planned.
      returned: when the layout was planned
      type: int
    current:
      description: The current config label and layout as text.
      returned: when the layout was planned
      type: str
      sample: all-disabled (no MIG devices)
    target:
      description: The target layout as text, per run of equal GPUs.
      returned: when the layout was planned
      type: str
      sample: "8x[1g.18gb:2 2g.35gb:1 3g.71gb:1]"
    expected_resources:
      description: Extended resources the node should advertise after the change, a map of resource name to count.
      returned: when the layout was planned
      type: dict
    expected_gfd_labels:
      description: MIG labels GFD should set after the change, a map of label name to value.
      returned: when the layout was planned
      type: dict
    mode_change:
      description: Whether some GPU changes MIG mode.
      returned: when the layout was planned
      type: bool
    reboot_expected:
      description: Whether MIG Manager is expected to reboot the node (a mode change with WITH_REBOOT).
      returned: when the layout was planned
      type: bool
    reset_or_reboot:
      description: V(reboot), V(GPU reset) or V(none (layout only)).
      returned: when the layout was planned
      type: str
    at_target:
      description: Whether the node is already at the target, verified, with nothing of ours left on it.
      returned: when the layout was planned
      type: bool
    half_done:
      description: Whether an earlier change of ours is unfinished on the node (cordon or in-progress marker).
      returned: when the layout was planned
      type: bool
    pods_to_evict:
      description: Pods (namespace/name) the drain would evict.
      returned: when the layout was planned and the pods were listed
      type: list
      elements: str
    blocking_budgets:
      description: PodDisruptionBudgets that would block the drain, as text with what they allow and need.
      returned: when the layout was planned and the pods were listed
      type: list
      elements: str
    drain_blockers:
      description: Pods that would make the drain refuse, with the reason.
      returned: when the layout was planned and the pods were listed
      type: list
      elements: str
states:
  description: The values of C(nvidia.com/mig.config.state) seen, in order.
  returned: for apply, unwedge and rollback
  type: list
  elements: str
final_state:
  description: V(success), V(failed), V(timeout), or V(changed) (someone else changed the label meanwhile).
  returned: for apply, unwedge and rollback
  type: str
rebooted:
  description:
    - Whether the node rebooted during the MIG change (MIG Manager went through C(rebooting), or the node's
      C(status.nodeInfo.bootID) changed).
  returned: for apply, unwedge and rollback
  type: bool
mismatches:
  description: Differences between the plan and allocatable / GFD labels after success.
  returned: for apply, unwedge and rollback
  type: list
  elements: str
diagnostics:
  description: MIG Manager logs, paused deploy labels, pods using GPUs, hints.
  returned: for diagnose, and on failure or timeout
  type: dict
  contains:
    node:
      description: Node name.
      returned: always
      type: str
    error:
      description: Why the node could not be read (then only RV(diagnostics.node), RV(diagnostics.deleted) and RV(diagnostics.hints) may be set).
      returned: when the node could not be read
      type: str
    deleted:
      description: The node no longer exists (it was deleted); RV(diagnostics.hints) says so.
      returned: when the node was deleted
      type: bool
    config:
      description: The node's C(nvidia.com/mig.config) label.
      returned: when the node was read
      type: str
    state:
      description: The node's C(nvidia.com/mig.config.state) label.
      returned: when the node was read
      type: str
    ready:
      description: Whether the node is Ready.
      returned: when the node was read
      type: bool
    unschedulable:
      description: Whether the node is cordoned.
      returned: when the node was read
      type: bool
    paused_deploy_labels:
      description: C(nvidia.com/gpu.deploy.*) labels MIG Manager left paused.
      returned: when the node was read
      type: list
      elements: str
    gpu_allocatable:
      description: The node's allocatable GPU resources, a map of resource name to count (zero entries dropped).
      returned: when the node was read
      type: dict
    pods_error:
      description: Why the node's pods could not be listed.
      returned: when listing the pods failed
      type: str
    mig_manager_logs:
      description: A map of MIG Manager pod (namespace/name) on the node to the tail of its log.
      returned: when the node was read
      type: dict
    gpu_pods_on_node:
      description: Pods (namespace/name) still using GPUs on the node.
      returned: when the node was read
      type: list
      elements: str
    hints:
      description: What to look at next, one line each.
      returned: when the node was read
      type: list
      elements: str
unwedged:
  description: Deploy labels restored and the config re-triggered.
  returned: for unwedge
  type: dict
  contains:
    restored_labels:
      description: The paused C(nvidia.com/gpu.deploy.*) labels set back to C(true).
      returned: always
      type: list
      elements: str
    retriggered:
      description: The MIG config the C(nvidia.com/mig.config) label was set to.
      returned: always
      type: str
    restarted_pods:
      description: MIG Manager pods (namespace/name) deleted so that their DaemonSet restarts them.
      returned: always
      type: list
      elements: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_MIG_CONFIG, labels_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step, preflight, snapshot


def _diff(before, after):
    return {"before": {LABEL_MIG_CONFIG: before}, "after": {LABEL_MIG_CONFIG: after}}


def step_or_fail(module, ctx, ops, name, target, plan, result, retrigger=False):
    """The MIG step (node_step.run_step): label or re-trigger, follow, verify, clear the marker. MIG Manager's
    success comes before the device plugin re-advertises, so a node whose allocatable and GFD labels never
    match the plan is not reported as done; failures come back with the diagnostics."""
    params = module.params
    step = node_step.run_step(ops, name, target, plan, params["timeout"], params["verify_timeout"],
                              retrigger=retrigger)
    if "unwedged" in step["trigger"]:
        result["unwedged"] = step["trigger"]["unwedged"]
    result.update(states=step["states"], final_state=step["final"], rebooted=step["rebooted"])
    if step["final"] != "success":
        result["diagnostics"] = node_step.collect_diagnostics(ops, name, ctx.namespace, params["log_lines"])
        module.fail_json(msg="node %s: MIG config %s ended %s (states seen: %s)%s" % (
            name, target, step["final"], ", ".join(step["states"]) or "none",
            "; " + step["not_running"] if step.get("not_running") else ""), **result)
    result["mismatches"] = step["mismatches"]
    if step["mismatches"]:
        result["diagnostics"] = node_step.collect_diagnostics(ops, name, ctx.namespace, params["log_lines"])
        module.fail_json(msg="node %s: MIG Manager reported success for %s but %s" % (
            name, target, "; ".join(step["mismatches"])), **result)


def planned_or_fail(module, ctx, ops, name, target, result):
    """Pre-flight ``target`` before any change: a bad config name or layout fails here, with the node named."""
    plan = preflight.plan_one(ctx, snapshot.read_node(ops, ctx, name), name, target, module.params["hardware"])
    result["plan"] = plan
    if plan["errors"]:
        module.fail_json(msg="; ".join(plan["errors"]), **dict(result, changed=False))
    return plan


def act(module):
    params = module.params
    name, action, target = params["name"], params["action"], params["config"]
    ctx = preflight.Context(lambda: KubeOps(module.new_api_client()), {
        "operator_namespace": params["operator_namespace"], "strategy": params["strategy"],
        "apply_timeout": params["timeout"], "log_lines": params["log_lines"]})
    ops = ctx.ops
    if action == "diagnose":
        module.exit_json(changed=False, diagnostics=node_step.collect_diagnostics(
            ops, name, ctx.namespace, params["log_lines"]))
    if action in ("preflight", "apply"):
        plan = preflight.plan_one(ctx, snapshot.read_node(ops, ctx, name), name, target, params["hardware"])
        result = dict(changed=False, plan=plan)
        if plan["errors"]:
            module.fail_json(msg="; ".join(plan["errors"]), **result)
        if action == "preflight" or plan["at_target"]:
            module.exit_json(**result)
        node = ops.get_node(name)
        before = labels_of(node).get(LABEL_MIG_CONFIG)
        result.update(changed=True, diff=_diff(before, target))
        if module.check_mode:
            module.exit_json(**result)
        step_or_fail(module, ctx, ops, name, target, plan, result)
        module.exit_json(**result)
    node = ops.get_node(name)
    current = labels_of(node).get(LABEL_MIG_CONFIG)
    if action == "unwedge":
        target = target or current or (node.get("metadata", {}).get("annotations") or {}).get(
            node_step.TARGET_CONFIG_ANNOTATION)
        if not target:
            module.fail_json(msg="node %s has no %s label and no config was given: nothing to re-trigger" % (
                name, LABEL_MIG_CONFIG))
        result = dict(changed=True)
        plan = planned_or_fail(module, ctx, ops, name, target, result)
        if module.check_mode:
            result["unwedged"] = node_step.unwedge(ops, name, target, check_mode=True)
        else:
            step_or_fail(module, ctx, ops, name, target, plan, result, retrigger=True)
        module.exit_json(**result)
    previous = node_step.previous_config(node)
    if not previous:
        module.fail_json(msg="node %s: no previous MIG config recorded (annotation %s); nothing to roll back to"
                         % (name, node_step.PREVIOUS_CONFIG_ANNOTATION))
    result = dict(changed=previous != current, diff=_diff(current, previous))
    if previous == current:
        module.exit_json(**result)
    plan = planned_or_fail(module, ctx, ops, name, previous, result)
    if module.check_mode:
        module.exit_json(**result)
    step_or_fail(module, ctx, ops, name, previous, plan, result)
    module.exit_json(**result)


def main():
    module = KubeModule(dict(
        name=dict(type="str", required=True),
        action=dict(type="str", choices=["preflight", "apply", "diagnose", "unwedge", "rollback"], default="apply"),
        config=dict(type="str"),
        operator_namespace=dict(type="str", default="gpu-operator"),
        strategy=dict(type="str", choices=["none", "single", "mixed"]),
        timeout=dict(type="int", default=900),
        verify_timeout=dict(type="int", default=180),
        hardware=dict(type="dict"),
        log_lines=dict(type="int", default=100),
    ), names={"name": "name", "operator_namespace": "namespace"},
        numbers={"timeout": {"above": 0}, "verify_timeout": {"above": 0}, "log_lines": {"minimum": 0}},
        supports_check_mode=True,
        required_if=[("action", "preflight", ["config"]), ("action", "apply", ["config"])])
    module.run(act, node=module.params["name"])


if __name__ == "__main__":
    main()
