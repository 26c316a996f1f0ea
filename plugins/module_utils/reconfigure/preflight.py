# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The pre-flight of a node, pure over a snapshot.Snapshot: config source, layout fit, strategy, pods to evict,
budgets; and the room the evicted pods will find (capacity) with the node order that strands none (ordering)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import ApiException, active_cluster_policy, annotations_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    LABEL_SHARING_STRATEGY,
    labels_of,
    unschedulable,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan as mig_plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import (
    capacity,
    follow,
    node_step,
    options as rollout_options,
    ordering,
    tables,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import (
    PRIOR_UNSCHEDULABLE_ANNOTATION,
    NodeDrainer,
    public_plan,
)


class RecordingDrainer(NodeDrainer):
    """A NodeDrainer that keeps the pods its last plan read, for the follow-up of the pods it evicts."""

    pods = None

    def plan(self, node=None):
        plan = super(RecordingDrainer, self).plan(node)
        self.pods = plan["_pods"]
        return plan

    def evictions(self, evicted):
        """follow.eviction() of each evicted pod summary (namespace, name, uid), from the pods the plan read."""
        out = []
        for pod in evicted:
            ref = "%s/%s" % (pod["namespace"], pod["name"])
            full = (self.pods or {}).get(ref) or {"metadata": {"namespace": pod["namespace"], "name": pod["name"],
                                                               "uid": pod.get("uid")}}
            out.append(follow.eviction(self.node_name, full))
        return out


# A row's result as the progress record names the node's last step.
FINAL_STEP = {"reconfigured": "done", "verified": "verified", "failed": "failed", "invalid": "invalid",
              "unchanged": "unchanged", "not started": "not started"}


class Context(object):
    """What every node of a run shares: the options, the active ClusterPolicy (read once), per-thread API access
    and the progress record."""

    def __init__(self, ops_factory, options, progress=None):
        self.ops_factory = ops_factory
        self.progress = progress  # a progress.Progress (record file, Events), or None
        self.options = rollout_options.node_options(options)
        self.ops = ops_factory()
        self.policy = active_cluster_policy(self.ops.list_cluster_policies())
        self.namespace = node_step.operator_namespace(self.policy, self.options["operator_namespace"])
        self.with_reboot = node_step.with_reboot(self.policy)
        self.daemonsets = node_step.DaemonSetReads()  # MIG Manager's, checked before each node's drain

    def report(self, node_name, step, message=""):
        if self.progress is not None:
            self.progress.step(node_name, step, message)

    def report_row(self, row):
        """Record a node's outcome as its last progress step; returns ``row``."""
        self.report(row["node"], FINAL_STEP.get(row["result"], row["result"]), row.get("message") or "")
        return row

    def reporter(self, node_name):
        return lambda step, message="": self.report(node_name, step, message)

    def drainer(self, ops, node_name):
        o = self.options
        return RecordingDrainer(ops, node_name, pod_scope=o["pod_scope"], force=o["force"],
                                delete_emptydir_data=o["delete_emptydir_data"], grace_period=o["grace_period"],
                                retry_delay=o["eviction_retry_delay"])


def plan_one(ctx, snap, node_name, target, hardware=None, keep_drain=False):
    """Pre-flight one node over ``snap`` (a snapshot.Snapshot): config source, layout fit, strategy, pods to
    evict, budgets. Reads nothing. ``keep_drain``: the drain plan's raw objects are kept under ``_drain`` (the node,
    its pods, their budgets, as read) for the drain that follows at once; the caller pops it before the entry goes
    into a result."""
    entry = {"node": node_name, "target_config": target, "errors": [], "model": None}
    try:
        node = snap.get_node(node_name)
    except ApiException as exc:
        reason = "not found" if exc.status == 404 else "cannot read (HTTP %s)" % exc.status
        entry["errors"].append("node %s: %s" % (node_name, reason))
        return entry
    labels = labels_of(node)
    annotations = annotations_of(node)
    strategy = ctx.options["strategy"] or node_step.mig_strategy(ctx.policy, node)
    state = node_step.mig_state(node)
    entry.update({"strategy": strategy, "current_config": state["config"], "current_state": state["state"],
                  "unschedulable": unschedulable(node),
                  "cordoned_by_us": PRIOR_UNSCHEDULABLE_ANNOTATION in annotations,
                  "admin_cordoned": annotations.get(PRIOR_UNSCHEDULABLE_ANNOTATION,
                                                    "true" if unschedulable(node) else "false") == "true",
                  "in_progress_target": annotations.get(node_step.TARGET_CONFIG_ANNOTATION),
                  "previous_config": node_step.previous_config(node)})
    try:
        source = node_step.find_config_source(snap, ctx.policy, node_name, ctx.namespace)
    except node_step.MigStepError as exc:
        entry["errors"].append("node %s: %s" % (node_name, exc))
        return entry
    entry["config_source"] = source["source"]
    entry["hardware_source"] = "nvml" if hardware else "gfd labels"
    try:
        hw = hardware or facts.hardware_from_gfd_labels(labels, (node.get("status") or {}).get("allocatable"),
                                                        node_name)
        config = resolve.builtin_config() if source["kind"] == "builtin" else source["text"]
        plan = mig_plan.plan_node(hw, config_name=target, config=config, config_source=source["source"])
    except PlanningError as exc:
        entry["errors"].append("node %s: %s" % (node_name, exc))
        return entry
    entry["model"] = plan["gpus"][0]["model"] if plan["gpus"] else None
    entry["gpu_count"] = len(plan["gpus"])
    entry["current"] = tables.current_text(node, hw)
    entry["target"] = tables.layout_text([g["target"] if g["mig_enabled"] else None for g in plan["gpus"]])
    if not plan["feasible"]:
        entry["errors"].append("node %s: config %s does not fit: %s" % (node_name, target, plan["reason"]))
    try:
        conflict = mig_plan.strategy_conflict(plan, strategy)
        expected = mig_plan.expected_resources(plan, strategy)
        expected_labels = mig_plan.expected_gfd_labels(plan, strategy)
    except PlanningError as exc:
        entry["errors"].append("node %s: %s" % (node_name, exc))
        return entry
    if conflict:
        entry["errors"].append("node %s: config %s under the node's MIG strategy: %s" % (node_name, target, conflict))
    sharing = mig_plan.sharing_conflict(plan, labels.get(LABEL_SHARING_STRATEGY))
    if sharing:
        entry["errors"].append("node %s: config %s: %s" % (node_name, target, sharing))
    entry["expected_resources"] = expected
    entry["expected_gfd_labels"] = expected_labels
    entry["mode_change"] = plan["mode_change_required"]
    entry["reboot_expected"] = bool(plan["mode_change_required"] and ctx.with_reboot)
    entry["reset_or_reboot"] = ("reboot" if entry["reboot_expected"] else "GPU reset") if plan["mode_change_required"] \
        else "none (layout only)"
    # time-sliced/MPS shares folded back into devices by the node's replicas labels, as the check before uncordon does
    verified_now = not node_step.node_mismatches(node, expected, None)
    entry["at_target"] = bool(state["config"] == target and state["state"] == "success" and verified_now
                              and not entry["cordoned_by_us"] and not entry["in_progress_target"])
    entry["half_done"] = bool(entry["cordoned_by_us"] or entry["in_progress_target"])
    if entry["at_target"]:
        entry.update({"pods_to_evict": [], "blocking_budgets": [], "drain_blockers": []})
        return entry
    try:
        raw_drain = ctx.drainer(snap, node_name).plan(node)
        drain_plan = public_plan(raw_drain)
        if keep_drain:
            entry["_drain"] = raw_drain
    except ApiException as exc:
        entry["errors"].append("node %s: cannot list pods/budgets (HTTP %s)" % (node_name, exc.status))
        return entry
    entry["pods_to_evict"] = ["%s/%s" % (p["namespace"], p["name"]) for p in drain_plan["evict"]]
    entry["blocking_budgets"] = ["%s/%s (allows %d, needs %d)" % (b["namespace"], b["name"], b["disruptions_allowed"],
                                                                  len(b["pods"])) for b in drain_plan["blocking_budgets"]]
    entry["drain_blockers"] = ["%s/%s: %s" % (p["namespace"], p["name"], p["reason"]) for p in drain_plan["blockers"]]
    if entry["drain_blockers"]:
        entry["errors"].append("node %s: drain would be refused: %s" % (node_name, "; ".join(entry["drain_blockers"])))
    return entry


def plan_fleet(ctx, snap, targets, hardware_by_node=None):
    """Plan every node of ``targets`` (node name -> config, in order) over one snapshot."""
    hardware_by_node = hardware_by_node or {}
    return [plan_one(ctx, snap, name, target, hardware_by_node.get(name)) for name, target in targets]


def capacity_check(snap, plans, to_change, window, canary=True, hold=False):
    """Shortages of GPU room for the pods the plans evict once every node has changed (none while a plan is
    invalid: nothing runs then), and the node order (ordering.choose_order) when there are none: the order of
    ``to_change`` is kept unless it would leave evicted pods without room on the way and another does not.
    Counted on the snapshot the plans were made from. Returns (stranded, choice or None)."""
    if any(p["errors"] for p in plans) or not any(p.get("pods_to_evict") for p in plans):
        return [], None
    nodes, pods = snap.list_nodes().get("items") or [], snap.list_pods().get("items") or []
    stranded = capacity.shortages(plans, nodes, pods)
    if stranded:
        return stranded, None
    return [], ordering.choose_order(plans, nodes, pods, to_change, window, canary=canary, hold=hold)


def order_note(choice, canary):
    return ordering.order_note(choice, canary) if choice else None


def room_check(ops, planned, view=None):
    """Before a node starts: the shortage lines (every pod named) of its pods to evict, counted on the cluster now:
    from ``view`` (a cluster_view.ClusterView kept current by its watches) while it runs, else from a fresh list."""
    seen = view.snapshot() if view is not None else None
    nodes, pods = seen if seen is not None else (ops.list_nodes().get("items") or [], ops.list_pods().get("items") or [])
    return [capacity.shortage_text(s, limit=None) for s in capacity.shortages([planned], nodes, pods)]


def refusal(config, nodes, stranded):
    return ("MIG config %s not rolled out on %s, nothing was changed: %s. Choose a config that keeps these "
            "resources, make room elsewhere, or accept Pending pods with allow_unschedulable=true "
            "(role: mig_reconfigure_allow_unschedulable)" % (
                config, ", ".join(nodes), " | ".join(capacity.shortage_text(s, limit=None) for s in stranded)))
