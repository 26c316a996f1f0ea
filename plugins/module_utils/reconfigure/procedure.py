# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One node's procedure: drain -> the MIG step (label, follow, verify) -> give the node back as found; a failed
node stays cordoned with diagnostics, and with rollback_on_failure goes back to its previous config. Never raises
for a node-level failure: every outcome is a summary row."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import CONNECTION_ERRORS, ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_MIG_CONFIG, labels_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import api_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import connection_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step, preflight, snapshot
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import DrainError, drain_node


def fail(row, stage, message, ctx, ops, node_name, started):
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


def deleted_message(node_name, stage):
    return ("node %s was deleted during the rollout (at step %s); nothing is left cordoned there and the rollout "
            "halted: check why it went away before re-running" % (node_name, stage))


def run_node(ctx, node_name, target, planned=None, hold_cordon=False, ops=None, drain_plan=None, pods=None):
    """Run the whole per-node procedure; returns a summary row (never raises for node-level failures).
    With ``hold_cordon`` a verified node stays cordoned (result ``verified``) until release.release_node has
    compared its hardware too. ``drain_plan``: the raw drain plan ``planned`` was made from, read just now
    (preflight.plan_one's ``_drain``): the drain starts from it instead of reading the node, its pods and budgets again.
    ``pods``: the node's pods read with ``planned`` (MIG Manager's pod among them), else MIG Manager's are listed."""
    ops = ops or ctx.ops_factory()
    started = time.monotonic()
    planned = planned or preflight.plan_one(ctx, snapshot.read_node(ops, ctx, node_name), node_name, target)
    row = {"node": node_name, "model": planned.get("model"), "before": planned.get("current_config"),
           "after": planned.get("current_config"), "evicted": [], "timings": {}, "states": []}
    if planned["errors"]:
        row.update(result="invalid", message="; ".join(planned["errors"]), duration_s=0.0)
        return row
    if planned.get("at_target"):
        row.update(result="unchanged", message="already at %s and verified" % target, duration_s=0.0)
        return row
    o = ctx.options
    where = {"stage": "mig-manager"}
    drainer = None
    try:
        # 0. MIG Manager there runs its DaemonSet's current template: right after a ClusterPolicy change the
        # DaemonSet replaces its pods one node at a time, and an old pod would apply the old settings.
        outdated = node_step.mig_manager_rollout_pending(ops, node_name, pods, ctx.daemonsets)
        if outdated:
            ctx.report(node_name, "waiting", outdated)
            outdated = node_step.wait_mig_manager_current(ops, node_name, time.monotonic() + o["apply_timeout"])
        if outdated:
            return fail(row, "mig-manager", "node %s: %s; still so after %ss, nothing changed on the node" % (
                node_name, outdated, o["apply_timeout"]), ctx, ops, node_name, started)
        where["stage"] = "drain"
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
            message = str(exc) if node_step.node_exists(ops, node_name) else deleted_message(node_name, "drain")
            return fail(row, "drain", message, ctx, ops, node_name, started)
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
            return fail(row, "apply", deleted_message(node_name, "apply"), ctx, ops, node_name, started)
        if step["final"] != "success":
            now = labels_of(step["node"] or {}).get(LABEL_MIG_CONFIG)
            reason = {"failed": "MIG Manager reported failed",
                      "timeout": "no success within %ss (state %s)%s" % (
                          o["apply_timeout"], (step["states"] or ["unset"])[-1],
                          ": " + step["not_running"] if step.get("not_running") else ""),
                      "changed": "someone else set %s=%s meanwhile; their change is kept, nothing is rolled back" % (
                          LABEL_MIG_CONFIG, now)}[step["final"]]
            if step["final"] == "changed":
                row["changed_by_other"] = now
            row = fail(row, "apply", None, ctx, ops, node_name, started)
            if step["final"] == "failed" and row["diagnostics"].get("mig_manager_error"):
                reason += ": " + row["diagnostics"]["mig_manager_error"]
            row["message"] = "node %s: %s -> %s: %s; node left cordoned" % (
                node_name, row["before"] or "unset", target, reason)
            if o["rollback_on_failure"] and step["final"] != "changed":
                row["rollback"] = rollback(ctx, ops, node_name)
                row["message"] += "; rollback: " + rollback_summary(row["rollback"])
            return row
        if step["mismatches"]:
            return fail(row, "verify", "node %s: MIG Manager reported success but %s; node left cordoned" % (
                node_name, "; ".join(step["mismatches"])), ctx, ops, node_name, started)
        if hold_cordon:  # the in-progress marker stays: the release finds the held nodes by it
            row.update(result="verified", after=target, duration_s=round(time.monotonic() - started, 3),
                       message="%s -> %s: allocatable and GFD labels verified; cordoned until the hardware is read" % (
                           row["before"] or "unset", target))
            return row
        # 5. give the node back as we found it
        where["stage"] = "uncordon"
        return give_back(ctx, ops, node_name, target, row, started, "allocatable and GFD labels", step["node"])
    except ApiException as exc:
        keep_evictions(row, drainer)
        if exc.status == 404 and not node_step.node_exists(ops, node_name):
            return fail(row, "api", deleted_message(node_name, "api"), ctx, ops, node_name, started)
        return fail(row, "api", "node %s: Kubernetes API error %s" % (node_name, api_reason(exc, with_call=True)), ctx, ops, node_name, started)
    except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        keep_evictions(row, drainer)
        return unreachable(row, where["stage"], exc, ctx, ops, node_name, started)
    # any other error is this node's failed row (duplicate-except: pylint cannot see CONNECTION_ERRORS's classes)
    except Exception as exc:  # pylint: disable=broad-exception-caught,duplicate-except
        keep_evictions(row, drainer)
        return unexpected(row, where["stage"], exc, ctx, ops, node_name, started)


def keep_evictions(row, drainer):
    """The pods a drain evicted before a request failed stay in the row (and are followed after the last node)."""
    if drainer is not None and drainer.evicted and not row["evicted"]:
        row["evicted"] = ["%s/%s" % (p["namespace"], p["name"]) for p in drainer.evicted]
        row["_evictions"] = drainer.evictions(drainer.evicted)


def unexpected_text(exc):
    """``ValueError: <its message>`` on one line, at most 500 characters."""
    text = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())
    return text if len(text) <= 500 else text[:497] + "..."


def unexpected(row, stage, exc, ctx, ops, node_name, started):
    """An error no step expects (a response that is not JSON, a malformed object, a full disk): the node fails
    with the error named, as any failed node does (left cordoned if we cordoned it, diagnostics when they can be
    read), and the rollout halts."""
    message = "node %s: unexpected error during %s: %s; node left as it is (cordoned if the drain had started)" % (
        node_name, stage, unexpected_text(exc))
    try:
        return fail(row, stage, message, ctx, ops, node_name, started)
    except Exception as again:  # pylint: disable=broad-exception-caught  # the diagnostics failed too: keep the row
        row.update(result="failed", stage=stage, message=message + "; diagnostics not read: " + unexpected_text(again),
                   duration_s=round(row.get("duration_s", 0.0) + time.monotonic() - started, 3))
        return row


def unreachable(row, stage, exc, ctx, ops, node_name, started):
    """The API server stayed unreachable past the retries (and a watch's deadline): the node's row records the
    step it stopped at; a re-run resumes it (our cordon and in-progress marker stay on the node)."""
    row = fail(row, "api", "node %s: Kubernetes API server unreachable during %s (%s); the node keeps its state, "
               "a re-run resumes it" % (node_name, stage, connection_reason(exc)), ctx, ops, node_name, started)
    row["api_stage"] = stage
    return row


def give_back(ctx, ops, node_name, target, row, started, what, node=None):
    """Clear the in-progress marker and uncordon as found, in one merge patch; ``node`` is the node as just seen
    (its watch event), else it is read."""
    changed, outcome = ctx.drainer(ops, node_name).uncordon(node, node_step.finish_annotations_patch())
    row.update(result="reconfigured", after=target, uncordon=outcome,
               duration_s=round(row.get("duration_s", 0.0) + time.monotonic() - started, 3),
               message="%s -> %s, %s verified (%s)" % (row["before"] or "unset", target, what, outcome))
    return row


def rollback(ctx, ops, node_name):
    """Point the node back at the config recorded before our change, follow it and verify it as a forward
    change is verified (explicit option). ``result`` is MIG Manager's final state; ``verified`` says whether
    allocatable and GFD labels then matched the previous config's plan (``mismatches`` otherwise)."""
    node = ops.get_node(node_name)
    previous = node_step.previous_config(node)
    if not previous:
        return {"result": "skipped", "verified": False,
                "message": "no previous config recorded on node %s" % node_name}
    planned = preflight.plan_one(ctx, snapshot.read_node(ops, ctx, node_name), node_name, previous)
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
