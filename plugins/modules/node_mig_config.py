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
- name: Is all-balanced valid for this node?
  gpufleet.gpu_operator.node_mig_config:
    name: gpu-node-1
    config: all-balanced
    action: preflight

- name: Apply it (after gpufleet.gpu_operator.gpu_drain)
  gpufleet.gpu_operator.node_mig_config:
    name: gpu-node-1
    config: all-balanced
    timeout: 600

- name: Un-wedge a node stuck in pending
  gpufleet.gpu_operator.node_mig_config:
    name: gpu-node-1
    action: unwedge
"""

RETURN = r"""
plan:
  description: The pre-flight (model, strategy, config_source, current, target, expected_resources,
    expected_gfd_labels, reset_or_reboot, at_target, errors).
  returned: for preflight, apply, unwedge and rollback (not when rollback has nothing to do)
  type: dict
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
  description: Whether MIG Manager went through C(rebooting).
  returned: for apply
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
unwedged:
  description: Deploy labels restored and the config re-triggered.
  returned: for unwedge
  type: dict
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps, labels_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step, rollout


def _diff(before, after):
    return {"before": {node_step.MIG_CONFIG_LABEL: before}, "after": {node_step.MIG_CONFIG_LABEL: after}}


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
        module.fail_json(msg="node %s: MIG config %s ended %s (states seen: %s)" % (
            name, target, step["final"], ", ".join(step["states"]) or "none"), **result)
    result["mismatches"] = step["mismatches"]
    if step["mismatches"]:
        result["diagnostics"] = node_step.collect_diagnostics(ops, name, ctx.namespace, params["log_lines"])
        module.fail_json(msg="node %s: MIG Manager reported success for %s but %s" % (
            name, target, "; ".join(step["mismatches"])), **result)


def planned_or_fail(module, ctx, ops, name, target, result):
    """Pre-flight ``target`` before any change: a bad config name or layout fails here, with the node named."""
    plan = rollout.plan_one(ctx, ops, name, target, module.params["hardware"])
    result["plan"] = plan
    if plan["errors"]:
        module.fail_json(msg="; ".join(plan["errors"]), **dict(result, changed=False))
    return plan


def act(module):
    params = module.params
    name, action, target = params["name"], params["action"], params["config"]
    ctx = rollout.Context(lambda: KubeOps(module.new_api_client()), {
        "operator_namespace": params["operator_namespace"], "strategy": params["strategy"],
        "apply_timeout": params["timeout"], "log_lines": params["log_lines"]})
    ops = ctx.ops
    if action == "diagnose":
        module.exit_json(changed=False, diagnostics=node_step.collect_diagnostics(
            ops, name, ctx.namespace, params["log_lines"]))
    if action in ("preflight", "apply"):
        plan = rollout.plan_one(ctx, ops, name, target, params["hardware"])
        result = dict(changed=False, plan=plan)
        if plan["errors"]:
            module.fail_json(msg="; ".join(plan["errors"]), **result)
        if action == "preflight" or plan["at_target"]:
            module.exit_json(**result)
        node = ops.get_node(name)
        before = labels_of(node).get(node_step.MIG_CONFIG_LABEL)
        result.update(changed=True, diff=_diff(before, target))
        if module.check_mode:
            module.exit_json(**result)
        step_or_fail(module, ctx, ops, name, target, plan, result)
        module.exit_json(**result)
    node = ops.get_node(name)
    current = labels_of(node).get(node_step.MIG_CONFIG_LABEL)
    if action == "unwedge":
        target = target or current or (node.get("metadata", {}).get("annotations") or {}).get(
            node_step.TARGET_CONFIG_ANNOTATION)
        if not target:
            module.fail_json(msg="node %s has no %s label and no config was given: nothing to re-trigger" % (
                name, node_step.MIG_CONFIG_LABEL))
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
    ), supports_check_mode=True,
        required_if=[("action", "preflight", ["config"]), ("action", "apply", ["config"])])
    module.run(act, node=module.params["name"])


if __name__ == "__main__":
    main()
