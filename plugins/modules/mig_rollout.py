#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_rollout
short_description: Plan a MIG config change for GPU nodes, or roll it over them a few nodes at a time
version_added: 0.1.0
description:
  - O(phase=plan) pre-flights every node in O(nodes) without changing anything - the config exists in the
    source MIG Manager reads on that node (the ClusterPolicy's custom ConfigMap, the generated
    C(<node>-mig-config), or the built-in default), the layout fits the node's GPUs, the node's MIG strategy
    can advertise it, which pods would be evicted and which PodDisruptionBudgets would block - and returns
    the plan as data and as a printable table.
  - O(phase=apply) reconfigures the nodes in the order given, at most O(max_unavailable) at a time (the next
    starts when one finishes) - re-plan the node, drain (GPU pods, PDB-aware), set C(nvidia.com/mig.config),
    follow C(nvidia.com/mig.config.state) with a watch until success or failure (through C(rebooting) until the
    node is Ready again), verify allocatable and GFD labels against the plan, restore the cordon found. After
    the first failure (or a node whose fresh plan is invalid) no further node starts; those in flight finish.
  - With O(hold_cordon=true) verified nodes stay cordoned (result C(verified)) until O(phase=release), given
    the O(rows) of the apply and the O(hardware) read from the hosts after the change, compares the GPUs
    themselves with the target and uncordons - or leaves the node cordoned and failed when they disagree.
  - A node that fails stays cordoned, with diagnostics (MIG Manager logs, operands left paused, pods still
    holding GPUs). Nodes already at the target are skipped; half-done nodes are finished.
  - O(phase=plan) also cuts the nodes to change into the canary and the batches (RV(batches)), sized by
    O(max_unavailable).
  - Never strands a workload by default - when the pods to evict ask for more of a GPU resource (whole GPUs, MIG
    slices, time-sliced C(.shared) resources) than the cluster will have free after the change, counted node by
    node, O(phase=plan), O(phase=apply) and check mode fail before any change, naming the pods, what each asks
    for and the room there will be (RV(stranded)). O(allow_unschedulable=true) accepts it as a warning.
  - The nodes run in the order of O(nodes) unless that order would leave evicted pods without room on the way (a
    node whose MIG-slice pods need slices another node only offers after its change, whole-GPU pods whose room turns
    into slices first) and another order does not; that order is used and RV(order_note) says so. The order is
    found by replaying the canary and the window (or the held batches) on a model of the cluster - changed nodes
    offer the new layout, unchanged ones the old, nodes in flight nothing, each pod on one node - with a bounded
    depth-first search, the given order first.
  - During O(phase=apply) the room is counted again before each node starts (the cluster changes during a
    rollout); a node whose pods no longer fit is not started (result C(not started), nothing of it touched)
    and the others go on.
  - Used by the C(gpufleet.gpu_operator.mig_reconfigure) role, which runs the canary and the batches under a Lease
    that M(gpufleet.gpu_operator.mig_rollout_lock) takes and releases; each step here only renews it.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
options:
  nodes:
    description: Node names to plan or reconfigure.
    type: list
    elements: str
    required: true
  config:
    description:
      - The MIG config name to apply (for example V(all-balanced) or V(all-1g.10gb)), resolved per node.
      - With O(profiles) or O(node_configs), the config of the nodes they do not name (the entries win); without it
        those nodes are left out (RV(unmatched_nodes)). One of O(config), O(profiles) or O(node_configs) is required.
    type: str
  profiles:
    description:
      - Per-group targets - a list of entries, each a dict with C(profile) (the MIG config name for the nodes it
        matches) and exactly one of C(group) (a key of O(groups), an inventory group) or C(node_selector) (a
        Kubernetes label selector matched against the node's labels as the cluster gives them - a string in
        kubectl's syntax such as V(nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,pool in (a,b)), or a dict of label
        to value that must all be equal).
      - A node two entries match is refused before any change, naming the node and both entries. A node no entry
        matches takes O(config), or is left out of the plan and the rollout when O(config) is not given.
      - The entries are matched once per call, when the nodes are read. The
        C(gpufleet.gpu_operator.mig_reconfigure) role matches them with O(phase=plan) only and gives the later
        calls the plan's RV(node_configs), so that a label the rollout itself changes does not change a target.
      - Bad entries (not a dict, unknown fields, neither or both of C(group) and C(node_selector), an empty or
        malformed C(profile) or selector, a group not in O(groups), more than 100 entries) are refused before any
        API call, naming the entry (V(profiles[N]), from 0) and the field.
    type: list
    elements: raw
  groups:
    description:
      - For the C(group) entries of O(profiles), inventory group name -> the node names of its GPU hosts.
    type: dict
  node_configs:
    description:
      - Node name -> MIG config, as RV(node_configs) of O(phase=plan) returns them; wins over O(config). Not with
        O(profiles).
    type: dict
  phase:
    description: V(plan) only reads; V(apply) reconfigures the nodes; V(release) finishes nodes held by O(hold_cordon).
    type: str
    choices: [plan, apply, release]
    default: apply
  max_unavailable:
    description:
      - How many nodes may be in progress (cordoned) at once - a count (V(2)) or a percentage of O(nodes), rounded up
        to at least one node (V(25%)); all of O(nodes) when omitted.
      - With O(phase=apply), the sliding window; with O(phase=plan), the size of the RV(batches).
    type: raw
  canary:
    description: With O(phase=plan), whether RV(batches) starts with the first node to change alone.
    type: bool
    default: true
  allow_unschedulable:
    description:
      - Go on when the pods to evict would find no room after the change (they stay Pending until room appears);
        the shortage is then a warning (RV(capacity_warnings)) instead of a failure before any change.
    type: bool
    default: false
  hold_cordon:
    description: With O(phase=apply), leave verified nodes cordoned for O(phase=release) (hardware check before uncordon).
    type: bool
    default: false
  rows:
    description:
      - With O(phase=release), the O(rows) an apply with O(hold_cordon=true) returned.
      - When omitted, the nodes of O(nodes) held are found from the cluster (cordoned by the rollout, the
        C(gpufleet.io/mig-target-config) marker at the node's target config, MIG Manager at success, allocatable and GFD labels
        matching the plan); the others are left alone.
    type: list
    elements: dict
  operator_namespace:
    description: Namespace of the GPU Operator, used when the ClusterPolicy status does not name it.
    type: str
    default: gpu-operator
  strategy:
    description: MIG strategy to plan for; default is the ClusterPolicy's C(spec.mig.strategy), else the node's label.
    type: str
    choices: [none, single, mixed]
  pod_scope:
    description: V(gpu) evicts only pods that use GPUs; V(all) every evictable pod.
    type: str
    choices: [gpu, all]
    default: gpu
  force:
    description: Also evict pods no controller manages.
    type: bool
    default: false
  delete_emptydir_data:
    description: Also evict pods with emptyDir volumes.
    type: bool
    default: false
  grace_period:
    description: Termination grace period for evicted pods, in seconds.
    type: int
  drain_timeout:
    description: Seconds per node for evictions (PDB refusals are retried) and for the pods to be gone.
    type: int
    default: 600
  eviction_retry_delay:
    description: Seconds between eviction retries while a budget refuses.
    type: float
    default: 5.0
  apply_timeout:
    description:
      - Seconds per node for MIG Manager to report success (including a reboot).
      - Also how long a node waits, before its drain, for its MIG Manager pod to run the DaemonSet's current template
        while a ClusterPolicy change is still rolling out.
    type: int
    default: 900
  verify_timeout:
    description: Seconds per node for allocatable and GFD labels to match the plan after success.
    type: int
    default: 180
  unwedge_on_timeout:
    description: When a node does not finish in time, restore operands left paused and re-trigger MIG Manager once.
    type: bool
    default: false
  rollback_on_failure:
    description:
      - When MIG Manager fails on a node, point it back at the config it had before, follow it and verify
        allocatable and GFD labels against that config's plan; the row's C(rollback) says how it went
        (C(result), C(verified), C(mismatches)). The node stays cordoned for inspection either way.
    type: bool
    default: false
  progress_file:
    description:
      - With O(phase=apply) or O(phase=release), a JSON file this run keeps current (replaced atomically at each
        change) with each node's step - C(draining), C(labelled), C(pending), C(rebooting), C(applied), C(verifying),
        then C(done), C(verified) (held for O(phase=release)), C(failed), C(invalid), C(unchanged) or C(not started) -
        when the step began and the seconds since the node started.
      - "When the module runs on the controller (C(delegate_to: localhost), as the C(gpufleet.gpu_operator.mig_reconfigure)
        role runs it), its action prints each change as one line while the nodes run - in the terminal and in an AWX
        job's output - for example C(MIG rollout: 12:40:03  gpu-node-1  pending  +7s); a temporary file is used
        when this is omitted."
      - The directory must exist on the host that runs the module.
      - The record is for people watching; the nodes are the truth. When the first write fails (a full disk, no
        permission), the call refuses before any change, naming the file. A write that fails later never fails a
        node; the rollout goes on, later steps try again, and the call warns (RV(progress_error)).
    type: path
  progress_interval:
    description:
      - Seconds between looks at the progress record by the controller (see O(progress_file)); V(0) prints nothing.
      - Not used with C(async) or on a host other than the controller (the record is still written when
        O(progress_file) is given).
    type: float
    default: 2.0
  events:
    description:
      - With O(phase=apply) or O(phase=release), post a Kubernetes Event (core/v1, namespace C(default), source
        component C(gpufleet)) on each node as it moves - reason C(MigReconfigureDraining) when it starts, then
        C(MigReconfigureVerified) or C(MigReconfigureFailed) - so C(kubectl describe node) shows what the rollout did.
      - Two API requests per changed node, posted by a background thread (a node's step never waits for one);
        needs C(create) on C(events) in namespace C(default) (C(rbac/mig-reconfigure.yaml)). An Event that cannot
        be posted is a warning, never a failure (RV(events)).
    type: bool
    default: true
  follow_timeout:
    description:
      - With O(phase=apply), seconds to follow the pods the drains evicted after the last node, until each has a
        Running replacement (a new pod of the same ReplicaSet, StatefulSet or Job, matched by the controller's
        uid); each row then says how many came back and on which nodes, and which are still Pending with the
        scheduler's reason (C(follow) of RV(rows)). V(0) looks once and does not wait.
      - One list and one watch of the evicted pods' namespaces, not a request per pod.
    type: int
    default: 60
  hardware:
    description:
      - Hardware facts per node name (C(gpus) as gpu_info returns them) - planned against with O(phase=plan) and
        O(phase=apply), compared with the target with O(phase=release); GFD labels and the catalog otherwise.
    type: dict
  lock:
    description:
      - The rollout Lease (see M(gpufleet.gpu_operator.mig_rollout_lock)), renewed while the nodes run.
      - The C(gpufleet.gpu_operator.mig_reconfigure) role takes and releases it with
        M(gpufleet.gpu_operator.mig_rollout_lock) and passes only what renewal needs; O(lock.take) and
        O(lock.release) remain for playbooks that call this module alone.
      - With O(lock.take=true) this call takes it first (a rollout's first call; saves a module run), and a live
        Lease of another holder stops it before any node is touched.
    type: dict
    suboptions:
      namespace:
        description: Namespace of the Lease.
        type: str
        default: gpu-operator
      name:
        description: Name of the Lease.
        type: str
        default: gpufleet-mig-rollout
      holder:
        description: Holder identity used when the lease was taken.
        type: str
        required: true
      duration:
        description: Lease duration in seconds.
        type: int
        default: 120
      take:
        description: Take the Lease before any node starts (or renew it when this holder has it already).
        type: bool
        default: false
      break_lock:
        description: With O(lock.take=true), take the Lease even from a live holder. Only when that holder is known to be gone.
        type: bool
        default: false
      description:
        description: With O(lock.take=true), free text stored on the Lease (what is rolled out), shown to a refused rollout.
        type: str
        default: ''
      release:
        description: Release the Lease when this call ends (the last call of a rollout; saves a module run).
        type: bool
        default: false
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: With O(phase=apply), returns the plan of the batch and changes nothing.
  action:
    description: Has a controller-side action (it prints each node's step while the nodes run, O(progress_file)).
    support: full
  async:
    description: Supports being used with the C(async) keyword.
    support: full
    details: With C(async) no progress line is printed; the O(progress_file) record is still kept when given.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: partial
    details: The plan (O(phase=plan) and check mode) shows per node the C(nvidia.com/mig.config) label and MIG layout
      now and after, and the pods the change would evict.
"""

EXAMPLES = r"""
# Kubernetes node names are the GPU hosts' gpu_node_name (gpu_node_names falls back to the host name).
- name: Plan all-balanced on every GPU node of the play
  gpufleet.gpu_operator.mig_rollout:
    nodes: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
    config: all-balanced
    phase: plan
  run_once: true
  delegate_to: localhost
  register: mig_plan

- name: Reconfigure two nodes, one at a time
  gpufleet.gpu_operator.mig_rollout:
    nodes: [gpu-node-01, gpu-node-02]
    config: all-balanced
    max_unavailable: 1
    lock: {holder: "rollout-42", take: true, release: true, description: "all-balanced on 2 nodes"}
  run_once: true
  delegate_to: localhost

- name: Plan two node pools to two configs in one plan (H100 by label, A100 by inventory group)
  gpufleet.gpu_operator.mig_rollout:
    nodes: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
    profiles:
      - node_selector: nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
        profile: all-1g.10gb
      - group: a100_nodes
        profile: all-balanced
    groups:  # the role gives each group's GPU hosts by node name: groups[name] | gpu_node_names(hostvars)
      a100_nodes: [gpu-node-03, gpu-node-04]
    phase: plan
  run_once: true
  delegate_to: localhost
  register: pools_plan

- name: Roll out what that plan chose for each node
  gpufleet.gpu_operator.mig_rollout:
    nodes: "{{ pools_plan.order }}"
    node_configs: "{{ pools_plan.node_configs }}"
    max_unavailable: 2
  run_once: true
  delegate_to: localhost

- name: Reconfigure a node and keep it cordoned for a hardware check
  gpufleet.gpu_operator.mig_rollout:
    nodes: [gpu-node-02]
    config: all-balanced
    hold_cordon: true
  run_once: true
  delegate_to: localhost
  register: held

- name: Read the GPUs on the node's host
  gpufleet.gpu_operator.gpu_info:
    processes: false
  run_once: true
  delegate_to: gpu-node-02.example.com
  register: node02_gpus

- name: Compare the hardware with the target, then uncordon
  gpufleet.gpu_operator.mig_rollout:
    phase: release
    nodes: [gpu-node-02]
    config: all-balanced
    rows: "{{ held.rows }}"
    hardware: {gpu-node-02: {gpus: "{{ node02_gpus.gpus }}"}}
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
node_configs:
  description: Each planned node's target MIG config (node name -> config), from O(node_configs), O(profiles) or O(config).
  returned: phase=plan or check mode
  type: dict
  sample: {gpu-h100-1: all-1g.10gb, gpu-a100-1: all-balanced}
unmatched_nodes:
  description: Nodes of O(nodes) that no entry of O(profiles) matched while O(config) is not given; left out, unchanged.
  returned: phase=plan or check mode
  type: list
  elements: str
plan:
  description: The pre-flight of every node, in O(nodes) order (after an apply, of the nodes started).
  returned: always
  type: list
  elements: dict
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
plan_table:
  description: The plan as aligned text lines.
  returned: always
  type: list
  elements: str
invalid_nodes:
  description: Nodes whose plan is invalid (nothing is changed anywhere when this is not empty).
  returned: always
  type: list
  elements: str
capacity_warnings:
  description:
    - GPU resources the pods to evict ask for in total that the cluster will not have free after the change
      (they would stay Pending), counted per resource node by node, one line each. The module fails on them
      unless O(allow_unschedulable=true).
  returned: phase=plan or check mode, or when the rollout is refused for them
  type: list
  elements: str
order:
  description:
    - The nodes to change in the order they run - with O(phase=plan) or check mode the order of RV(batches), with
      O(phase=apply) the order the nodes were started in (the rows' order).
    - O(nodes)' order unless it would leave pods the rollout evicts without room on the way and another order does
      not (RV(order_note) says so).
  returned: phase=plan or apply, or check mode
  type: list
  elements: str
  sample: ["gpu-node-2", "gpu-node-1"]
order_note:
  description:
    - Why the order differs from O(nodes) (C(order changed to avoid stranding - ...), naming the pods the given order
      would leave without room and when), or, when no order keeps every evicted pod placed at every step, that line
      (also a warning; the check before each node then stops a node whose pods find no room); null otherwise.
  returned: phase=plan or apply, or check mode
  type: str
  sample: "order changed to avoid stranding: gpu-node-2, gpu-node-1 (canary gpu-node-2); in the given order (gpu-node-1,
    gpu-node-2) when gpu-node-1 starts, ml/infer-0 (1 nvidia.com/mig-1g.10gb) would find no room"
stranded:
  description:
    - The same shortages as data - C(resource), C(wanted) (what the pods to evict ask for in all), C(room) (free
      after the change) and C(pods) (C(pod) as namespace/name, C(asks)).
  returned: phase=plan or check mode, or when the rollout is refused for them
  type: list
  elements: dict
  sample: [{"resource": "nvidia.com/gpu", "wanted": 2, "room": 0, "pods": [{"pod": "ml/train-0", "asks": 2}]}]
  contains:
    resource:
      description: The GPU resource that falls short (time-sliced C(.shared) names included).
      returned: always
      type: str
    wanted:
      description: How many of it the pods to evict ask for in all.
      returned: always
      type: int
    room:
      description: How many of it the cluster will have free after the change, counted node by node.
      returned: always
      type: int
    pods:
      description: The pods to evict that ask for it.
      returned: always
      type: list
      elements: dict
      contains:
        pod:
          description: The pod, as namespace/name.
          returned: always
          type: str
        asks:
          description: How many of the resource it asks for.
          returned: always
          type: int
batches:
  description:
    - The nodes to change (not at the target), in the order given, as the steps of a rollout - the canary alone
      (with O(canary=true)), then the rest as one step run in a sliding window of RV(window) nodes, or, when
      O(hardware) covers a node to change, in batches of RV(window) nodes held cordoned until their hardware is read.
  returned: phase=plan or check mode
  type: list
  elements: list
  sample: [["gpu-node-1"], ["gpu-node-2", "gpu-node-3"]]
window:
  description: O(max_unavailable) as a number of nodes.
  returned: phase=plan or check mode
  type: int
hold_cordon:
  description: Whether the batches should be applied with O(hold_cordon=true) (hardware facts cover a node to change).
  returned: phase=plan or check mode
  type: bool
held_nodes:
  description: With O(hold_cordon=true), the nodes verified and left cordoned for O(phase=release).
  returned: phase=apply or release, not check mode
  type: list
  elements: str
rows:
  description: One result per node, in the order the nodes were started (RV(order)); that is O(nodes) order unless RV(order_note) says otherwise.
  returned: phase=apply or release, not check mode
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      returned: always
      type: str
    target:
      description: The MIG config this node was to reach (from O(node_configs), O(profiles) or O(config)).
      returned: always
      type: str
    model:
      description: GPU model name, or null.
      returned: always
      type: str
    before:
      description: The node's C(nvidia.com/mig.config) label before the change.
      returned: always
      type: str
    after:
      description: The label after the change (on failure, the label found then).
      returned: always
      type: str
    result:
      description: V(reconfigured), V(verified) (held cordoned), V(unchanged), V(failed), V(invalid) or V(not started).
      returned: always
      type: str
    message:
      description: What happened, naming the node.
      returned: always
      type: str
    evicted:
      description: Pods (namespace/name) the drain evicted.
      returned: except after a release
      type: list
      elements: str
    follow:
      description:
        - Where the pods evicted from this node are at the end of the call (O(follow_timeout)) - replacements are
          new pods of the same controller (ownerReferences uid).
      returned: when the drain evicted pods and O(follow_timeout) was set
      type: dict
      contains:
        evicted:
          description: Pods evicted from the node and followed.
          returned: always
          type: int
        returned:
          description: How many have a replacement Running (or Succeeded, a Job's) again.
          returned: always
          type: int
        returned_on:
          description: A map of node name to how many of the replacements run there.
          returned: always
          type: dict
        pending:
          description: Replacements not running yet.
          returned: always
          type: list
          elements: dict
          contains:
            pod:
              description: The replacement (namespace/name).
              returned: always
              type: str
            replaces:
              description: The evicted pod it replaces (namespace/name).
              returned: always
              type: str
            reason:
              description: The scheduler's message from the C(PodScheduled) condition (why it finds no node), else
                the phase and node it waits on.
              returned: always
              type: str
        not_back:
          description:
            - Evicted pods with no replacement - C(not recreated (no controller)) for a pod no controller manages,
              C(no replacement pod seen) otherwise.
          returned: always
          type: list
          elements: dict
          contains:
            pod:
              description: The evicted pod (namespace/name).
              returned: always
              type: str
            reason:
              description: Why it is not back.
              returned: always
              type: str
    duration_s:
      description: Seconds the node took.
      returned: except after a release without rows
      type: float
    release_s:
      description: Seconds the release of a held node took (O(phase=release) without O(rows)).
      returned: phase=release without rows
      type: float
    states:
      description: The values of C(nvidia.com/mig.config.state) seen, in order.
      returned: when the node was changed
      type: list
      elements: str
    rebooted:
      description:
        - Whether the node rebooted during the MIG change (MIG Manager went through C(rebooting), or the node's
          C(status.nodeInfo.bootID) changed).
      returned: when the MIG step ran
      type: bool
    timings:
      description: Seconds per step.
      returned: when the node was changed
      type: dict
      contains:
        drain_s:
          description: The drain.
          returned: when the drain finished
          type: float
        apply_s:
          description: Labelling and waiting for MIG Manager's success.
          returned: when the MIG step ran
          type: float
        verify_s:
          description: Waiting until allocatable and GFD labels match the plan.
          returned: when the MIG step ran
          type: float
    started_s:
      description: When the node's slot took it (before its fresh plan), in seconds since the module started.
      returned: phase=apply
      type: float
    finished_s:
      description: When the node's slot was free again, in seconds since the module started.
      returned: phase=apply
      type: float
    overhead_s:
      description: Seconds outside the timed steps.
      returned: phase=apply
      type: dict
      contains:
        plan:
          description: The fresh plan before the node starts.
          returned: always
          type: float
        around_steps:
          description: The rest of RV(rows[].duration_s) outside RV(rows[].timings).
          returned: always
          type: float
    uncordon:
      description: V(uncordoned), V(left-cordoned) (it was cordoned before us) or V(no-record).
      returned: when the node was given back
      type: str
    hardware_verified:
      description: Whether the GPUs' own state (O(hardware)) matched the target.
      returned: after a release with hardware facts for the node
      type: bool
    stage:
      description:
        - Where the node failed, V(mig-manager), V(drain), V(apply), V(verify), V(release) or V(api).
        - V(mig-manager) - the node's MIG Manager pod still ran an older template of its DaemonSet (a ClusterPolicy
          change still rolling out) after O(apply_timeout); nothing on the node was changed.
      returned: when result is failed
      type: str
    left_cordoned:
      description: Whether the failed node is left cordoned (V(false) for a node deleted during the rollout).
      returned: when result is failed
      type: bool
    not_ready_during_apply:
      description:
        - The node was NotReady while MIG Manager worked (a reboot, or kubelet stopped for a MIG mode change with a
          host-installed driver); expected, not a failure. A node still NotReady after the apply is not verified.
      returned: when the node was NotReady during the apply
      type: bool
    changed_by_other:
      description: The C(nvidia.com/mig.config) value someone else set while the node was being changed (kept as is).
      returned: when someone else changed the label mid-rollout
      type: str
    blocked_by:
      description: Budgets (namespace/name) that refused evictions until the drain's deadline.
      returned: when the drain failed
      type: list
      elements: str
    unwedged:
      description: What the un-wedge after a timeout did (O(unwedge_on_timeout)).
      returned: when the node was un-wedged
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
    rollback:
      description: How the rollback to the previous config went (O(rollback_on_failure)).
      returned: when the MIG step failed and rollback_on_failure is true
      type: dict
      contains:
        result:
          description: MIG Manager's final state for the previous config, or V(skipped).
          returned: always
          type: str
        config:
          description: The previous config rolled back to.
          returned: when one was recorded
          type: str
        states:
          description: The values of C(nvidia.com/mig.config.state) seen, in order.
          returned: when the rollback ran
          type: list
          elements: str
        verified:
          description: Whether allocatable and GFD labels then matched the previous config's plan.
          returned: always
          type: bool
        mismatches:
          description: What did not match after MIG Manager's success.
          returned: when the rollback ended in success
          type: list
          elements: str
        message:
          description: Why the rollback was skipped.
          returned: when result is skipped
          type: str
    diagnostics:
      description: MIG Manager logs, paused deploy labels, pods using GPUs, hints (as M(gpufleet.gpu_operator.node_mig_config) returns them).
      returned: when result is failed
      type: dict
      contains:
        node:
          description: Node name.
          returned: always
          type: str
        error:
          description:
            - Why the node could not be read (then only RV(rows[].diagnostics.node), RV(rows[].diagnostics.deleted)
              and RV(rows[].diagnostics.hints) may be set).
          returned: when the node could not be read
          type: str
        deleted:
          description: The node no longer exists (it was deleted); RV(rows[].diagnostics.hints) says so.
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
summary_table:
  description:
    - The rows as aligned text lines (node, model, before, after, evicted, back - replacements running of those
      evicted - duration, result), then per node whose evicted pods were followed a line saying how many run
      again and where, and one line per pod still Pending (with the scheduler's reason) or not recreated.
  returned: phase=apply or release, not check mode
  type: list
  elements: str
failed_nodes:
  description: Nodes that failed (left cordoned, with diagnostics in their row) or were not started after one did.
  returned: phase=apply or release, not check mode
  type: list
  elements: str
lock_taken:
  description: With O(lock.take=true), the Lease as taken.
  returned: when lock.take is true and the Lease was taken
  type: dict
  contains:
    holder:
      description: The Lease's C(spec.holderIdentity).
      returned: always
      type: str
    acquired:
      description: The Lease's C(spec.acquireTime) (RFC 3339 MicroTime).
      returned: always
      type: str
    renewed:
      description: The Lease's C(spec.renewTime).
      returned: always
      type: str
    duration_s:
      description: The Lease's C(spec.leaseDurationSeconds).
      returned: always
      type: int
    expires:
      description: When the Lease expires unless renewed (renewed or acquired time plus the duration); null when unknown.
      returned: always
      type: str
    rollout:
      description: The rollout's description (annotation C(gpufleet.io/rollout)), or null.
      returned: always
      type: str
    previous_holder:
      description: The holder of the expired or broken Lease this run took over; null when there was none or it was ours.
      returned: when the Lease existed before this run
      type: str
lock_holder:
  description: When the Lease is held by another live rollout (or was lost), that holder; nothing was changed then.
  returned: when the Lease was refused
  type: str
lock_released:
  description: With O(lock.release=true), V(released), V(absent) or V(held by <holder>).
  returned: when lock.release is true and the rollout ran
  type: str
api_requests:
  description: API requests made by this run (total and by verb), to measure what a rollout costs the API server.
  returned: always
  type: dict
  contains:
    total:
      description: Number of requests.
      returned: always
      type: int
    by_verb:
      description: A map of verb (get, list, watch, patch, create...) to its number of requests.
      returned: always
      type: dict
    per_node:
      description: RV(api_requests.total) divided by the number of nodes.
      returned: phase=apply or release, not check mode
      type: float
events:
  description: The Kubernetes Events this run posted on the nodes (O(events)).
  returned: phase=apply or release with O(events=true), not check mode
  type: dict
  contains:
    posted:
      description: Number of Events posted.
      returned: always
      type: int
    errors:
      description: Why an Event could not be posted (the first error per reason); the rollout went on.
      returned: always
      type: list
      elements: str
lock_error:
  description:
    - Why the rollout lost its Lease (taken by another holder or deleted); no node started after that, and the call
      failed naming the Lease.
  returned: when the Lease was lost
  type: str
progress_error:
  description:
    - How many writes of the O(progress_file) record failed after the first, and why the last one failed; also a
      warning. The rows of this result are the rollout's outcome either way.
  returned: when a write of the progress record failed
  type: str
  sample: "progress record /tmp/rollout.json: 3 write(s) failed, the last with: No space left on device; it stops
    short of the rollout's end, whose outcome is in this result's rows"
cancelled:
  description:
    - The signal (C(SIGINT) from Ctrl-C or AWX's cancel, C(SIGTERM)) that cancelled the run. ansible-playbook exits at
      once; this call goes on until the nodes in flight reach their recorded state, starts no further node, skips
      following the evicted pods and releases the Lease. Its rows stay in the progress record, the Events and the
      nodes' annotations.
  returned: phase=apply, when cancelled
  type: str
  sample: SIGINT
duration_s:
  description: Seconds the run took.
  returned: phase=apply or release, not check mode
  type: float
timeline:
  description:
    - Where RV(duration_s) went, in seconds. A rollout's wall time beyond its nodes' steps is mostly here and in the
      spread of RV(rows[].finished_s) of the last nodes.
  returned: phase=apply, not check mode
  type: dict
  contains:
    prepare_s:
      description: From the module's start to the first node (the plan again, the capacity check, the cluster view,
        the lock).
      returned: always
      type: float
    pods_listed_s:
      description: Listing the pods whose replacements are followed after the last node.
      returned: when nodes ran
      type: float
    nodes_s:
      description: From the first node taken to the last node done.
      returned: when nodes ran
      type: float
    follow_s:
      description: Following the evicted pods' replacements after the last node.
      returned: when nodes ran
      type: float
    finish_s:
      description: Posting the queued Events, renewing and releasing the lock.
      returned: always
      type: float
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import batches, options, timeline
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import targets as targets_mod
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.rollout import Rollout

D = options.DEFAULTS


def roll(module, entries):
    params = module.params
    configs, default = params["node_configs"] or {}, (params["config"] or "").strip() or None
    targets = [(name, configs.get(name) or params["config"]) for name in params["nodes"] if name]
    selection = targets_mod.Selection(entries, default) if params["profiles"] is not None else None
    engine = Rollout(module.new_api_client, targets, params, observer=timeline.Timeline(), selection=selection)
    if params["phase"] == "plan" or module.check_mode:
        result, error = engine.plan(check_mode=module.check_mode, diff=module._diff)
    else:
        result, error = engine.apply() if params["phase"] == "apply" else engine.release()
    for warning in engine.warnings:
        module.warn(warning)
    if error:
        module.fail_json(msg=error, **result)
    return result


def check_targets(module, nodes):
    """The entries of profiles, checked; every node has a config (node_configs, else config) when there are none."""
    params = module.params
    try:
        entries = targets_mod.check_profiles(params["profiles"], params["groups"])
    except targets_mod.TargetError as exc:
        module.fail_json(msg="%s; nothing was changed" % exc)
    if params["profiles"] is not None:
        return entries
    configs = params["node_configs"] or {}
    for name, config in sorted(configs.items()):
        if not isinstance(config, str) or not targets_mod.LABEL_VALUE.match(config):
            module.fail_json(msg="node_configs.%s must be a MIG config name, got %r" % (name, config))
    missing = [n for n in nodes if n not in configs]
    if missing and not (params["config"] or "").strip():
        module.fail_json(msg="node_configs names no config for %s and config is empty" % ", ".join(missing))
    return entries


def check(module):
    """Bad input refused before any API call, naming the option."""
    params = module.params
    if params["profiles"] is None and not params["node_configs"] and not (params["config"] or "").strip():
        module.fail_json(msg="config is empty: name the MIG config to roll out (e.g. all-balanced)")
    nodes = [n for n in params["nodes"] if n]
    if not nodes:
        module.fail_json(msg="nodes is empty: no GPU node to plan (check the play's hosts or --limit)")
    if len(set(nodes)) != len(nodes):
        module.fail_json(msg="nodes lists a node more than once: %s" % ", ".join(sorted(set(
            n for n in nodes if nodes.count(n) > 1))))
    if params["max_unavailable"] is not None:
        try:
            batches.batch_size(params["max_unavailable"], len(nodes))
        except batches.BatchError as exc:
            module.fail_json(msg=str(exc))
    if params["progress_interval"] < 0:
        module.fail_json(msg="progress_interval must be 0 (no progress lines) or a positive number of seconds, got %s"
                         % params["progress_interval"])
    if params["follow_timeout"] < 0:
        module.fail_json(msg="follow_timeout must be 0 or more seconds, got %s" % params["follow_timeout"])
    for key in ("drain_timeout", "apply_timeout", "verify_timeout"):
        if params[key] <= 0:
            module.fail_json(msg="%s must be a positive number of seconds, got %s" % (key, params[key]))
    return nodes, check_targets(module, nodes)


def main():
    module = KubeModule(dict(
        nodes=dict(type="list", elements="str", required=True),
        config=dict(type="str"),
        profiles=dict(type="list", elements="raw"),
        groups=dict(type="dict"),
        node_configs=dict(type="dict"),
        phase=dict(type="str", choices=["plan", "apply", "release"], default="apply"),
        max_unavailable=dict(type="raw"),
        canary=dict(type="bool", default=True),
        allow_unschedulable=dict(type="bool", default=False),
        hold_cordon=dict(type="bool", default=False),
        rows=dict(type="list", elements="dict"),
        operator_namespace=dict(type="str", default=D["operator_namespace"]),
        strategy=dict(type="str", choices=["none", "single", "mixed"]),
        pod_scope=dict(type="str", choices=["gpu", "all"], default=D["pod_scope"]),
        force=dict(type="bool", default=D["force"]),
        delete_emptydir_data=dict(type="bool", default=D["delete_emptydir_data"]),
        grace_period=dict(type="int"),
        drain_timeout=dict(type="int", default=D["drain_timeout"]),
        eviction_retry_delay=dict(type="float", default=D["eviction_retry_delay"]),
        apply_timeout=dict(type="int", default=D["apply_timeout"]),
        verify_timeout=dict(type="int", default=D["verify_timeout"]),
        unwedge_on_timeout=dict(type="bool", default=D["unwedge_on_timeout"]),
        rollback_on_failure=dict(type="bool", default=D["rollback_on_failure"]),
        progress_file=dict(type="path"),
        progress_interval=dict(type="float", default=options.PROGRESS_INTERVAL),
        events=dict(type="bool", default=True),
        follow_timeout=dict(type="int", default=options.FOLLOW_TIMEOUT),
        hardware=dict(type="dict"),
        lock=dict(type="dict", options=dict(
            namespace=dict(type="str", default=options.LOCK_DEFAULTS["namespace"]),
            name=dict(type="str", default=options.LOCK_DEFAULTS["name"]),
            holder=dict(type="str", required=True),
            duration=dict(type="int", default=options.LOCK_DEFAULTS["duration"]),
            take=dict(type="bool", default=False),
            break_lock=dict(type="bool", default=False),
            description=dict(type="str", default=""),
            release=dict(type="bool", default=False),
        )),
    ), names={"nodes[]": "name", "operator_namespace": "namespace", "lock.name": "name", "lock.namespace": "namespace"},
        numbers={"grace_period": {"minimum": 0}, "eviction_retry_delay": {"minimum": 0}, "lock.duration": {"minimum": 10}},
        mutually_exclusive=[("profiles", "node_configs")], required_one_of=[("config", "profiles", "node_configs")],
        required_by={"groups": "profiles"}, supports_check_mode=True)
    nodes, entries = check(module)
    module.run(lambda m: roll(m, entries), node=nodes)


if __name__ == "__main__":
    main()
