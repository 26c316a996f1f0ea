# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The release of nodes a rollout held cordoned after verifying them (hold_cordon): the GPUs themselves, read by
gpu_info after the change, are compared with the target, then the node is given back as found; a mismatch leaves
it cordoned and failed, with diagnostics."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import CONNECTION_ERRORS, ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import api_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_MIG_CONFIG
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan as mig_plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import verify as mig_verify
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step, preflight, snapshot
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.procedure import (
    fail,
    give_back,
    unreachable,
)

# Nodes released at once.
RELEASE_THREADS = 16


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
    expected = row.pop("_expected", None)  # (resources, GFD labels) the plan expects, for a node found held
    node = row.pop("_node", None)  # the node as held_rows read it, for a node found held
    try:
        node = node or ops.get_node(row["node"])
        state = node_step.mig_state(node)
        if state["config"] != target or state["state"] != "success":
            return fail(row, "release", "node %s: changed since verification (%s=%s, state %s); node left cordoned" % (
                row["node"], LABEL_MIG_CONFIG, state["config"], state["state"]), ctx, ops, row["node"], started)
        if expected is not None:
            # Allocatable and GFD labels, verified by the apply, may have moved since (a device plugin restart, a GFD
            # re-run): waited for as the verification waits, then a failed node, never one left cordoned unreported.
            problems = node_step.wait_verified(ops, row["node"], expected[0], expected[1],
                                               time.monotonic() + ctx.options["verify_timeout"], node)
            if problems:
                return fail(row, "verify", "node %s: allocatable and GFD labels no longer agree with the plan since its "
                            "verification: %s; node left cordoned" % (row["node"], "; ".join(problems)),
                            ctx, ops, row["node"], started)
        if hardware:
            problems = hardware_mismatches(ctx, ops, row["node"], target, hardware)
            row["hardware_verified"] = not problems
            if problems:
                return fail(row, "verify", "node %s: MIG Manager and the device plugin agree but the hardware does not: "
                            "%s; node left cordoned" % (row["node"], "; ".join(problems)), ctx, ops, row["node"], started)
        return give_back(ctx, ops, row["node"], target, row, started,
                         "allocatable, GFD labels and hardware" if hardware else "allocatable and GFD labels")
    except ApiException as exc:
        return fail(row, "api", "node %s: Kubernetes API error %s" % (row["node"], api_reason(exc, with_call=True)), ctx, ops, row["node"],
                    started)
    except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        return unreachable(row, "release", exc, ctx, ops, row["node"], started)


def held_rows(ctx, ops, targets):
    """The nodes of ``targets`` ((node, config) pairs) a rollout with hold_cordon left cordoned after verifying
    their config, found from the cluster: cordoned by us (our cordon annotation) with the in-progress marker at the
    config. Rows as the apply returned them for these nodes (result ``verified``), without the apply's evictions and
    timings, and with what the plan expects (``_expected``) and the node as read (``_node``): release_node checks the
    config, MIG Manager's state, allocatable and GFD labels again and fails a node that no longer agrees, rather than
    leave it out."""
    rows = []
    for name, target in targets:
        snap = snapshot.read_node(ops, ctx, name)
        planned = preflight.plan_one(ctx, snap, name, target)
        if planned["errors"] or not planned.get("cordoned_by_us") or planned.get("in_progress_target") != target:
            continue
        rows.append({"node": name, "model": planned.get("model"), "before": planned.get("previous_config"),
                     "after": target, "result": "verified",
                     "message": "%s -> %s: allocatable and GFD labels verified; cordoned until the hardware is read"
                     % (planned.get("previous_config") or "unset", target),
                     "_expected": (planned["expected_resources"], planned["expected_gfd_labels"]),
                     "_node": snap.nodes[name]})
    return rows


def release_held(ctx, targets, hardware_by_node=None):
    """phase=release without rows: release the held nodes of ``targets`` found from the cluster. Their rows
    carry ``release_s`` (not ``duration_s``, which stays the apply's)."""
    rows = release_all(ctx, held_rows(ctx, ctx.ops, targets), dict(targets), hardware_by_node)
    for row in rows:
        row["release_s"] = row.pop("duration_s", 0.0)
    return rows


def release_all(ctx, rows, target_of, hardware_by_node=None):
    """Release each row's node (``target_of``: node name -> config), a few at a time."""
    hardware_by_node = hardware_by_node or {}
    if not rows:
        return []
    with ThreadPoolExecutor(max_workers=min(RELEASE_THREADS, len(rows))) as pool:
        return list(pool.map(lambda r: release_one(ctx, r, target_of[r["node"]], hardware_by_node.get(r["node"])),
                             rows))


def release_one(ctx, row, target, hardware=None):
    if row.get("result") != "verified":
        return row
    ctx.report(row["node"], "releasing", "hardware against the target, then uncordon")
    return ctx.report_row(release_node(ctx, row, target, hardware))
