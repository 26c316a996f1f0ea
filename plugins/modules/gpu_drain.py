#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_drain
short_description: Cordon a Kubernetes GPU node and evict its GPU pods, PDB-aware, restoring the cordon it found
version_added: 0.1.0
description:
  - Cordons the node and records its prior schedulability in the annotation C(gpufleet.io/prior-unschedulable),
    so O(state=uncordoned) restores exactly what was found; a node an admin had cordoned stays cordoned.
  - Evicts through the Eviction API only the pods that use GPUs (requests or limits of C(nvidia.com/gpu*) or
    C(nvidia.com/mig-*), or a GPU runtime class), or every evictable pod with O(pod_scope=all).
    DaemonSet pods, GPU Operator operands included, are left alone (MIG Manager pauses those itself).
  - Before evicting, lists the PodDisruptionBudgets that would block; retries HTTP 429 refusals until
    O(timeout), then fails with the blocking budgets named and nothing evicted beyond the plan.
  - Waits until the evicted pods are gone, and fails (not warns) when they are not gone by O(timeout).
  - Bare pods and pods with emptyDir volumes block the drain before any change unless O(force) or
    O(delete_emptydir_data) allow them.
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes
  - gpufleet.gpu_operator.node
options:
  state:
    description:
      - V(drained) cordons and evicts; V(cordoned) only cordons (recording the prior state);
        V(uncordoned) restores the schedulability recorded when this module cordoned the node.
      - The states name the node's end state, as Ansible states do (V(present), V(absent)), where
        M(kubernetes.core.k8s_drain) names actions (V(drain), V(cordon), V(uncordon)). They also mean more than
        k8s_drain's, since V(uncordoned) uncordons only a node this module cordoned (a node an administrator cordoned stays
        cordoned), and V(drained) evicts only GPU pods unless O(pod_scope=all).
    type: str
    choices: [drained, cordoned, uncordoned]
    default: drained
  pod_scope:
    description: V(gpu) evicts only pods that use GPUs; V(all) evicts every evictable pod.
    type: str
    choices: [gpu, all]
    default: gpu
  gpu_runtime_classes:
    description: Runtime class names that mark a pod as a GPU pod even without a GPU resource request.
    type: list
    elements: str
    default: [nvidia]
  force:
    description: Also evict pods that no controller manages (they will not be recreated).
    type: bool
    default: false
  delete_emptydir_data:
    description: Also evict pods with emptyDir volumes (their emptyDir data is deleted).
    type: bool
    default: false
  disable_eviction:
    description:
      - Delete pods instead of evicting them, which bypasses PodDisruptionBudgets. Explicit opt-in only.
    type: bool
    default: false
  grace_period:
    description: Termination grace period in seconds for evicted pods (V(0) is honoured); default is the pod's own.
    type: int
  timeout:
    description: Seconds to wait for evictions (retrying PDB refusals) and for the pods to be gone.
    type: int
    default: 300
  retry_delay:
    description: Seconds between eviction retries while a PodDisruptionBudget refuses.
    type: float
    default: 5.0
attributes:
  check_mode:
    support: full
    details: Lists exactly the pods that would be evicted and the budgets that would block; changes nothing.
  diff_mode:
    support: full
    details: Shows the node's schedulability before and after.
notes:
  - The node stays cordoned when the drain fails (blocked or late); the result says so in RV(cordoned).
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
# In a play on the GPU hosts: each host's Kubernetes node is its gpu_node_name, the API is called from the controller.
- name: Drain the GPU workloads of a node
  gpufleet.gpu_operator.gpu_drain:
    name: "{{ gpu_node_name }}"
    timeout: 600
  delegate_to: localhost
  register: drain

- name: Show what a full drain would evict
  gpufleet.gpu_operator.gpu_drain:
    name: gpu-node-01
    pod_scope: all
  delegate_to: localhost
  check_mode: true

- name: Give the node back as it was found
  gpufleet.gpu_operator.gpu_drain:
    name: "{{ gpu_node_name }}"
    state: uncordoned
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: The node name.
  returned: always
  type: str
evicted:
  description: Pods evicted (or deleted, with O(disable_eviction)) by this run.
  returned: when state=drained
  type: list
  elements: dict
  contains: &pod_summary
    namespace:
      description: The pod's namespace.
      returned: always
      type: str
    name:
      description: The pod's name.
      returned: always
      type: str
    uid:
      description: The pod's UID.
      returned: always
      type: str
    gpu_resources:
      description:
        - The GPU resources the pod holds, as Kubernetes counts them (app containers plus sidecar init
          containers, or the larger init container need); a map of resource name to count, zero entries dropped.
      returned: always
      type: dict
      sample: {nvidia.com/mig-1g.10gb: 1}
    reason:
      description: Why the pod is left alone, waited for or blocks the drain; absent for pods to evict.
      returned: in RV(left_alone), RV(terminating) and RV(blockers)
      type: str
      sample: DaemonSet pod
would_evict:
  description: In check mode, the pods that would be evicted.
  returned: check mode, state=drained
  type: list
  elements: dict
  contains: *pod_summary
planned_evictions:
  description: The pods this run planned to evict (the eviction plan; RV(evicted) is what happened).
  returned: when state=drained
  type: list
  elements: dict
  contains: *pod_summary
gone_before_eviction:
  description: Planned pods that were already gone when the eviction was sent (404).
  returned: when state=drained and not check mode
  type: list
  elements: dict
  contains: *pod_summary
left_alone:
  description: Pods left alone, each with a reason (DaemonSet, no GPU, finished, mirror pod).
  returned: when state=drained
  type: list
  elements: dict
  contains: *pod_summary
terminating:
  description: Pods already terminating that the drain waited for.
  returned: when state=drained
  type: list
  elements: dict
  contains: *pod_summary
blockers:
  description: Pods that block the drain before any change (bare pods, emptyDir) with the reason.
  returned: when state=drained
  type: list
  elements: dict
  contains: *pod_summary
blocking_budgets:
  description: PodDisruptionBudgets that allow fewer disruptions than the planned evictions need.
  returned: when state=drained
  type: list
  elements: dict
  sample: [{namespace: team-a, name: trainer-pdb, disruptions_allowed: 0, pods: [team-a/trainer-0]}]
  contains:
    namespace:
      description: The budget's namespace.
      returned: always
      type: str
    name:
      description: The budget's name.
      returned: always
      type: str
    disruptions_allowed:
      description: The budget's C(status.disruptionsAllowed).
      returned: always
      type: int
    pods:
      description: The planned pods (namespace/name) the budget covers.
      returned: always
      type: list
      elements: str
node_unschedulable:
  description: Whether the node was unschedulable (cordoned) before this run.
  returned: when state=drained
  type: bool
cordon_needed:
  description: Whether the node needed a cordon patch (not yet cordoned by this module).
  returned: when state=drained
  type: bool
still_running:
  description: Evicted pods (namespace/name) still present at the deadline.
  returned: on a timeout failure
  type: list
  elements: str
blocked_by:
  description: Budgets (namespace/name) still refusing evictions at the deadline.
  returned: on a PDB-blocked failure
  type: list
  elements: str
not_evicted:
  description: Planned pods that were not evicted because a budget refused until the deadline.
  returned: on a PDB-blocked failure
  type: list
  elements: str
duration_s:
  description: Seconds the run took.
  returned: success
  type: float
cordoned:
  description: Whether the node is cordoned by this module now (true after a drain, also after a failed one).
  returned: when state is drained or cordoned
  type: bool
uncordon:
  description: V(uncordoned), V(left-cordoned) (it was cordoned before us) or V(no-record).
  returned: when state=uncordoned
  type: str
"""

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import unschedulable
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import (
    DrainError,
    NodeDrainer,
    cordon_patch,
    drain_node,
    uncordon_patch,
)


def _diff(before, after):
    return {"before": {"unschedulable": before}, "after": {"unschedulable": after}}


def run(module, drainer):
    state = module.params["state"]
    node = drainer.read_node()
    before = unschedulable(node)
    if state == "uncordoned":
        patch, outcome = uncordon_patch(node)
        after = before if outcome != "uncordoned" else False
        if patch is not None and not module.check_mode:
            drainer.ops.patch_node(drainer.node_name, patch)
        return dict(changed=patch is not None, node=drainer.node_name, uncordon=outcome, diff=_diff(before, after))
    if state == "cordoned":
        patch = cordon_patch(node)
        if patch is not None and not module.check_mode:
            drainer.ops.patch_node(drainer.node_name, patch)
        return dict(changed=patch is not None, node=drainer.node_name, cordoned=True, diff=_diff(before, True))
    result = drain_node(drainer, module.params["timeout"], check_mode=module.check_mode)
    result["diff"] = _diff(before, True)
    return result


def drain(module):
    params = module.params
    drainer = NodeDrainer(module.ops(), params["name"], pod_scope=params["pod_scope"],
                          runtime_classes=params["gpu_runtime_classes"], force=params["force"],
                          delete_emptydir_data=params["delete_emptydir_data"],
                          disable_eviction=params["disable_eviction"], grace_period=params["grace_period"],
                          retry_delay=params["retry_delay"])
    started = time.monotonic()
    try:
        result = run(module, drainer)
    except DrainError as exc:  # its result (evicted, cordoned, blockers...) comes back with the failure
        exc.result.setdefault("changed", bool(exc.result.get("evicted")) or bool(exc.result.get("cordoned")))
        raise
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result


def main():
    module = KubeModule(dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["drained", "cordoned", "uncordoned"], default="drained"),
        pod_scope=dict(type="str", choices=["gpu", "all"], default="gpu"),
        gpu_runtime_classes=dict(type="list", elements="str", default=["nvidia"]),
        force=dict(type="bool", default=False),
        delete_emptydir_data=dict(type="bool", default=False),
        disable_eviction=dict(type="bool", default=False),
        grace_period=dict(type="int"),
        timeout=dict(type="int", default=300),
        retry_delay=dict(type="float", default=5.0),
    ), names={"name": "name"}, numbers={"retry_delay": {"minimum": 0}},
        supports_check_mode=True)
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %s" % params["timeout"])
    if params["grace_period"] is not None and params["grace_period"] < 0:
        module.fail_json(msg="grace_period must be >= 0, got %s" % params["grace_period"])
    module.run(drain, node=params["name"], result=dict(node=params["name"]))


if __name__ == "__main__":
    main()
