# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Plan and roll a MIG config across nodes: per node drain -> label -> follow -> verify -> uncordon.

Nodes run in a sliding window (one thread per node in flight, each following its node with a watch): the
next node starts as soon as one finishes, so stragglers do not hold a whole batch and the rollout stays near
the critical-path bound ceil(N / max_unavailable) x (drain + apply + verify). After the first failure no
further node starts. Each node is re-planned when it starts, so nothing stale is acted on. Resumable: every
step reads the node first and skips what is already done (cordon recorded, label at target, state success).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import follow, node_step
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import (
    PRIOR_UNSCHEDULABLE_ANNOTATION,
    DrainError,
    NodeDrainer,
    drain_node,
    public_plan,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_SHARING_STRATEGY, unschedulable
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    WATCH_CONNECTION_ERRORS,
    ApiException,
    annotations_of,
    labels_of,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import api_reason, connection_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, plan as mig_plan, resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import verify as mig_verify
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError

DEFAULTS = {
    "operator_namespace": "gpu-operator",
    "strategy": None,
    "pod_scope": "gpu",
    "force": False,
    "delete_emptydir_data": False,
    "grace_period": None,
    "drain_timeout": 600,
    "eviction_retry_delay": 5.0,
    "apply_timeout": 900,
    "verify_timeout": 180,
    "unwedge_on_timeout": False,
    "rollback_on_failure": False,
    "log_lines": 100,
}


def layout_text(per_gpu_targets):
    """'4x[1g.10gb:2 2g.20gb:1 3g.40gb:1]' style summary of per-GPU layouts (MIG off shown as 'disabled')."""
    groups = []
    for target in per_gpu_targets:
        text = "disabled" if target is None else (
            "[%s]" % " ".join("%s:%s" % (p, c) for p, c in sorted(target.items())) if target else "[enabled, empty]")
        if groups and groups[-1][0] == text:
            groups[-1][1] += 1
        else:
            groups.append([text, 1])
    return ", ".join("%dx%s" % (count, text) for text, count in groups) or "-"


def current_text(node, hardware):
    node_current = (hardware or {}).get("node_current") or {}
    if node_current:
        layout = " ".join("%s:%s" % (p, c) for p, c in sorted(node_current.items()))
    else:
        layout = "no MIG devices"
    return "%s (%s)" % (labels_of(node).get(node_step.MIG_CONFIG_LABEL) or "unset", layout)


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


class Context(object):
    """What every node of a run shares: options, the ClusterPolicy, and per-thread API access."""

    def __init__(self, ops_factory, options, progress=None):
        self.ops_factory = ops_factory
        self.progress = progress  # a progress.Progress (record file, Events), or None
        self.options = dict(DEFAULTS)
        self.options.update(dict((k, v) for k, v in (options or {}).items() if v is not None))
        self.ops = ops_factory()
        self.policy = node_step.active_cluster_policy(self.ops.list_cluster_policies())
        self.namespace = node_step.operator_namespace(self.policy, self.options["operator_namespace"])
        self.with_reboot = node_step.with_reboot(self.policy)

    def report(self, node_name, step, message=""):
        if self.progress is not None:
            self.progress.step(node_name, step, message)

    def reporter(self, node_name):
        return lambda step, message="": self.report(node_name, step, message)

    def drainer(self, ops, node_name):
        o = self.options
        return RecordingDrainer(ops, node_name, pod_scope=o["pod_scope"], force=o["force"],
                                delete_emptydir_data=o["delete_emptydir_data"], grace_period=o["grace_period"],
                                retry_delay=o["eviction_retry_delay"])


class FleetSnapshot(object):
    """Read-only view of the cluster for planning many nodes at once: the nodes, the pods and the operator
    namespace's ConfigMaps in one list each (3 requests instead of ~5 per node), PodDisruptionBudgets listed once
    per namespace. Answers the KubeOps reads plan_one and the capacity check make; anything else goes to ``ops``.
    Used for the fleet plan (phase=plan, check mode, the count before a step); each node is read again, fresh,
    right before it changes."""

    def __init__(self, ops, namespace):
        self.ops = ops
        self.nodes = ops.list_nodes(managed_fields=False)
        self.nodes_by_name = dict((n["metadata"]["name"], n) for n in self.nodes.get("items") or [])
        self.pods = ops.list_pods()
        self.pods_by_node = {}
        for pod in self.pods.get("items") or []:
            self.pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
        self.namespace = namespace
        self.configmaps = None  # None: read each node's ConfigMap by name (works with a Role that grants get only)
        if namespace:
            try:
                self.configmaps = dict((c["metadata"]["name"], c) for c in ops.list_configmaps(namespace).get("items") or [])
            except ApiException as exc:
                if exc.status != 403:
                    raise
        self.pdbs = {}
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.ops, name)

    def get_node(self, name):
        node = self.nodes_by_name.get(name)
        if node is None:
            raise ApiException(status=404, reason="Not Found")
        return node

    def list_nodes(self, label_selector=None):
        return self.ops.list_nodes(label_selector) if label_selector else self.nodes

    def list_pods(self):
        return self.pods

    def list_pods_on_node(self, node, label_selector=None):
        if label_selector:
            return self.ops.list_pods_on_node(node, label_selector)
        return {"items": list(self.pods_by_node.get(node, []))}

    def list_pdbs(self, namespace):
        with self.lock:
            if namespace not in self.pdbs:
                self.pdbs[namespace] = self.ops.list_pdbs(namespace)
            return self.pdbs[namespace]

    def get_configmap(self, namespace, name):
        if namespace != self.namespace or self.configmaps is None:
            return self.ops.get_configmap(namespace, name)
        return self.configmaps.get(name)


def plan_one(ctx, ops, node_name, target, hardware=None, keep_drain=False):
    """Pre-flight one node: config source, layout fit, strategy, pods to evict, budgets. Changes nothing.
    ``keep_drain``: the drain plan's raw objects are kept under ``_drain`` (the node, its pods, their budgets, as read
    now) for the drain that follows at once; the caller pops it before the entry goes into a result."""
    entry = {"node": node_name, "target_config": target, "errors": [], "model": None}
    try:
        node = ops.get_node(node_name)
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
        source = node_step.find_config_source(ops, ctx.policy, node_name, ctx.namespace)
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
    entry["current"] = current_text(node, hw)
    entry["target"] = layout_text([g["target"] if g["mig_enabled"] else None for g in plan["gpus"]])
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
        raw_drain = ctx.drainer(ops, node_name).plan(node)
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


def plan_all(ctx, node_names, target, hardware_by_node=None, snapshot=None):
    """Plan every node from one snapshot of the cluster (FleetSnapshot; made here unless given): pure work after
    three list requests, so one thread, no per-node round trips."""
    hardware_by_node = hardware_by_node or {}
    snapshot = snapshot or FleetSnapshot(ctx.ops, ctx.namespace)
    return [plan_one(ctx, snapshot, name, target, hardware_by_node.get(name)) for name in node_names]


PLAN_COLUMNS = ("node", "model", "current", "target", "evict", "budgets", "reset/reboot", "status")


def plan_table(entries):
    rows = []
    for e in entries:
        if e["errors"]:
            status = "INVALID"
        elif e.get("at_target"):
            status = "at target"
        else:
            status = "resume" if e.get("half_done") else "change"
        rows.append((e["node"], e.get("model") or "?", e.get("current") or "?", e.get("target") or "?",
                     str(len(e.get("pods_to_evict") or [])), ", ".join(e.get("blocking_budgets") or []) or "-",
                     e.get("reset_or_reboot") or "-", status))
    return format_table(PLAN_COLUMNS, rows)


SUMMARY_COLUMNS = ("node", "model", "before", "after", "evicted", "back", "duration", "result")


def back_text(row):
    """'returned/evicted' of the row's followed pods, '-' when none were followed."""
    followed = row.get("follow")
    return "%d/%d" % (followed["returned"], followed["evicted"]) if followed else "-"


def summary_table(rows):
    """The aligned table, one line per row; then, per row whose evicted pods were followed, where they run
    again and each one still away with the reason (follow.lines)."""
    table = format_table(SUMMARY_COLUMNS, [(r["node"], r.get("model") or "?", r.get("before") or "unset",
                                            r.get("after") or "unset", str(len(r.get("evicted") or [])),
                                            back_text(r), "%.1fs" % r.get("duration_s", 0), r["result"]) for r in rows])
    return table + [line for r in rows for line in follow.lines(r["node"], r.get("follow"))]


NO_BREAK_SPACE = u"\u00a0"


def table_cell(value):
    """A cell's own spaces become no-break spaces (they print as spaces): Ansible's YAML result format
    (callback_result_format=yaml, as ansible.cfg and AWX print) folds a long line at a single space past 80
    columns, so a row with a space inside a cell (``GPU reset``) wrapped onto two lines. Columns are separated
    by two or more spaces, where YAML never folds."""
    return str(value).replace(" ", NO_BREAK_SPACE)


def format_table(columns, rows):
    """Aligned text lines, one per row after the header: column widths from the content, two spaces between."""
    cells = [[table_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = "  ".join("%-*s" % (w, c) for w, c in zip(widths, columns))
    return [line.rstrip()] + ["  ".join("%-*s" % (w, v) for w, v in zip(widths, row)).rstrip() for row in cells]


def _fail(row, stage, message, ctx, ops, node_name, started):
    row.update({"result": "failed", "stage": stage, "message": message,
                "duration_s": round(row.get("duration_s", 0.0) + time.monotonic() - started, 3)})
    row["diagnostics"] = node_step.collect_diagnostics(ops, node_name, ctx.namespace, ctx.options["log_lines"])
    if row["diagnostics"].get("deleted"):
        row["left_cordoned"] = False  # the Node object is gone: nothing of ours is left on it
        row["after"] = None
        return row
    row["left_cordoned"] = row["diagnostics"].get("unschedulable", True)
    row["after"] = row["diagnostics"].get("config")
    return row


def _deleted_message(node_name, stage):
    return ("node %s was deleted during the rollout (at step %s); nothing is left cordoned there and the rollout "
            "halted: check why it went away before re-running" % (node_name, stage))


def reconfigure_node(ctx, node_name, target, planned=None, hold_cordon=False, ops=None, drain_plan=None):
    """Run the whole per-node procedure; returns a summary row (never raises for node-level failures).
    With ``hold_cordon`` a verified node stays cordoned (result ``verified``) until release_node has
    compared its hardware too. ``drain_plan``: the raw drain plan ``planned`` was made from, read just now
    (plan_one's ``_drain``): the drain starts from it instead of reading the node, its pods and budgets again."""
    ops = ops or ctx.ops_factory()
    started = time.monotonic()
    planned = planned or plan_one(ctx, ops, node_name, target)
    row = {"node": node_name, "model": planned.get("model"), "before": planned.get("current_config"),
           "after": planned.get("current_config"), "evicted": [], "timings": {}, "states": []}
    if planned["errors"]:
        row.update(result="invalid", message="; ".join(planned["errors"]), duration_s=0.0)
        return row
    if planned.get("at_target"):
        row.update(result="unchanged", message="already at %s and verified" % target, duration_s=0.0)
        return row
    o = ctx.options
    where = {"stage": "drain"}
    try:
        # 1. drain (idempotent: an earlier cordon of ours is kept, remaining GPU pods are evicted)
        t0 = time.monotonic()
        ctx.report(node_name, "draining", "%s -> %s: cordon and evict %d pod(s)" % (
            row["before"] or "unset", target, len(planned.get("pods_to_evict") or [])))
        drainer = ctx.drainer(ops, node_name)
        if drain_plan is not None:
            drainer.pods = drain_plan["_pods"]  # the pods the plan read: their controllers, for the follow
        try:
            drained = drain_node(drainer, o["drain_timeout"], plan=drain_plan)
        except DrainError as exc:
            row["evicted"] = ["%s/%s" % (p["namespace"], p["name"]) for p in exc.result.get("evicted") or []]
            row["_evictions"] = drainer.evictions(exc.result.get("evicted") or [])
            row["blocked_by"] = exc.result.get("blocked_by")
            message = str(exc) if node_step.node_exists(ops, node_name) else _deleted_message(node_name, "drain")
            return _fail(row, "drain", message, ctx, ops, node_name, started)
        row["evicted"] = ["%s/%s" % (p["namespace"], p["name"]) for p in drained["evicted"]]
        row["_evictions"] = drainer.evictions(drained["evicted"])
        row["timings"]["drain_s"] = round(time.monotonic() - t0, 3)
        # 2-4. the MIG step: label (or re-trigger a resumed node), follow the state, verify allocatable and
        # GFD labels against the plan; the in-progress marker is cleared here unless the node stays held.
        step = node_step.run_step(ops, node_name, target, planned, o["apply_timeout"], o["verify_timeout"],
                                  unwedge_on_timeout=o["unwedge_on_timeout"], clear=False,
                                  progress=ctx.reporter(node_name), where=where, node=drainer.node)
        row["states"] = step["states"]
        row["rebooted"] = step["rebooted"]
        if step.get("not_ready_seen"):
            row["not_ready_during_apply"] = True  # expected with a reboot or a host driver's kubelet stop
        if "unwedged" in step:
            row["unwedged"] = step["unwedged"]
        row["timings"].update(step["timings"])
        if step["final"] == "deleted":
            return _fail(row, "apply", _deleted_message(node_name, "apply"), ctx, ops, node_name, started)
        if step["final"] != "success":
            now = node_step.labels_of(step["node"] or {}).get(node_step.MIG_CONFIG_LABEL)
            reason = {"failed": "MIG Manager reported failed",
                      "timeout": "no success within %ss (state %s)%s" % (
                          o["apply_timeout"], (step["states"] or ["unset"])[-1],
                          ": " + step["not_running"] if step.get("not_running") else ""),
                      "changed": "someone else set %s=%s meanwhile; their change is kept, nothing is rolled back" % (
                          node_step.MIG_CONFIG_LABEL, now)}[step["final"]]
            if step["final"] == "changed":
                row["changed_by_other"] = now
            row = _fail(row, "apply", "node %s: %s -> %s: %s; node left cordoned" % (
                node_name, row["before"] or "unset", target, reason), ctx, ops, node_name, started)
            if o["rollback_on_failure"] and step["final"] != "changed":
                row["rollback"] = rollback(ctx, ops, node_name)
                row["message"] += "; rollback: " + rollback_summary(row["rollback"])
            return row
        if step["mismatches"]:
            return _fail(row, "verify", "node %s: MIG Manager reported success but %s; node left cordoned" % (
                node_name, "; ".join(step["mismatches"])), ctx, ops, node_name, started)
        if hold_cordon:  # the in-progress marker stays: the release finds the held nodes by it
            row.update(result="verified", after=target, duration_s=round(time.monotonic() - started, 3),
                       message="%s -> %s: allocatable and GFD labels verified; cordoned until the hardware is read" % (
                           row["before"] or "unset", target))
            return row
        # 5. give the node back as we found it
        where["stage"] = "uncordon"
        return _give_back(ctx, ops, node_name, target, row, started, "allocatable and GFD labels", step["node"])
    except ApiException as exc:
        if exc.status == 404 and not node_step.node_exists(ops, node_name):
            return _fail(row, "api", _deleted_message(node_name, "api"), ctx, ops, node_name, started)
        return _fail(row, "api", "node %s: Kubernetes API error %s" % (node_name, _api_error(exc)), ctx, ops, node_name, started)
    except WATCH_CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        return _unreachable(row, where["stage"], exc, ctx, ops, node_name, started)


def _api_error(exc):
    """``HTTP 403 Forbidden (PATCH /api/v1/nodes/n): <the server's message>`` on one line."""
    call = getattr(exc, "gpufleet_call", None)
    return "%s%s" % (api_reason(exc), " (%s)" % call if call else "") if getattr(exc, "status", None) else api_reason(exc)


def _unreachable(row, stage, exc, ctx, ops, node_name, started):
    """The API server stayed unreachable past the retries (and a watch's deadline): the node's row records the
    step it stopped at; a re-run resumes it (our cordon and in-progress marker stay on the node)."""
    row = _fail(row, "api", "node %s: Kubernetes API server unreachable during %s (%s); the node keeps its state, "
                "a re-run resumes it" % (node_name, stage, connection_reason(exc)), ctx, ops, node_name, started)
    row["api_stage"] = stage
    return row


def _give_back(ctx, ops, node_name, target, row, started, what, node=None):
    """Clear the in-progress marker and uncordon as found, in one merge patch; ``node`` is the node as just seen
    (its watch event), else it is read."""
    changed, outcome = ctx.drainer(ops, node_name).uncordon(node, node_step.finish_annotations_patch())
    row.update(result="reconfigured", after=target, uncordon=outcome,
               duration_s=round(row.get("duration_s", 0.0) + time.monotonic() - started, 3),
               message="%s -> %s, %s verified (%s)" % (row["before"] or "unset", target, what, outcome))
    return row


def hardware_mismatches(ctx, ops, node_name, target, hardware):
    """What the GPUs themselves (gpu_info facts read after the change) say differs from ``target``."""
    if not hardware.get("gpus"):
        return ["the GPUs could not be read after the change: %s" % (hardware.get("msg") or "gpu_info listed none")]
    source = node_step.find_config_source(ops, ctx.policy, node_name, ctx.namespace)
    config = resolve.builtin_config() if source["kind"] == "builtin" else source["text"]
    try:
        plan = mig_plan.plan_node(hardware, config_name=target, config=config, config_source=source["source"])
    except PlanningError as exc:
        return ["hardware facts cannot be compared: %s" % exc]
    return [m["text"] for m in mig_verify.mismatches(hardware, plan)]


def release_node(ctx, row, target, hardware=None):
    """Finish a node held cordoned after its verification: compare the hardware when facts are given,
    then uncordon; a mismatch leaves it cordoned and failed, with diagnostics."""
    if row.get("result") != "verified":
        return row
    ops = ctx.ops_factory()
    started = time.monotonic()
    row = dict(row)
    try:
        node = ops.get_node(row["node"])
        state = node_step.mig_state(node)
        if state["config"] != target or state["state"] != "success":
            return _fail(row, "release", "node %s: changed since verification (%s=%s, state %s); node left cordoned" % (
                row["node"], node_step.MIG_CONFIG_LABEL, state["config"], state["state"]), ctx, ops, row["node"], started)
        if hardware:
            problems = hardware_mismatches(ctx, ops, row["node"], target, hardware)
            row["hardware_verified"] = not problems
            if problems:
                return _fail(row, "verify", "node %s: MIG Manager and the device plugin agree but the hardware does not: "
                             "%s; node left cordoned" % (row["node"], "; ".join(problems)), ctx, ops, row["node"], started)
        return _give_back(ctx, ops, row["node"], target, row, started,
                          "allocatable, GFD labels and hardware" if hardware else "allocatable and GFD labels")
    except ApiException as exc:
        return _fail(row, "api", "node %s: Kubernetes API error %s" % (row["node"], _api_error(exc)), ctx, ops, row["node"],
                     started)
    except WATCH_CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        return _unreachable(row, "release", exc, ctx, ops, row["node"], started)


def rollback(ctx, ops, node_name):
    """Point the node back at the config recorded before our change, follow it and verify it as a forward
    change is verified (explicit option). ``result`` is MIG Manager's final state; ``verified`` says whether
    allocatable and GFD labels then matched the previous config's plan (``mismatches`` otherwise)."""
    node = ops.get_node(node_name)
    previous = node_step.previous_config(node)
    if not previous:
        return {"result": "skipped", "verified": False,
                "message": "no previous config recorded on node %s" % node_name}
    planned = plan_one(ctx, ops, node_name, previous)
    if planned["errors"]:
        return {"result": "skipped", "config": previous, "verified": False,
                "message": "rollback to %s not started: %s" % (previous, "; ".join(planned["errors"]))}
    step = node_step.run_step(ops, node_name, previous, planned, ctx.options["apply_timeout"],
                              ctx.options["verify_timeout"], clear=False, node=node)  # the node stays held
    outcome = {"result": step["final"], "config": previous, "states": step["states"], "verified": step["verified"]}
    if step["final"] == "success":
        outcome["mismatches"] = step["mismatches"]
    return outcome


def rollback_summary(outcome):
    """One line for the row's message: how the rollback ended."""
    if outcome["verified"]:
        return "back at %s, verified" % outcome["config"]
    if outcome.get("message"):
        return outcome["message"]
    text = "%s ended %s" % (outcome["config"], outcome["result"])
    return text + (" but " + "; ".join(outcome["mismatches"]) if outcome.get("mismatches") else "")


# A row's result as the progress record names the node's last step.
FINAL_STEP = {"reconfigured": "done", "verified": "verified", "failed": "failed", "invalid": "invalid",
              "unchanged": "unchanged", "not started": "not started"}


def report_row(ctx, row):
    ctx.report(row["node"], FINAL_STEP.get(row["result"], row["result"]), row.get("message") or "")
    return row


def not_started_row(node_name, message):
    return {"node": node_name, "model": None, "before": None, "after": None, "evicted": [], "duration_s": 0.0,
            "result": "not started", "message": message}


def run_rollout(ctx, node_names, target, hardware_by_node=None, window=None, hold_cordon=False, room_check=None,
                follow_timeout=None, timeline=None, t0=None):
    """Reconfigure ``node_names`` in order, at most ``window`` at a time; once a node fails or its fresh plan
    is invalid, no further node starts (those in flight finish). Returns (rows, plans) in ``node_names`` order.

    With ``follow_timeout`` (seconds, 0 = look once) the pods the nodes' drains evicted are followed after the
    last node until their replacements run (follow.follow); each row with evictions gets ``follow``.

    ``room_check(ops, planned)``, when given, is asked before each node starts (the cluster changes during a
    rollout) for the shortage lines of that node's pods to evict; a node with any is not started (its row says
    why, nothing of it is touched) and the others go on, each checked in turn.

    ``timeline`` (a dict), when given, gets the seconds of the parts of this call: ``pods_listed_s`` (the pod list
    the follow compares with), ``nodes_s`` (first node started to last node done) and ``follow_s``. Each row gets
    ``started_s`` / ``finished_s``: seconds since ``t0`` (time.monotonic(); default: this call's start)."""
    hardware_by_node = hardware_by_node or {}
    halted = []
    local = threading.local()
    t0 = time.monotonic() if t0 is None else t0
    timeline = {} if timeline is None else timeline

    def one(name):
        if halted:
            return report_row(ctx, not_started_row(name, "not started: the rollout halted after %s failed" % halted[0])), \
                {"node": name, "errors": [], "not_started": True}
        if not hasattr(local, "ops"):
            local.ops = ctx.ops_factory()  # one client per worker thread, reused for its next nodes
        started = time.monotonic()
        try:
            planned = plan_one(ctx, local.ops, name, target, hardware_by_node.get(name), keep_drain=True)
        except WATCH_CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
            halted.append(name)
            return not_started_row(name, "node %s not started, nothing was changed there: Kubernetes API server "
                                   "unreachable (%s)" % (name, connection_reason(exc))), \
                {"node": name, "errors": [], "not_started": True}
        drain_plan = planned.pop("_drain", None)
        if room_check is not None and not planned["errors"] and planned.get("pods_to_evict"):
            short = room_check(local.ops, planned)
            if short:
                row = not_started_row(name, "node %s not started, nothing was changed there: %s" % (
                    name, " | ".join(short)))
                row.update(model=planned.get("model"), before=planned.get("current_config"),
                           after=planned.get("current_config"))
                return report_row(ctx, row), planned
        plan_s = time.monotonic() - started
        row = reconfigure_node(ctx, name, target, planned, hold_cordon=hold_cordon, ops=local.ops,
                               drain_plan=None if room_check is not None else drain_plan)
        # Outside drain + apply + verify: the fresh plan before, and giving the node back after.
        row["overhead_s"] = {"plan": round(plan_s, 3), "around_steps": round(
            row.get("duration_s", 0.0) - sum(row.get("timings", {}).values()), 3)}
        if row["result"] in ("failed", "invalid"):
            halted.append(name)
        return report_row(ctx, row), planned

    def timed(name):
        started = time.monotonic()
        row, planned = one(name)
        row.update(started_s=round(started - t0, 3), finished_s=round(time.monotonic() - t0, 3))
        return row, planned

    if not node_names:
        return [], []
    # The pods there are before any eviction: a replacement is a pod of the same controller not among them.
    mark = time.monotonic()
    known = None if follow_timeout is None else set(
        (p.get("metadata") or {}).get("uid") for p in ctx.ops.list_pods().get("items") or [])
    timeline["pods_listed_s"] = round(time.monotonic() - mark, 3)
    workers = max(1, min(window or len(node_names), len(node_names)))
    mark = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pairs = list(pool.map(timed, node_names))
    timeline["nodes_s"] = round(time.monotonic() - mark, 3)
    rows = [row for row, plan in pairs]
    evictions = [e for row in rows for e in row.pop("_evictions", None) or []]
    mark = time.monotonic()
    if known is not None and evictions:
        followed = follow.follow(ctx.ops, evictions, known, follow_timeout)
        for row in rows:
            if row["node"] in followed:
                row["follow"] = followed[row["node"]]
    timeline["follow_s"] = round(time.monotonic() - mark, 3)
    return rows, [plan for row, plan in pairs if not plan.get("not_started")]


def held_rows(ctx, ops, node_names, target):
    """The nodes of ``node_names`` a rollout with hold_cordon left cordoned after verifying ``target``, found
    from the cluster: cordoned by us (our cordon annotation), the in-progress marker and the config label at
    ``target``, MIG Manager at success, and allocatable and GFD labels still matching the plan. Rows as the
    apply returned them for these nodes (result ``verified``), without the apply's evictions and timings."""
    rows = []
    for name in node_names:
        planned = plan_one(ctx, ops, name, target)
        if planned["errors"] or not planned.get("cordoned_by_us") or planned.get("in_progress_target") != target \
                or planned.get("current_config") != target or planned.get("current_state") != "success":
            continue
        if node_step.node_mismatches(ops.get_node(name), planned["expected_resources"],
                                     planned["expected_gfd_labels"]):
            continue
        rows.append({"node": name, "model": planned.get("model"), "before": planned.get("previous_config"),
                     "after": target, "result": "verified",
                     "message": "%s -> %s: allocatable and GFD labels verified; cordoned until the hardware is read"
                     % (planned.get("previous_config") or "unset", target)})
    return rows


def release_held(ctx, node_names, target, hardware_by_node=None):
    """phase=release without rows: release the held nodes found from the cluster. Their rows carry
    ``release_s`` (not ``duration_s``, which stays the apply's)."""
    rows = release_all(ctx, held_rows(ctx, ctx.ops, node_names, target), target, hardware_by_node)
    for row in rows:
        row["release_s"] = row.pop("duration_s", 0.0)
    return rows


def release_all(ctx, rows, target, hardware_by_node=None):
    hardware_by_node = hardware_by_node or {}
    if not rows:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(rows))) as pool:
        return list(pool.map(lambda r: release_one(ctx, r, target, hardware_by_node.get(r["node"])), rows))


def release_one(ctx, row, target, hardware=None):
    if row.get("result") != "verified":
        return row
    ctx.report(row["node"], "releasing", "hardware against the target, then uncordon")
    return report_row(ctx, release_node(ctx, row, target, hardware))


def plan_diff(plans):
    """Ansible ``--diff`` of a rollout plan: per node, the MIG config label and layout now and after, and the pods
    the change would evict (nodes already at the target and invalid nodes are left out)."""
    before, after = [], []
    for entry in plans:
        if entry.get("errors") or entry.get("at_target"):
            continue
        node = entry["node"]
        before.append("%s: %s=%s\n  layout: %s\n" % (node, node_step.MIG_CONFIG_LABEL, entry.get("current_config") or "unset",
                                                     entry.get("current") or "?"))
        pods = entry.get("pods_to_evict") or []
        after.append("%s: %s=%s\n  layout: %s\n  evicts: %s\n" % (node, node_step.MIG_CONFIG_LABEL, entry["target_config"],
                                                                  entry.get("target") or "?", ", ".join(pods) or "none"))
    return {"before": "".join(before), "after": "".join(after)}
