# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""A real Kubernetes control plane with kwok-simulated nodes, run as local processes.

kwokctl (binary runtime) starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
the kwok controller from the binaries that ``tests/testbed/build.sh`` built; nothing is downloaded.
Every component listens on 127.0.0.1 on a port chosen here, so clusters with distinct names and
directories run side by side.

CLI:  python -m tests.testbed.cluster up|down|env|status [--name N] [--dir D]
API:  Cluster(name, directory).up() / .down() / .env() / .status()
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "testbed" / "build.sh"
DEFAULT_DIR = REPO_ROOT / ".testbed"
DEFAULT_NAME = "gpufleet"
DEFAULT_TIMEOUT = 120.0
KWOK_STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "kwokctl", "helm")
# Start order; the readiness wait reports the first one that is not healthy.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")
# kwokctl links each binary into <cluster>/bin/<component> and names pid/log files after it
# (runtime/exec.go ForkExec; seen in `kwokctl create cluster --dry-run`).
PORT_OPTIONS = ("kubeApiserverPort", "etcdPort", "etcdPeerPort", "kubeControllerManagerPort",
                "kubeSchedulerPort", "kwokControllerPort")
# One lock for every cluster on this machine: port choice and process start are not atomic.
START_LOCK = Path(tempfile.gettempdir()) / "gpufleet-testbed-start.lock"


class TestbedError(RuntimeError):
    """The testbed cannot be built, started, checked or stopped; the message says which part."""

    __test__ = False  # not a pytest test class


def default_bin_dir():
    """Directory with the testbed binaries as build.sh reports it ($TESTBED_BIN overrides)."""
    out = subprocess.run([str(BUILD_SCRIPT), "path"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def free_ports(count):
    """Ports the kernel hands out for 127.0.0.1 right now (held together so they are distinct)."""
    socks = []
    try:
        for dummy in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid):
    """True when the process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pids_mentioning(text):
    """PIDs whose command line contains ``text`` (used to find a cluster's leftover processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


class Cluster:
    """One kwokctl cluster named ``name`` whose files all live under ``directory``."""

    def __init__(self, name=DEFAULT_NAME, directory=DEFAULT_DIR, bin_dir=None, audit_policy=None):
        self.name = name
        # An audit.k8s.io/v1 Policy file: kube-apiserver then writes <cluster>/logs/audit.log (kwokctl
        # option kubeAuditPolicy); the benchmark counts the controller's requests there.
        self.audit_policy = Path(audit_policy) if audit_policy else None
        self.directory = Path(directory).resolve()
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.lock_wait_seconds = 0.0  # time up() waited for another cluster's start (not start time)
        self.reaper = None  # watchdog process from start_reaper()
        self.already_running = False  # up() found a healthy cluster and left it as it was

    # -- paths -----------------------------------------------------------------------------
    @property
    def kubeconfig(self):
        return self.directory / "kubeconfig"

    @property
    def kwok_workdir(self):
        return self.directory / "kwok"

    @property
    def cluster_dir(self):
        return self.kwok_workdir / "clusters" / self.name

    @property
    def config_path(self):
        return self.directory / ("kwokctl-%s.yaml" % self.name)

    @property
    def audit_log(self):
        return self.cluster_dir / "logs" / "audit.log"

    def log_path(self, component):
        return self.cluster_dir / "logs" / ("%s.log" % component)

    def pid(self, component):
        try:
            return int((self.cluster_dir / "pids" / ("%s.pid" % component)).read_text().strip())
        except (OSError, ValueError):
            return None

    # -- environment -----------------------------------------------------------------------
    def env(self):
        """Variables for a subprocess that should talk to this cluster with these binaries."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "K8S_AUTH_KUBECONFIG": str(self.kubeconfig),
            "PATH": "%s%s%s" % (self.bin_dir, os.pathsep, os.environ.get("PATH", "")),
            "KWOK_WORKDIR": str(self.kwok_workdir),
        }

    def _kwokctl(self, *args, check=True, timeout=None):
        env = dict(os.environ, KWOK_WORKDIR=str(self.kwok_workdir), KWOK_RUNTIME="binary")
        cmd = [str(self.bin_dir / "kwokctl"), "--name", self.name, *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise TestbedError("%s failed (rc=%d):\n%s%s" % (shlex.join(cmd), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def _check_binaries(self):
        missing = [b for b in BINARIES if not os.access(self.bin_dir / b, os.X_OK)]
        if missing:
            raise TestbedError("testbed binaries missing in %s: %s (run `make testbed-build`)"
                               % (self.bin_dir, ", ".join(missing)))

    def _write_config(self):
        ports = dict(zip(PORT_OPTIONS, free_ports(len(PORT_OPTIONS))))
        b = self.bin_dir
        options = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            # Node,RBAC authorization (kwok components/kube_apiserver.go) so missing rights give 403;
            # the admin kubeconfig's client cert is in group system:masters (kwokctl pki.go).
            "kubeAuthorization": True,
            "kubeAdmission": True,
            "kubeApiserverBinary": str(b / "kube-apiserver"),
            "kubeControllerManagerBinary": str(b / "kube-controller-manager"),
            "kubeSchedulerBinary": str(b / "kube-scheduler"),
            "kubectlBinary": str(b / "kubectl"),
            "etcdBinary": str(b / "etcd"),
            "kwokControllerBinary": str(b / "kwok"),
            "cacheDir": str(self.kwok_workdir / "cache"),
            # kwok serves `kubectl logs` from Logs objects (the simulated MIG Manager writes its log there).
            "enableCRDs": ["Logs"],
        }
        options.update(ports)
        if self.audit_policy is not None:
            options["kubeAuditPolicy"] = str(self.audit_policy)
        config = {"kind": "KwokctlConfiguration", "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "options": options}
        # kwok's default Stages, except that a node whose simulated kubelet is stopped stays NotReady (see the file)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False) + "---\n" + KWOK_STAGES.read_text())
        return ports

    def ports(self):
        """Ports of this cluster's components, read from the config kwokctl recorded."""
        try:
            docs = list(yaml.safe_load_all((self.cluster_dir / "kwok.yaml").read_text()))
        except (OSError, yaml.YAMLError):
            return {}
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
                return {k: doc.get("options", {}).get(k) for k in PORT_OPTIONS}
        return {}

    # -- health ----------------------------------------------------------------------------
    def _get(self, url, client_cert=False):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # loopback health probes of components with self-signed serving certs
        if client_cert:
            pki = self.cluster_dir / "pki"
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, ssl.SSLError) as exc:
            return None, str(exc)

    def component_health(self, component, ports=None):
        """(healthy, detail) for one component: process alive and its health endpoint says ok."""
        pid = self.pid(component)
        if pid is None or not pid_alive(pid):
            return False, "process not running (pid %s)" % pid
        p = ports or self.ports()
        if component == "etcd":
            code, body = self._get("http://127.0.0.1:%s/health" % p.get("etcdPort"))
            return code == 200 and '"true"' in body, "GET /health -> %s %s" % (code, body.strip()[:200])
        if component == "kube-apiserver":
            code, body = self._get("https://127.0.0.1:%s/readyz" % p.get("kubeApiserverPort"), client_cert=True)
        elif component == "kube-controller-manager":
            code, body = self._get("https://127.0.0.1:%s/healthz" % p.get("kubeControllerManagerPort"))
        elif component == "kube-scheduler":
            code, body = self._get("https://127.0.0.1:%s/healthz" % p.get("kubeSchedulerPort"))
        else:
            code, body = self._get("http://127.0.0.1:%s/healthz" % p.get("kwokControllerPort"))
        return code == 200 and body.strip() == "ok", "GET health -> %s %s" % (code, body.strip()[:200])

    def status(self):
        """{component: {"healthy": bool, "pid": int or None, "detail": str}} for every component."""
        result = {}
        ports = self.ports()
        for component in COMPONENTS:
            healthy, detail = self.component_health(component, ports)
            result[component] = {"healthy": healthy, "pid": self.pid(component), "detail": detail}
        return result

    def is_running(self):
        return self.cluster_dir.exists() and all(v["healthy"] for v in self.status().values())

    def wait_ready(self, timeout=DEFAULT_TIMEOUT):
        """Wait until every component is healthy and the cluster can take pods; name the laggard."""
        deadline = time.monotonic() + timeout
        for component in COMPONENTS:
            while True:
                healthy, detail = self.component_health(component)
                if healthy:
                    break
                if time.monotonic() > deadline:
                    raise TestbedError("testbed %r: %s did not come up within %.0fs: %s\nlast log lines (%s):\n%s"
                                       % (self.name, component, timeout, detail, self.log_path(component),
                                          self.log_tail(component)))
                time.sleep(0.2)
        # Pods need the namespace's "default" ServiceAccount, which the controller-manager creates.
        while True:
            proc = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig),
                                   "get", "serviceaccount", "default", "-n", "default", "-o", "name"],
                                  capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TestbedError("testbed %r: kube-controller-manager did not create serviceaccount default/default "
                                   "within %.0fs: %s" % (self.name, timeout, proc.stderr.strip()))
            time.sleep(0.2)

    def log_tail(self, component, lines=20):
        try:
            return "\n".join(self.log_path(component).read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return "(no log: %s)" % exc

    # -- lifecycle -------------------------------------------------------------------------
    def up(self, timeout=DEFAULT_TIMEOUT):
        """Start the cluster (or keep a healthy one) and return seconds spent."""
        started = time.monotonic()
        self._check_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.cluster_dir.exists():
            if self.is_running():
                self.already_running = True
                return time.monotonic() - started
            self.down()  # half-dead leftovers: start clean rather than patch them up
        with open(START_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.lock_wait_seconds = time.monotonic() - started
            deadline = time.monotonic() + timeout
            self._write_config()
            if self.kubeconfig.exists():
                self.kubeconfig.unlink()  # kwokctl merges into an existing file; we want only this cluster
            try:
                self._create(deadline)
                self.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
            except TestbedError as exc:
                unhealthy = [c for c, s in self.status().items() if not s["healthy"]]
                logs = "\n".join("--- %s (%s):\n%s" % (c, self.log_path(c), self.log_tail(c)) for c in unhealthy[:2])
                self.down()
                # Components start in order, so the first unhealthy one is the cause; later ones follow from it.
                raise TestbedError("testbed %r failed to start (first unhealthy: %s; not healthy: %s): %s\n%s"
                                   % (self.name, unhealthy[0] if unhealthy else "none",
                                      ", ".join(unhealthy) or "none", exc, logs))
        return time.monotonic() - started

    def _create(self, deadline):
        """Run `kwokctl create cluster`; fail fast when a component it started dies or time runs out.

        kwokctl's own --wait does not bound how long it waits for a dead etcd, hence the watch here.
        """
        env = dict(os.environ, KWOK_WORKDIR=str(self.kwok_workdir), KWOK_RUNTIME="binary")
        cmd = [str(self.bin_dir / "kwokctl"), "--name", self.name, "create", "cluster",
               "--config", str(self.config_path), "--kubeconfig", str(self.kubeconfig)]
        with tempfile.TemporaryFile("w+") as output:
            proc = subprocess.Popen(cmd, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
            try:
                while proc.poll() is None:
                    dead = [c for c in COMPONENTS if self.pid(c) is not None and not pid_alive(self.pid(c))]
                    if dead:
                        raise TestbedError("%s exited while the cluster was starting" % dead[0])
                    if time.monotonic() > deadline:
                        raise TestbedError("kwokctl create cluster still running at the deadline")
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    proc.terminate()  # our own child
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            if proc.returncode != 0:
                output.seek(0)
                raise TestbedError("%s failed (rc=%d): %s" % (shlex.join(cmd), proc.returncode, output.read()[-3000:]))

    def start_reaper(self, owner_pid):
        """Start a detached watchdog that stops this cluster if ``owner_pid`` exits without down().

        kwokctl runs the components in their own sessions, so they outlive a killed test run; the
        watchdog exits by itself once the cluster directory is gone (normal teardown).
        """
        with open(self.directory / "reaper.log", "a") as log:
            self.reaper = subprocess.Popen(  # pylint: disable=consider-using-with  # outlives this call on purpose
                [sys.executable, "-m", "tests.testbed.cluster", "reap", "--owner", str(owner_pid), "--name", self.name,
                 "--dir", str(self.directory), "--bin-dir", str(self.bin_dir)],
                cwd=str(REPO_ROOT), start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        return self.reaper

    def reap(self, owner_pid, interval=1.0):
        """Wait until ``owner_pid`` is gone or the cluster was stopped; stop it in the first case."""
        while self.cluster_dir.exists() and pid_alive(owner_pid):
            time.sleep(interval)
        if self.cluster_dir.exists():
            print("owner %d exited without stopping testbed %r; stopping it" % (owner_pid, self.name), flush=True)
            self.down()

    # -- faults: one component stopped and started again -------------------------------------
    def launch_info(self, component):
        """How a running component was started: {component, argv, env, cwd} (for start_component)."""
        pid = self.pid(component)
        if pid is None or not pid_alive(pid):
            raise TestbedError("testbed %r: %s is not running (pid %s)" % (self.name, component, pid))
        proc = Path("/proc/%d" % pid)
        try:
            argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            environ = dict(e.decode(errors="replace").split("=", 1)
                           for e in (proc / "environ").read_bytes().split(b"\0") if b"=" in e)
            cwd = os.readlink(str(proc / "cwd"))
        except OSError as exc:
            raise TestbedError("testbed %r: cannot read how %s (pid %d) was started: %s" % (self.name, component, pid, exc))
        return {"component": component, "argv": argv, "env": environ, "cwd": cwd, "pid": pid}

    def stop_component(self, component, timeout=30.0):
        """Stop one component (``kube-apiserver``, ``etcd`` ...) as a crash or a restart would: SIGTERM, then
        SIGKILL. Returns what ``start_component`` needs to start it again with the same command line,
        working directory and environment (kwokctl has no per-component stop/start in the binary runtime)."""
        if component not in COMPONENTS:
            raise TestbedError("testbed %r: unknown component %s" % (self.name, component))
        info = self.launch_info(component)
        pid = info["pid"]
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() > deadline - timeout / 2:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise TestbedError("testbed %r: %s (pid %d) did not stop" % (self.name, component, pid))
            time.sleep(0.1)
        return info

    def revive(self, launched, timeout=DEFAULT_TIMEOUT):
        """Start again every component of ``launched`` ({component: launch_info}) whose process has exited, as
        the kubelet restarts a crashed static pod: kube-controller-manager and kube-scheduler exit when they
        cannot renew their leader Lease for 10 s (an API server outage). Returns the names started."""
        revived = []
        for component, info in launched.items():
            pid = self.pid(component)
            if pid is None or not pid_alive(pid):
                self.start_component(info, timeout=timeout)
                revived.append(component)
        return revived

    def settle(self, launched, seconds=15.0):
        """``revive`` for ``seconds`` (a controller may exit a little after the API server is back)."""
        revived = []
        deadline = time.monotonic() + seconds
        while True:
            revived += self.revive(launched)
            if time.monotonic() >= deadline:
                return revived
            time.sleep(1.0)

    def start_component(self, stopped, timeout=DEFAULT_TIMEOUT):
        """Start a component ``stop_component`` stopped, in its own session, logging where kwokctl's copy did,
        and wait until it is healthy again. Returns seconds until healthy."""
        started = time.monotonic()
        component = stopped["component"]
        with open(self.log_path(component), "ab") as log:
            child = subprocess.Popen(stopped["argv"], cwd=stopped["cwd"], env=stopped["env"], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        (self.cluster_dir / "pids" / ("%s.pid" % component)).write_text("%d" % child.pid)
        deadline = started + timeout
        while True:
            healthy, detail = self.component_health(component)
            if healthy:
                return time.monotonic() - started
            if child.poll() is not None or time.monotonic() > deadline:
                raise TestbedError("testbed %r: %s did not come back (%s): %s\nlast log lines:\n%s" % (
                    self.name, component, "exited %s" % child.returncode if child.poll() is not None else "timeout",
                    detail, self.log_tail(component)))
            time.sleep(0.2)

    @contextlib.contextmanager
    def component_stopped(self, component):
        """``with cluster.component_stopped("kube-apiserver"):`` the component is down inside the block; after it,
        it runs again and so does every other component that exited meanwhile (``revive``), all healthy, also when
        the block raises. The names revived are in the yielded dict's ``revived`` after the block."""
        launched = dict((c, self.launch_info(c)) for c in COMPONENTS if c != component)
        stopped = self.stop_component(component)
        stopped["revived"] = []
        try:
            yield stopped
        finally:
            self.start_component(stopped)
            stopped["revived"] = self.settle(launched)

    def down(self, timeout=30.0):
        """Stop every process of this cluster and remove its files; raise if any process survives."""
        if self.cluster_dir.exists():
            self._kwokctl("delete", "cluster", check=False, timeout=timeout + 30)
        marker = str(self.cluster_dir) + os.sep
        deadline = time.monotonic() + timeout
        survivors = pids_mentioning(marker)
        while survivors and time.monotonic() < deadline:
            for pid in survivors:  # only processes whose command line names this cluster's directory
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM if time.monotonic() < deadline - timeout / 2 else signal.SIGKILL)
            time.sleep(0.3)
            survivors = pids_mentioning(marker)
        if survivors:
            raise TestbedError("testbed %r: processes still running after teardown: %s" % (self.name, survivors))
        for path in (self.kubeconfig, self.config_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.cluster_dir.exists():
            subprocess.run(["rm", "-rf", str(self.cluster_dir)], check=False)
        if self.reaper is not None:
            self.reaper.wait(timeout=10)  # it exits within a second of the cluster directory going away
            self.reaper = None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("action", choices=["up", "down", "env", "status", "reap"])
    parser.add_argument("--name", default=os.environ.get("GPUFLEET_TESTBED_NAME", DEFAULT_NAME))
    parser.add_argument("--dir", default=os.environ.get("GPUFLEET_TESTBED_DIR", str(DEFAULT_DIR)))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="readiness deadline (s) for up")
    parser.add_argument("--bin-dir", help="testbed binaries (default: tests/testbed/build.sh path)")
    parser.add_argument("--owner", type=int, help="reap: stop the cluster once this PID has exited")
    args = parser.parse_args(argv)
    cluster = Cluster(args.name, args.dir, args.bin_dir)
    try:
        if args.action == "up":
            seconds = cluster.up(timeout=args.timeout)
            if cluster.already_running:
                print("testbed %r already running and healthy; export KUBECONFIG=%s" % (cluster.name, cluster.kubeconfig))
                return 0
            print("testbed %r ready in %.1fs (%.1fs of it waiting for another cluster's start); export KUBECONFIG=%s"
                  % (cluster.name, seconds, cluster.lock_wait_seconds, cluster.kubeconfig))
        elif args.action == "down":
            cluster.down()
            print("testbed %r stopped; no process left" % cluster.name)
        elif args.action == "reap":
            cluster.reap(args.owner)
        elif args.action == "env":
            for key, value in cluster.env().items():
                print("export %s=%s" % (key, shlex.quote(value)))
        else:
            status = cluster.status()
            print(json.dumps({"name": cluster.name, "kubeconfig": str(cluster.kubeconfig), "components": status}, indent=2))
            return 0 if all(s["healthy"] for s in status.values()) else 1
    except TestbedError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
