# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout engine: plan a MIG config change over nodes, roll it over them in a sliding window, release the
nodes held for a hardware check. In the shape of NVIDIA mig-parted's pkg/mig/reconfigure (a list of named steps
run in order over one object that owns what they share): here the fleet snapshot and its plan, the window, the
Lease renewal, the progress record and Events, and the observer (timeline.Observer) that hears each step.

    engine = Rollout(new_api_client, [(node, config), ...], params)
    result, error = engine.plan()      # reads the cluster once, plans over that snapshot, changes nothing
    result, error = engine.apply()     # the nodes, at most ``max_unavailable`` in progress
    result, error = engine.release()   # hardware against the target, then uncordon

``error`` is the failure message (None when the call succeeded); ``warnings`` the lines to warn. Every node is
resumable: each step reads the node first and skips what is already done (cordon recorded, label at target,
state success)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import functools
import signal
import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    CONNECTION_ERRORS,
    ApiException,
    KubeOps,
    RequestCounter,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import api_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import labels_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import connection_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import (
    batches,
    capacity,
    follow,
    preflight,
    progress,
    release,
    snapshot,
    tables,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import targets as targets_mod
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.cluster_view import ClusterView
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import (
    LeaseRenewer,
    LockHeld,
    RolloutLock,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.timeline import Observer
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.window import Window, not_started_row

# The results that change a node (a failed node was cordoned, at least).
CHANGING_RESULTS = ("reconfigured", "verified", "failed")


class Refused(Exception):
    """The rollout stops before any change; ``result`` is what the call returns with the message."""

    def __init__(self, message, result):
        super(Refused, self).__init__(message)
        self.result = result


class Rollout(object):
    """One call of the rollout over ``targets``: (node name, MIG config) pairs in the order to run them.

    ``params`` are mig_rollout's options (max_unavailable, canary, allow_unschedulable, hold_cordon, hardware, rows,
    follow_timeout, progress_file, events, lock and the node procedure's options.py DEFAULTS); ``observer`` a
    timeline.Observer."""

    def __init__(self, new_api_client, targets, params, observer=None, selection=None):
        self.started = time.monotonic()
        self.targets = list(targets)
        self.names = [name for name, _config in self.targets]
        self.params = params
        self.observer = observer or Observer()
        self.counter = RequestCounter()
        self.ops_factory = lambda: KubeOps(new_api_client(), self.counter)  # one ApiClient per worker thread
        self.hardware = params.get("hardware") or {}
        self.width = self.window_width()
        # ``selection`` (targets.Selection): each node's config is chosen from its labels once they are read; the
        # nodes of ``targets`` are then the candidates, and those it leaves out are ``unmatched``.
        self.selection = selection
        self.unmatched = []
        self.warnings = []
        self.ctx = None
        self.tracker = None
        self.renewer = None
        self.lock_taken = self.lock_released = None
        self.cancelled = threading.Event()
        self.cancel_signal = None
        # what the steps of apply() hand on
        self.plans = []
        self.rows = []
        self.reasons = []
        self.order_note = None
        self.room = None
        self.known_pods = None

    def window_width(self):
        if self.params.get("max_unavailable") is not None and self.names:
            return batches.batch_size(self.params["max_unavailable"], len(self.names))
        return len(self.names)

    def choose_targets(self, nodes=None):
        """Each candidate's config from ``selection`` over the nodes' labels (``nodes``: name -> node as read; listed
        here when the selection needs labels and none are given). Raises targets.TargetError."""
        if self.selection is None:
            return
        if nodes is None:
            listed = self.ctx.ops.list_nodes(managed_fields=False).get("items") or [] \
                if self.selection.needs_labels else []
            nodes = dict((n["metadata"]["name"], n) for n in listed)
        labels = dict((name, labels_of(node)) for name, node in nodes.items() if isinstance(node, dict))
        self.targets, self.unmatched = self.selection.assign([name for name, _config in self.targets], labels)
        self.names = [name for name, _config in self.targets]
        self.width = self.window_width()
        if not self.targets:
            raise targets_mod.TargetError(
                "no node matched an entry of profiles and no default config is given (%s): nothing to roll out"
                % ", ".join(self.unmatched))

    def selected(self, result):
        """``result`` with each planned node's config and the nodes left out."""
        result.update(node_configs=dict(self.targets), unmatched_nodes=list(self.unmatched))
        return result

    # -- steps ---------------------------------------------------------------------------------------------

    def run_steps(self, steps):
        for name, step in steps:
            self.observer.step_started(name)
            step()
            self.observer.step_finished(name)

    def read_policy(self):
        self.ctx = preflight.Context(self.ops_factory, self.params)
        try:
            self.choose_targets()
        except targets_mod.TargetError as exc:
            raise Refused(str(exc), self.selected(dict(changed=False, api_requests=self.requests())))

    def count_room(self):
        """The cluster changes between the plan and each call: count again before anything changes, and run the
        nodes in an order that strands nothing on the way when the given one would."""
        if self.params.get("allow_unschedulable"):
            return
        snap = snapshot.read_fleet(self.ctx.ops, self.ctx, self.names)
        plans = preflight.plan_fleet(self.ctx, snap, self.targets, self.hardware)
        to_change = [p["node"] for p in plans if not p.get("at_target")]
        stranded, choice = preflight.capacity_check(snap, plans, to_change, self.width, canary=False,
                                                    hold=self.params.get("hold_cordon"))
        if choice and choice["changed"]:
            first = dict((name, i) for i, name in enumerate(choice["order"]))
            self.targets.sort(key=lambda pair: first.get(pair[0], len(first)))
        self.order_note = preflight.order_note(choice, False)
        if stranded:
            rows = [not_started_row(n, "node %s not started: evicted pods would find no room" % n) for n in to_change]
            for row in rows:
                row["target"] = dict(self.targets).get(row["node"])
            raise Refused(preflight.refusal(self.config_text(), to_change, stranded), dict(
                changed=False, plan=plans, plan_table=tables.plan_table(plans), stranded=stranded,
                capacity_warnings=[capacity.shortage_text(s) for s in stranded], rows=rows,
                summary_table=tables.summary_table(rows), failed_nodes=to_change, held_nodes=[],
                api_requests=self.requests()))

    def watch_cluster(self):
        """One list and one watch of nodes and of pods for the whole call, for the room count before each node."""
        if not self.params.get("allow_unschedulable"):
            self.room = functools.partial(preflight.room_check, view=ClusterView(self.ops_factory).start())

    def list_pods(self):
        """The pods there are before any eviction: a replacement is a pod of the same controller not among them."""
        if self.params.get("follow_timeout") is not None and self.targets:
            self.known_pods = set((p.get("metadata") or {}).get("uid")
                                  for p in self.ctx.ops.list_pods().get("items") or [])

    def run_nodes(self):
        slots = Window(self.ctx, self.targets, self.width, self.hardware, hold_cordon=self.params.get("hold_cordon"),
                       room=self.room, observer=self.observer, lease=self.renewer, cancelled=self.cancelled).run()
        self.rows = [slot.row for slot in slots]
        self.plans = [slot.plan for slot in slots if slot.plan is not None]
        self.reasons = [slot.row["message"] for slot in slots if slot.reason]

    def follow_pods(self):
        """Follow the pods the drains evicted until their replacements run (follow.follow)."""
        evictions = [e for row in self.rows for e in row.pop("_evictions", None) or []]
        if self.known_pods is not None and evictions and not self.cancelled.is_set():
            followed = follow.follow(self.ctx.ops, evictions, self.known_pods, self.params["follow_timeout"])
            for row in self.rows:
                if row["node"] in followed:
                    row["follow"] = followed[row["node"]]

    def release_nodes(self):
        target_of = dict(self.targets)
        if self.params.get("rows") is None:  # the held nodes, from the cluster
            self.rows = release.release_held(self.ctx, self.targets, self.hardware)
        else:
            held = [r for r in self.params["rows"] if r.get("node") in target_of]
            self.rows = release.release_all(self.ctx, held, target_of, self.hardware)
        for row in self.rows:
            row.setdefault("target", target_of.get(row["node"]))
        self.reasons = [r["message"] for r in self.rows if r["result"] in ("failed", "invalid")]

    # -- what the steps hold ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def progress(self):
        """The progress record and the Events while the nodes run; the Events still queued are posted before the
        result is made."""
        if not (self.params.get("progress_file") or self.params.get("events")):
            yield
            return
        try:
            self.tracker = progress.Progress(self.params.get("progress_file"),
                                             self.ops_factory() if self.params.get("events") else None,
                                             config=self.config_text())
        except OSError as exc:
            raise Refused("progress_file %s: the progress record cannot be written (%s); no node was changed"
                          % (self.params.get("progress_file"), exc.strerror or exc),
                          self.selected(dict(changed=False, api_requests=self.requests())))
        self.ctx.progress = self.tracker
        try:
            yield
        finally:
            self.tracker.finish()

    @contextlib.contextmanager
    def cancellable(self):
        """Ctrl-C and AWX's cancel send SIGINT (or SIGTERM) to this process while ansible-playbook exits at once:
        nobody will read this call's result. Python's default would raise in the main thread only, while the
        window's threads go on through every queued node with nobody watching. Instead: start no further node,
        let the nodes in flight reach their recorded state (each bounded by its timeouts), skip following the
        evicted pods, release the Lease, and leave the rows in the progress record, the Events and the nodes."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def cancel(signum, _frame):
            self.cancel_signal = signal.Signals(signum).name
            self.cancelled.set()

        previous = dict((sig, signal.signal(sig, cancel)) for sig in (signal.SIGINT, signal.SIGTERM))
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def lease(self):
        """The rollout Lease renewed while the nodes run (taken first and released last when lock.take and
        lock.release ask; released even when a step raised)."""
        options = self.params.get("lock")
        if not options:
            yield
            return
        lock = RolloutLock(self.ctx.ops.custom, options["namespace"], options["name"], options["holder"],
                           options["duration"], counter=self.counter, description=options.get("description"))
        if options.get("take"):
            self.lock_taken = lock.acquire(break_lock=options.get("break_lock"))[1]
        try:
            with LeaseRenewer(lock) as renewer:
                self.renewer = renewer
                yield
        finally:
            # Cancelled: ansible-playbook has exited and its play cannot release the Lease, so this call does.
            if options.get("release") or self.cancelled.is_set():
                self.lock_released = self.give_lock_back(lock)

    @staticmethod
    def give_lock_back(lock):
        try:
            return lock.release()[1]
        except ApiException as exc:  # the rows matter more; the role releases it again
            return "not released: %s" % api_reason(exc)
        except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
            return "not released: API server unreachable (%s)" % connection_reason(exc)

    # -- the three calls -------------------------------------------------------------------------------------

    def plan(self, check_mode=False, diff=False):
        """Read the cluster once and plan every node over that snapshot: each node's pre-flight, the room the
        evicted pods will find, the node order and the canary and batches. Changes nothing. With ``check_mode``
        the result says whether the phase would change anything."""
        phase = self.params.get("phase") or "plan"
        self.ctx = preflight.Context(self.ops_factory, self.params)
        snap = snapshot.read_fleet(self.ctx.ops, self.ctx, self.names)
        try:
            self.choose_targets(snap.nodes)
        except targets_mod.TargetError as exc:
            return self.selected(dict(changed=False, api_requests=self.requests())), str(exc)
        plans = preflight.plan_fleet(self.ctx, snap, self.targets, self.hardware)
        to_change = [p["node"] for p in plans if not p.get("at_target")]
        hold = any(n in self.hardware for n in to_change)
        stranded, choice = preflight.capacity_check(snap, plans, to_change, self.width, self.params["canary"], hold) \
            if phase != "release" else ([], None)
        to_change = choice["order"] if choice else to_change
        result = self.selected(dict(changed=False, plan=plans, plan_table=tables.plan_table(plans)))
        result.update(invalid_nodes=[p["node"] for p in plans if p["errors"]],
                      batches=batches.cut(to_change, self.width, canary=self.params["canary"], hold=hold),
                      window=self.width, hold_cordon=hold, order=to_change,
                      order_note=preflight.order_note(choice, self.params["canary"]),
                      stranded=stranded, capacity_warnings=[capacity.shortage_text(s) for s in stranded])
        if choice and not choice["feasible"]:
            self.warnings.append(result["order_note"])
        if stranded and not self.params.get("allow_unschedulable"):
            result["api_requests"] = self.requests()
            return result, preflight.refusal(self.config_text(), to_change, stranded)
        self.warnings.extend(result["capacity_warnings"])
        if diff:
            result["diff"] = tables.plan_diff(plans)
        if check_mode and phase == "apply":
            result["changed"] = any(not p.get("at_target") for p in plans)
        elif check_mode and phase == "release":
            held = self.params["rows"] if self.params.get("rows") is not None else \
                release.held_rows(self.ctx, self.ctx.ops, self.targets)
            result["changed"] = any(r.get("result") == "verified" and r.get("node") in self.names for r in held)
        result["api_requests"] = self.requests()
        return result, None

    def apply(self):
        """Reconfigure the nodes, at most the window's width in progress at once."""
        try:
            with self.cancellable():
                self.run_steps([("read policy", self.read_policy), ("count room", self.count_room),
                                ("watch cluster", self.watch_cluster)])
                with self.lease(), self.progress():
                    self.run_steps([("list pods", self.list_pods), ("run nodes", self.run_nodes),
                                    ("follow pods", self.follow_pods)])
                    # posting the queued Events, renewing and releasing the Lease
                    self.observer.step_started("finish")
                self.observer.step_finished("finish")
        except Refused as exc:
            return exc.result, str(exc)
        except LockHeld as exc:
            return self.lock_refusal(exc)
        result = self.outcome()
        result.update(order=[r["node"] for r in self.rows], order_note=self.order_note)
        self.observer.add_to(result)
        return result, self.halt_message()

    def release(self):
        """Compare the held nodes' hardware with the target and uncordon them."""
        try:
            self.read_policy()
            with self.lease(), self.progress():
                self.release_nodes()
        except Refused as exc:
            return exc.result, str(exc)
        except LockHeld as exc:
            return self.lock_refusal(exc)
        return self.outcome(), self.halt_message()

    # -- results -------------------------------------------------------------------------------------------

    def config_text(self):
        """The config(s) rolled out, for messages."""
        configs = []
        for _name, config in self.targets:
            if config not in configs:
                configs.append(config)
        return ", ".join(configs)

    def requests(self, per_node=False):
        counted = dict(total=self.counter.total, by_verb=self.counter.by_verb)
        if per_node:
            counted["per_node"] = round(self.counter.total / float(len(self.names) or 1), 1)
        return counted

    def lock_refusal(self, exc):
        return dict(lock_holder=exc.lease.get("holder"), api_requests=self.requests()), \
            "nodes %s not started, nothing was changed: %s" % (", ".join(self.names), exc)

    def outcome(self):
        rows = self.rows
        result = dict(
            changed=any(r["result"] in CHANGING_RESULTS or r.get("evicted") for r in rows),
            plan=self.plans, plan_table=tables.plan_table(self.plans),
            invalid_nodes=[p["node"] for p in self.plans if p["errors"]],
            rows=rows, summary_table=tables.summary_table(rows),
            failed_nodes=[r["node"] for r in rows if r["result"] in ("failed", "invalid", "not started")],
            held_nodes=[r["node"] for r in rows if r["result"] == "verified"],
            api_requests=self.requests(per_node=True),
            duration_s=round(time.monotonic() - self.started, 3),
        )
        if self.renewer is not None and self.renewer.error:
            result["lock_error"] = self.renewer.error
        if self.cancelled.is_set():
            result["cancelled"] = self.cancel_signal
        if self.tracker is not None and self.tracker.events_ops is not None:
            result["events"] = dict(posted=self.tracker.events_posted, errors=list(self.tracker.event_errors))
            self.warnings.extend(self.tracker.event_errors)
        if self.tracker is not None and self.tracker.write_warning():
            result["progress_error"] = self.tracker.write_warning()
            self.warnings.append(result["progress_error"])
        if self.lock_taken is not None:
            result["lock_taken"] = self.lock_taken
        if self.lock_released is not None:
            result["lock_released"] = self.lock_released
        return result

    def halt_message(self):
        lost = self.renewer.error if self.renewer is not None else None
        if lost and not any(lost in reason for reason in self.reasons):
            self.reasons.append("the rollout lost its lock: %s" % lost)
        if self.cancelled.is_set():
            return "MIG rollout of %s cancelled (%s): %s" % (self.config_text(), self.cancel_signal, " | ".join(
                ["the nodes in flight finished, no further node started, the Lease released"] + self.reasons))
        if not lost and not any(r["result"] in ("failed", "invalid", "not started") for r in self.rows):
            return None
        return "MIG rollout of %s halted: %s" % (self.config_text(), " | ".join(self.reasons))
