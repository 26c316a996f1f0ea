# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What a rollout is doing now, for people watching it: a progress record on disk and Kubernetes Events.

The rollout calls ``Progress.step(node, step, message)`` as each node moves on (draining, pending, rebooting,
verifying, done/failed...). Each call rewrites a small JSON record atomically (write to a temporary file in the
same directory, then ``os.replace``), so a reader - the ``mig_rollout_progress`` action polling an async
``mig_rollout`` - never sees half a file. Some steps also post a core/v1 Event on the Node (reason
``MigReconfigure*``, source component ``gpufleet``), which ``kubectl describe node`` lists: 2 requests per changed
node (Draining when it starts; Verified when it is done - after the release when the node is held for the hardware
check - or Failed). The Events are posted by one background thread in the order of the steps, so a node's step
never waits for one; ``flush()`` waits until all are posted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import datetime
import json
import os
import tempfile
import threading
import time

RECORD_VERSION = 1
EVENT_NAMESPACE = "default"  # where Events about cluster-scoped objects go (client-go tools/record does the same)
EVENT_SOURCE = "gpufleet"
# step -> (Event reason, type); steps not listed are only written to the progress record.
EVENT_REASONS = {
    "draining": ("MigReconfigureDraining", "Normal"),
    # MIG Manager's success is not an Event of its own: Verified (or Failed, naming the stage) says it.
    "done": ("MigReconfigureVerified", "Normal"),
    "failed": ("MigReconfigureFailed", "Warning"),
}
FINAL_STEPS = ("done", "verified", "failed", "invalid", "unchanged", "not started")
# The record is rewritten at most this often (seconds): the whole record per step would be O(nodes) per step, O(nodes^2)
# per rollout, under the lock every node's thread takes. Each step keeps its own time in the record's history.
WRITE_INTERVAL = 0.5


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(node_name, node_uid, reason, event_type, message, moment):
    """A core/v1 Event about a Node (legacy form: no eventTime, namespace ``default`` as the API requires for an
    object without a namespace)."""
    stamp = rfc3339(moment)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": "%s.gpufleet-" % node_name, "namespace": EVENT_NAMESPACE},
        # kubectl describe node finds a Node's Events by its uid or, as the kubelet writes them, by its name.
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid or node_name},
        "reason": reason, "message": message[:1024], "type": event_type,
        "source": {"component": EVENT_SOURCE},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


def start_daemon(target, name):
    """A thread that dies with the module's process (a killed run must not leave it going)."""
    thread = threading.Thread(target=target, name=name)
    thread.daemon = True
    thread.start()
    return thread


class Progress(object):
    """Thread-safe: every worker thread of a rollout reports here.

    ``path``: the JSON record to keep current (None: no file). ``events_ops``: a ``KubeOps`` to post Events with
    (None: no Events). An Event that cannot be posted never fails the rollout; the first such error per reason is
    kept in ``event_errors``. ``write_interval``: the record is written at once when the last write is older than
    this, else by a background thread once the interval has passed (0: at every step)."""

    def __init__(self, path=None, events_ops=None, config=None, clock=time.time, write_interval=WRITE_INTERVAL):
        self.path = path
        self.events_ops = events_ops
        self.config = config
        self.clock = clock
        self.lock = threading.Lock()
        self.started = clock()
        self.nodes = {}
        self.order = []
        self.finished = False
        self.events_posted = 0
        self.event_errors = []
        self.event_queue = collections.deque()  # (node, reason, type, message, moment), oldest first
        self.event_wake = threading.Condition(self.lock)
        self.event_thread = None
        self.write_interval = write_interval
        self.written_at = None  # time.monotonic() of the last write
        self.dirty = False
        self.writer = None
        self.write_failures = 0
        self.write_error = None  # why the latest write failed; None once one succeeds again
        if path:
            self.write()  # an OSError here stops the rollout before any change (the caller refuses)

    def step(self, node_name, step, message=""):
        now = self.clock()
        with self.lock:
            entry = self.nodes.get(node_name)
            if entry is None:
                entry = self.nodes[node_name] = {"node": node_name, "started": now, "history": []}
                self.order.append(node_name)
            if entry.get("step") == step and entry.get("message") == message:
                return
            entry.update(step=step, since=now, message=message, elapsed_s=round(now - entry["started"], 1))
            entry["history"].append([round(now, 3), step])
            if self.path:
                self.write_soon()
            if self.events_ops is not None and step in EVENT_REASONS:
                reason, event_type = EVENT_REASONS[step]
                self.event_queue.append((node_name, reason, event_type, message or step, utc_now()))
                if self.event_thread is None:
                    self.event_thread = start_daemon(self._post_events, "gpufleet-events")
                self.event_wake.notify_all()

    def write_soon(self):
        """(lock held) Write now when the last write is older than write_interval, else let the writer thread do it."""
        if self.written_at is None or time.monotonic() - self.written_at >= self.write_interval:
            self.keep()
            return
        self.dirty = True
        if self.writer is None:
            self.writer = start_daemon(self._write_later, "gpufleet-progress")
        self.event_wake.notify_all()

    def _write_later(self):
        while True:
            with self.lock:
                while not self.dirty and not self.finished:
                    self.event_wake.wait()
                if self.finished:
                    return  # finish() writes the last record
                pause = self.write_interval - (time.monotonic() - self.written_at)
            if pause > 0:
                time.sleep(pause)
            with self.lock:
                if self.dirty and not self.finished:
                    self.keep()

    def _post_events(self):
        """The poster thread: one Event at a time, in the order the steps happened, until flush() says stop."""
        while True:
            with self.lock:
                while not self.event_queue and not self.finished:
                    self.event_wake.wait()
                if not self.event_queue:
                    return
                node_name, reason, event_type, message, moment = self.event_queue[0]
            self.post_event(node_name, reason, event_type, message, moment)
            with self.lock:
                self.event_queue.popleft()
                self.event_wake.notify_all()

    def flush(self):
        """Wait until every Event asked for is posted (or failed); no more steps are reported after this."""
        with self.lock:
            self.finished = True
            self.event_wake.notify_all()
            threads = [t for t in (self.event_thread, self.writer) if t is not None]
        for thread in threads:
            thread.join()

    def post_event(self, node_name, reason, event_type, message, moment=None):
        try:
            self.events_ops.create_event(EVENT_NAMESPACE, event_body(
                node_name, None, reason, event_type, message, moment or utc_now()))
            with self.lock:
                self.events_posted += 1
        except Exception as exc:  # noqa: BLE001 - an Event is a courtesy; the rollout goes on without it
            text = "Event %s on node %s not posted: %s" % (reason, node_name, getattr(exc, "status", None) and
                                                           "HTTP %s %s" % (exc.status, exc.reason) or exc)
            with self.lock:
                if not any(e.startswith("Event %s " % reason) for e in self.event_errors):
                    self.event_errors.append(text)

    def finish(self):
        """The rollout is over: post the Events still queued, then mark the record finished."""
        self.flush()
        with self.lock:
            if self.path:
                self.keep()

    def keep(self):
        """(lock held) Write the record during the run. The record is for people watching; the nodes are the truth,
        so a failed write (a full disk) must not fail a node mid-step: it is counted, the next step tries again,
        and ``write_warning()`` tells the caller."""
        try:
            self.write()
            self.write_error = None
        except OSError as exc:
            self.write_failures += 1
            self.write_error = exc.strerror or str(exc)

    def write_warning(self):
        """A line for the result when writes failed (None when none did)."""
        if not self.write_failures:
            return None
        if self.write_error:
            return ("progress record %s: %d write(s) failed, the last with: %s; it stops short of the rollout's end, "
                    "whose outcome is in this result's rows" % (self.path, self.write_failures, self.write_error))
        return "progress record %s: %d write(s) failed; later writes succeeded" % (self.path, self.write_failures)

    def record(self):
        return {"version": RECORD_VERSION, "config": self.config, "started": round(self.started, 3),
                "updated": round(self.clock(), 3), "finished": self.finished,
                "nodes": [dict(self.nodes[n], history=list(self.nodes[n]["history"])) for n in self.order]}

    def write(self):
        """Replace the record atomically (caller holds the lock, or no thread runs yet)."""
        self.written_at, self.dirty = time.monotonic(), False
        directory = os.path.dirname(os.path.abspath(self.path))
        handle, temp = tempfile.mkstemp(prefix=".progress-", dir=directory)
        try:
            with os.fdopen(handle, "w") as stream:
                json.dump(self.record(), stream)
            os.replace(temp, self.path)
        except Exception:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise


def progress_lines(old, new):
    """Lines for what changed between two records (``old`` may be None): one per node whose step changed, with
    the step's wall-clock time and the time since the node started. Lines never contain ``{`` (a JSON stdout
    callback's output is found by its first brace)."""
    before = dict((n["node"], n) for n in (old or {}).get("nodes") or [])
    changes = []
    for node in (new or {}).get("nodes") or []:
        prior = before.get(node["node"]) or {"history": []}
        for moment, step in node.get("history", [])[len(prior.get("history") or []):]:
            elapsed = max(0.0, moment - node["started"])
            clock = datetime.datetime.fromtimestamp(moment).strftime("%H:%M:%S")
            text = "%s  %s  %s  +%.0fs" % (clock, node["node"], step, elapsed)
            if step in FINAL_STEPS and node.get("message") and step == node.get("step"):
                text += "  " + node["message"]
            changes.append((moment, text.replace("{", "(").replace("}", ")")))
    return [text for _moment, text in sorted(changes, key=lambda change: change[0])]  # in the order they happened
