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
import hashlib
import json
import os
import signal
import tempfile
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
            # Our own writes race too (the keeper and a module's renewer of the same holder): the Lease renewed
            # by either is still ours.
            current = self.read()
            if current is None or lease_view(current)["holder"] != self.holder:
                raise LockHeld("lost rollout lock %s/%s (holder now %s)" % (
                    self.namespace, self.name, lease_view(current)["holder"] if current else "nobody"))

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
        lost = keeper_loss(self.lock)
        if lost:
            raise LockHeld(lost)
        self.lock.renew()
        self.renewed_at = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join(timeout=5)
        return False


# -- the keeper: the Lease renewed between module calls ------------------------------------------------------------

# How often the keeper looks at the stop request, the run's process and its maximum run time: a file test and a
# signal 0 (no API request), so a release waits for the keeper at most this long.
KEEPER_POLL_S = 0.2
KEEPER_STOP_WAIT_S = 10.0  # how long a release waits for the keeper to stop before deleting the Lease


def keeper_path(lock):
    """The keeper's state file on the controller, named by the Lease and its holder (one keeper per run)."""
    key = hashlib.sha256(("%s/%s/%s" % (lock.namespace, lock.name, lock.holder)).encode("utf-8")).hexdigest()[:20]
    return os.path.join(tempfile.gettempdir(), "gpufleet-lease-keeper-%s.json" % key)


def read_keeper(lock):
    """The keeper's recorded state ({pid, lease, holder, renewed, lapses, lost, ended ...}), or None."""
    try:
        with open(keeper_path(lock)) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def keeper_loss(lock):
    """Why the keeper of this holder gave the Lease up (taken, deleted, or kept past its maximum run time), or
    None (no keeper, or one that holds it)."""
    state = read_keeper(lock)
    return (state or {}).get("lost")


def write_state(path, state):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle)
    os.rename(tmp, path)


def pid_alive(pid, proc="/proc"):
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (IOError, OSError, IndexError):
        return True


def run_process(start=None, proc="/proc"):
    """The ansible-playbook process this module runs under, when it runs on the controller: the outermost ancestor
    whose command line names ansible-playbook (its workers are forks of it with the same command line). None when
    there is none or the process table cannot be read (no /proc)."""
    pid, found = start or os.getppid(), None
    for _depth in range(64):
        if pid <= 1:
            break
        try:
            with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
                parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (IOError, OSError, ValueError, IndexError):
            break
        if any(os.path.basename(arg.decode("utf-8", "replace")) == "ansible-playbook" for arg in argv[:3]):
            found = pid
        pid = parent
    return found


class LeaseKeeper(object):
    """Renews the Lease every duration/3 between module calls, in a process of its own, until one of:

    - the release asks it to stop (``<state file>.stop``): ended, the Lease left for the release to delete;
    - the Lease is taken or deleted (``LockHeld``): recorded as ``lost``;
    - it has run ``max_run_s``: recorded as ``lost`` (the Lease is then no longer renewed);
    - the run's ansible-playbook process ``run_pid`` is gone: ended, the Lease left to expire after its duration.

    The loss is recorded in the state file, where the next module call of the run finds it (``keeper_loss``).
    ``clock`` and ``sleep`` are injectable for the tests of the logic."""

    def __init__(self, lock, run_pid=None, max_run_s=86400, clock=time.monotonic, sleep=time.sleep):
        self.lock = lock
        self.run_pid = run_pid
        self.max_run_s = max_run_s
        self.clock = clock
        self.sleep = sleep
        self.path = keeper_path(lock)
        self.state = {"pid": os.getpid(), "lease": "%s/%s" % (lock.namespace, lock.name), "holder": lock.holder,
                      "run_pid": run_pid, "max_run_s": max_run_s, "renewed": None, "lapses": [], "lost": None,
                      "ended": None}

    def save(self):
        write_state(self.path, self.state)

    def step(self, started, next_renewal, renewed, failing):
        """One look; returns (next_renewal, renewed, failing) or None once the keeper ends."""
        now = self.clock()
        if os.path.exists(self.path + ".stop"):
            self.state["ended"] = "stopped by the release"
            return None
        if self.run_pid and not pid_alive(self.run_pid):
            self.state["ended"] = "the run's ansible-playbook process %s ended; the Lease expires %ss after its " \
                "last renewal" % (self.run_pid, self.lock.duration_s)
            return None
        if now - started >= self.max_run_s:
            self.state["lost"] = "rollout lock %s/%s no longer renewed: the run went past the keeper's maximum " \
                "run time of %ss" % (self.lock.namespace, self.lock.name, self.max_run_s)
            self.state["ended"] = "maximum run time"
            return None
        if now < next_renewal:
            return next_renewal, renewed, failing
        try:
            self.lock.renew()
        except LockHeld as exc:
            self.state["lost"] = str(exc)
            self.state["ended"] = "Lease lost"
            return None
        except Exception as exc:  # pylint: disable=broad-except  # the API is unavailable: try again
            failing = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return now + max(1.0, self.lock.duration_s / 3.0), renewed, failing
        if failing is not None and now - renewed > self.lock.duration_s:
            self.state["lapses"].append("not renewed for %.0fs (%s); renewed again by the same holder" % (
                now - renewed, failing))
        self.state["renewed"] = format_time(_now())
        self.save()
        return now + max(1.0, self.lock.duration_s / 3.0), now, None

    def run(self):
        started = self.clock()
        looked = (started + max(1.0, self.lock.duration_s / 3.0), started, None)
        self.save()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_args: stop.set())
        while not stop.is_set():
            looked = self.step(started, *looked)
            if looked is None:
                break
            self.sleep(KEEPER_POLL_S)
        else:
            self.state["ended"] = "terminated (SIGTERM)"
        if self.run_pid and not pid_alive(self.run_pid):  # nobody is left to read the state: no file left behind
            for done in (self.path, self.path + ".stop"):
                if os.path.exists(done):
                    os.remove(done)
            return
        self.save()


def start_keeper(lock, run_pid, max_run_s, wait_s=10.0):
    """Start a LeaseKeeper in a detached process (its own session, no terminal, stdio on /dev/null, so Ctrl-C of
    the run does not reach it and Ansible does not wait for it). Returns its state once it has written it."""
    path = keeper_path(lock)
    for stale in (path, path + ".stop"):
        if os.path.exists(stale):
            os.remove(stale)
    first = os.fork()
    if first == 0:  # pragma: no cover  # the forks end in os._exit
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.chdir("/")
            rest = getattr(getattr(lock.api, "api_client", None), "rest_client", None)
            if rest is not None:  # the connections the parent opened stay the parent's
                rest.pool_manager.clear()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            LeaseKeeper(lock, run_pid=run_pid, max_run_s=max_run_s).run()
        finally:
            os._exit(0)
    os.waitpid(first, 0)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        state = read_keeper(lock)
        if state is not None:
            return state
        time.sleep(0.05)
    return None


def stop_keeper(lock, wait_s=KEEPER_STOP_WAIT_S):
    """Ask this holder's keeper to stop and wait until it has (at most ``wait_s``; then SIGTERM). Returns its last
    state (None when it never ran) and removes its files."""
    path = keeper_path(lock)
    state = read_keeper(lock)
    if state is None:
        return None
    if not state.get("ended"):
        with open(path + ".stop", "w"):
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and pid_alive(state["pid"]):
            state = read_keeper(lock) or state
            if state.get("ended"):
                break
            time.sleep(0.05)
        else:
            if pid_alive(state["pid"]):
                os.kill(state["pid"], signal.SIGTERM)
        state = read_keeper(lock) or state
    for done in (path, path + ".stop"):
        if os.path.exists(done):
            os.remove(done)
    return state
