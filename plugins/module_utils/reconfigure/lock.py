# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""A coordination.k8s.io/v1 Lease held for a whole MIG rollout, so a second rollout is refused.

The holder renews the lease while it works; a holder that dies stops renewing and its lease expires
after ``leaseDurationSeconds``, after which a new rollout may take it over (and resume the half-done
nodes). Updates carry the resourceVersion read, so two takers race safely: one gets 409 Conflict.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import ApiException


class LockHeld(Exception):
    """Another holder owns a live lease."""

    def __init__(self, message, lease=None):
        super(LockHeld, self).__init__(message)
        self.lease = lease or {}


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def format_time(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    if not text:
        return None
    text = text.rstrip("Z")
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.datetime.strptime(text, fmt).replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            continue
    return None


def lease_view(lease):
    """The fields a user needs to know who holds the lock and until when."""
    spec = (lease or {}).get("spec") or {}
    renew = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 0)
    expires = renew + datetime.timedelta(seconds=duration) if renew else None
    return {"holder": spec.get("holderIdentity"), "acquired": spec.get("acquireTime"),
            "renewed": spec.get("renewTime"), "duration_s": duration,
            "expires": format_time(expires) if expires else None,
            "rollout": ((lease or {}).get("metadata") or {}).get("annotations", {}).get("gpufleet.io/rollout")}


def is_expired(lease, now=None):
    view = lease_view(lease)
    if not view["holder"]:
        return True
    expires = parse_time(view["expires"])
    return expires is None or (now or _now()) >= expires


class RolloutLock(object):
    def __init__(self, custom_api, namespace, name, holder, duration_s, counter=None, description=None):
        # Leases through CustomObjectsApi: plain dicts keep MicroTime strings exactly as the API wants them.
        self.api = custom_api
        self.namespace = namespace
        self.name = name
        self.holder = holder
        self.duration_s = int(duration_s)
        self.counter = counter
        self.description = description

    def _coords(self):
        return ("coordination.k8s.io", "v1", self.namespace, "leases")

    def _count(self, verb):
        if self.counter is not None:
            self.counter.add(verb)

    def read(self):
        self._count("get")
        try:
            return self.api.get_namespaced_custom_object(*self._coords(), name=self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _landed(self, body):
        """After a 409 on our create/replace: whether the write that answered 409 was the repeat of our own
        write that had landed (its response lost to a broken connection, the call retried): the Lease then holds
        exactly our holder and renewTime."""
        current = self.read()
        spec = (current or {}).get("spec") or {}
        return current is not None and spec.get("holderIdentity") == self.holder \
            and spec.get("renewTime") == body["spec"]["renewTime"]

    def _body(self, existing, acquire):
        now = format_time(_now())
        spec = dict((existing or {}).get("spec") or {})
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if existing else 0)
        spec.update({"holderIdentity": self.holder, "leaseDurationSeconds": self.duration_s, "renewTime": now})
        metadata = {"name": self.name, "namespace": self.namespace,
                    "annotations": {"gpufleet.io/rollout": self.description or ""}}
        if existing:
            metadata["resourceVersion"] = existing["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def acquire(self, take_over_expired=True, break_lock=False, check_mode=False):
        """Take the lease (or renew our own). Returns (changed, view). Raises LockHeld."""
        existing = self.read()
        if existing is None:
            if not check_mode:
                self._count("create")
                body = self._body(None, True)
                try:
                    self.api.create_namespaced_custom_object(*self._coords(), body=body)
                except ApiException as exc:
                    if exc.status == 409 and self._landed(body):
                        return True, lease_view(body)
                    if exc.status == 409:
                        raise LockHeld("rollout lock %s/%s was just taken by another rollout" % (
                            self.namespace, self.name))
                    raise
            return True, lease_view(self._body(None, True))
        view = lease_view(existing)
        ours = view["holder"] == self.holder
        if not ours and not break_lock and not (take_over_expired and is_expired(existing)):
            raise LockHeld("another MIG rollout holds lock %s/%s: holder %s (%s), renewed %s, expires %s" % (
                self.namespace, self.name, view["holder"], view["rollout"] or "no description", view["renewed"],
                view["expires"]), view)
        body = self._body(existing, acquire=not ours)
        if not check_mode:
            self._count("update")
            try:
                self.api.replace_namespaced_custom_object(*self._coords(), name=self.name, body=body)
            except ApiException as exc:
                if exc.status == 409 and not self._landed(body):
                    raise LockHeld("rollout lock %s/%s changed hands while taking it" % (self.namespace, self.name))
                if exc.status != 409:
                    raise
        view = lease_view(body)
        view["previous_holder"] = None if ours else lease_view(existing)["holder"]
        return True, view

    def renew(self):
        """Renew our lease; raises LockHeld when someone else holds it now."""
        existing = self.read()
        if existing is None or lease_view(existing)["holder"] != self.holder:
            raise LockHeld("lost rollout lock %s/%s (holder now %s)" % (
                self.namespace, self.name, lease_view(existing)["holder"] if existing else "nobody"))
        self._count("update")
        body = self._body(existing, acquire=False)
        try:
            self.api.replace_namespaced_custom_object(*self._coords(), name=self.name, body=body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            if not self._landed(body):
                raise LockHeld("lost rollout lock %s/%s (changed by another writer while renewing)" % (
                    self.namespace, self.name))

    def release(self, check_mode=False):
        """Delete the lease if we hold it. Returns (changed, outcome)."""
        existing = self.read()
        if existing is None:
            return False, "absent"
        holder = lease_view(existing)["holder"]
        if holder != self.holder:
            return False, "held by %s" % holder
        if not check_mode:
            self._count("delete")
            try:
                self.api.delete_namespaced_custom_object(*self._coords(), name=self.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return True, "released"


class LeaseRenewer(object):
    """Renews a RolloutLock every duration/3 seconds in a background thread while a batch runs.

    Only a lost Lease (``LockHeld``: another holder has it) ends the renewing, as ``error``. An API that cannot be
    reached is tried again at the next interval: when it answers before anyone else took the expired Lease, the
    same holder renews it (kept); ``lapses`` records each time the Lease went unrenewed past its duration."""

    def __init__(self, lock):
        self.lock = lock
        self.error = None
        self.lapses = []
        self.renewed_at = time.monotonic()  # of the last renewal that landed, on this process's monotonic clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)

    def _run(self):
        interval = max(1.0, self.lock.duration_s / 3.0)
        renewed = time.monotonic()
        failing = None
        while not self._stop.wait(interval):
            try:
                self.lock.renew()
            except LockHeld as exc:  # reported by the batch result
                self.error = str(exc)
                return
            except Exception as exc:  # pylint: disable=broad-except  # the API is unavailable: try again
                failing = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                continue
            if failing is not None and time.monotonic() - renewed > self.lock.duration_s:
                self.lapses.append("not renewed for %.0fs (%s); renewed again by the same holder" % (
                    time.monotonic() - renewed, failing))
            renewed, failing = time.monotonic(), None
            self.renewed_at = renewed

    def lapsed_s(self):
        """Seconds past the Lease's duration since our last renewal landed (0.0 while it is valid). Judged by this
        process's monotonic clock from the renewal it made, never by comparing another host's clock with ours."""
        return max(0.0, time.monotonic() - self.renewed_at - self.lock.duration_s)

    def lost(self):
        """Why no node may start now (the Lease taken or deleted, or not renewed past its duration), or None."""
        if self.error:
            return self.error
        lapsed = self.lapsed_s()
        if lapsed > 0:
            return ("rollout lock %s/%s not renewed for %.0fs, past its duration of %ss (the API server unreachable?): "
                    "another rollout may take it" % (self.lock.namespace, self.lock.name,
                                                     lapsed + self.lock.duration_s, self.lock.duration_s))
        return None

    def __enter__(self):
        self.lock.renew()
        self.renewed_at = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join(timeout=5)
        return False
