# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The sliding window: at most ``width`` nodes in progress, one thread per slot, the next node taken as soon as a
slot frees, so stragglers do not hold a whole batch and the rollout stays near ceil(N / width) x (drain + apply +
verify). Each node is read and planned again when its slot takes it (snapshot.read_node, preflight.plan_one), so
nothing stale is acted on. After the first failure (or a node whose fresh plan is invalid) no further node starts;
those in flight finish."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import CONNECTION_ERRORS
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import connection_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import preflight, procedure, snapshot
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.timeline import Observer


def not_started_row(node_name, message):
    return {"node": node_name, "model": None, "before": None, "after": None, "evicted": [], "duration_s": 0.0,
            "result": "not started", "message": message}


class Slot(object):
    """A node's outcome in the window: its row, its fresh plan (None when it was not planned) and whether the
    node itself is a reason the rollout failed (its own failure, invalid plan or refusal; not a node left out
    because another failed)."""

    def __init__(self, row, plan=None, reason=False):
        self.row = row
        self.plan = plan
        self.reason = reason


class Window(object):
    """Run ``targets`` ((node, config) pairs, in order) through ``width`` slots.

    ``room(ops, planned)``, when given, is asked before each node starts (the cluster changes during a rollout)
    for the shortage lines of that node's pods to evict; a node with any is not started (its row says why,
    nothing of it is touched) and the others go on, each checked in turn."""

    def __init__(self, ctx, targets, width, hardware_by_node=None, hold_cordon=False, room=None, observer=None,
                 lease=None, cancelled=None):
        self.ctx = ctx
        self.cancelled = cancelled  # a threading.Event set on SIGINT/SIGTERM: no node starts after it
        self.lease = lease  # the LeaseRenewer: no node starts while the Lease may not be ours
        self.lease_lost = None
        self.targets = list(targets)
        self.width = max(1, min(width or len(self.targets), len(self.targets) or 1))
        self.hardware_by_node = hardware_by_node or {}
        self.hold_cordon = hold_cordon
        self.room = room
        self.observer = observer or Observer()
        self.halted = []
        self.local = threading.local()

    def ops(self):
        if not hasattr(self.local, "ops"):
            self.local.ops = self.ctx.ops_factory()  # one client per worker thread, reused for its next nodes
        return self.local.ops

    def run(self):
        """The Slots, in ``targets`` order."""
        if not self.targets:
            return []
        with ThreadPoolExecutor(max_workers=self.width) as pool:
            return list(pool.map(self.observed, self.targets))

    def observed(self, pair):
        self.observer.node_started(pair[0])
        try:
            slot = self.take(*pair)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # one node's error must not lose every row
            self.halted.append(pair[0])
            slot = Slot(not_started_row(pair[0], "node %s: unexpected error: %s; the node is as the error left it "
                                        "(a re-run resumes it)" % (pair[0], procedure.unexpected_text(exc))), reason=True)
            slot.row["result"] = "failed"
        slot.row.setdefault("target", pair[1])  # the MIG config this node was to reach
        self.observer.node_finished(slot.row)
        return slot

    def lease_problem(self):
        """None while the Lease is ours; else why no node may start. When renewals have failed past the Lease's
        duration (an API outage), wait up to one more duration for a renewal to land before giving up."""
        if self.lease is None:
            return None
        deadline = time.monotonic() + self.lease.lock.duration_s
        while self.lease.error is None and self.lease.lapsed_s() > 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.lease.lost()

    def take(self, name, target):
        ctx = self.ctx
        if self.halted:
            return Slot(ctx.report_row(not_started_row(
                name, "not started: the rollout halted after %s failed" % self.halted[0])))
        if self.cancelled is not None and self.cancelled.is_set():
            return Slot(ctx.report_row(not_started_row(name, "node %s not started, nothing was changed there: the "
                                                       "rollout was cancelled" % name)))
        problem = self.lease_lost or self.lease_problem()
        if problem:
            first, self.lease_lost = self.lease_lost is None, problem
            return Slot(ctx.report_row(not_started_row(name, "node %s not started, nothing was changed there: %s" % (
                name, problem))), reason=first)
        ops = self.ops()
        try:
            snap = snapshot.read_node(ops, ctx, name)
            planned = preflight.plan_one(ctx, snap, name, target, self.hardware_by_node.get(name), keep_drain=True)
            drain_plan = planned.pop("_drain", None)
            node_pods = snap.pods_read(name)
            short = self.room(ops, planned) if self.room is not None and not planned["errors"] \
                and planned.get("pods_to_evict") else None
        except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
            self.halted.append(name)
            return Slot(not_started_row(name, "node %s not started, nothing was changed there: Kubernetes API server "
                                        "unreachable (%s)" % (name, connection_reason(exc))), reason=True)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # a node's own failed row, not a lost run
            self.halted.append(name)
            row = not_started_row(name, "node %s not started, nothing was changed there: unexpected error while "
                                  "planning it: %s" % (name, procedure.unexpected_text(exc)))
            row["result"] = "failed"
            return Slot(row, reason=True)
        if short:
            row = not_started_row(name, "node %s not started, nothing was changed there: %s" % (name, " | ".join(short)))
            row.update(model=planned.get("model"), before=planned.get("current_config"),
                       after=planned.get("current_config"))
            return Slot(ctx.report_row(row), planned, reason=True)
        self.observer.node_planned(name)
        row = procedure.run_node(ctx, name, target, planned, hold_cordon=self.hold_cordon, ops=ops,
                                 drain_plan=None if self.room is not None else drain_plan, pods=node_pods)
        failed = row["result"] in ("failed", "invalid")
        if failed:
            self.halted.append(name)
        return Slot(ctx.report_row(row), planned, reason=failed)
