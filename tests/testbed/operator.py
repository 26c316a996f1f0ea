"""NVIDIA's real GPU Operator controller, run as a local process against a testbed cluster.

  python -m tests.testbed.operator run   --kubeconfig K --run-dir D [--namespace gpu-operator]
  python -m tests.testbed.operator start --kubeconfig K --run-dir D [--pidfile P] [...]
  python -m tests.testbed.operator stop|status [--pidfile P]

kwok runs no containers, so the chart's operator Deployment only gets a Pod object that kwok marks
Running. ``run`` is a small supervisor that plays that pod's container: while the Deployment
``gpu-operator`` exists in the namespace (after ``helm install``, until ``helm uninstall``), it runs
the controller binary built by tests/testbed/build-operator.sh with the container's args and env
taken from the Deployment, restarting it with a back-off when it exits (as the kubelet would).
The binary is the release whose chart is installed (the pod template's ``app.kubernetes.io/version``
label is the chart's appVersion: v25.3.4's ``devel-ubi8``, v26.7.0's ``main-latest``), so a ``helm upgrade``
to another chart switches the controller; any change of the pod template restarts it, as a rollout would.

The controller reads its assets from the fixed path /opt/gpu-operator and the host's os-release from
/host-etc/os-release (the chart mounts it there), and its leader-election namespace from the
service-account files a pod gets (/var/run/secrets/kubernetes.io/serviceaccount/namespace). It runs in a private mount namespace
(``unshare --mount --propagation private``) whose root is a tmpfs holding bind mounts of the host's
system directories, of the cached assets at /opt/gpu-operator, of /etc/os-release at
/host-etc/os-release and that namespace file: nothing on the host changes. Its metrics and health ports bind to 127.0.0.1.

Everything is stopped by ``stop``; and because both processes' command lines name ``run-dir``,
which callers put inside the kwokctl cluster directory, ``Cluster.down()`` (``make testbed-down``,
the pytest teardown and its watchdog) stops them with the cluster.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed import daemon

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD = REPO_ROOT / "tests" / "testbed" / "build-operator.sh"
DEPLOYMENT = "gpu-operator"  # the chart's operator Deployment (deployments/gpu-operator/templates/operator.yaml)
CRD = "clusterpolicies.nvidia.com"
# What node-feature-discovery puts on a GPU node and the operator reads: the NVIDIA PCI vendor (selects
# GPU nodes) and os-release/kernel (driver image tag). NFD itself cannot run here (nfd.enabled=false).
NFD_GPU_NODE_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    "feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic",
}
# Chart values the testbed's direct helm installs add: NFD's own DaemonSets would run nothing under kwok,
# and the pre-upgrade hook Job that applies CRDs (a kubectl container) would need a node and run nothing.
TESTBED_CHART_VALUES = {"nfd": {"enabled": False}, "operator": {"upgradeCRD": False}}
# Mount-namespace setup; argv: root assets namespace bind-dirs... -- controller argv.
NAMESPACE_SCRIPT = r"""
set -eu
root=$1; assets=$2; namespace=$3; shift 3
binds=""
while [ "$1" != "--" ]; do binds="$binds $1"; shift; done
shift
mount -t tmpfs -o mode=0755 gpufleet-gpu-operator "$root"
for d in bin sbin lib lib32 lib64 libx32 usr etc dev proc sys tmp; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then mkdir -p "$root/$d"; mount --rbind "/$d" "$root/$d"; fi
done
mkdir -p "$root/opt/gpu-operator" "$root/host-etc"
mount --bind "$assets" "$root/opt/gpu-operator"
mount -o remount,bind,ro "$root/opt/gpu-operator"
: > "$root/host-etc/os-release"
mount --bind /etc/os-release "$root/host-etc/os-release"
mount -o remount,bind,ro "$root/host-etc/os-release"
# What the pod's service-account volume gives it; controller-runtime reads its leader-election namespace there.
mkdir -p "$root/var/run/secrets/kubernetes.io/serviceaccount"
printf '%s' "$namespace" > "$root/var/run/secrets/kubernetes.io/serviceaccount/namespace"
for d in $binds; do mkdir -p "$root$d"; mount --bind "$d" "$root$d"; done
cd /
exec chroot "$root" "$@"
"""


def _script(*args):
    proc = subprocess.run([str(BUILD), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("build-operator.sh %s failed:\n%s%s" % (" ".join(args), proc.stdout, proc.stderr[-4000:]))
    return proc.stdout.strip()


# The releases the testbed builds (build-operator.sh releases) and the production pin, which site.yml in the sandbox
# and the operator tests install (build-operator.sh version).
RELEASES = tuple(_script("releases").split())
PRODUCTION_RELEASE = _script("version")
# The release of the helm installs made by the shared session cluster's fixtures (tests/testbed/agents/pytest_agents.py)
# and of the tests written against them: the production pin, whose RBAC NVIDIA's MIG Manager v0.15.0 needs;
# GPUFLEET_OPERATOR_RELEASE picks another. The upgrade tests start from v25.3.4 (UPGRADE_FROM_RELEASE).
DEFAULT_RELEASE = os.environ.get("GPUFLEET_OPERATOR_RELEASE") or "v26.7.0"
UPGRADE_FROM_RELEASE = "v25.3.4"


def build(release=None):
    """Build or reuse ``release``'s controller, chart and assets; returns their cache directory."""
    return Path(_script("build", release or DEFAULT_RELEASE).splitlines()[-1])


def build_all():
    """Build or reuse every release; returns {release: cache directory}."""
    _script("all")
    return dict((release, cache_dir(release)) for release in RELEASES)


def cache_dir(release=None):
    """Cache directory of ``release``'s build (without building)."""
    return Path(_script("path", release or DEFAULT_RELEASE))


def chart_dir(release=None):
    """NVIDIA's chart of ``release`` (deployments/gpu-operator of its source), built/extracted when missing."""
    return build(release) / "chart" / "gpu-operator"


def app_version(build_dir):
    """The chart's appVersion in a build (what the chart puts in its pods' app.kubernetes.io/version label)."""
    import yaml

    return str(yaml.safe_load((Path(build_dir) / "chart" / "gpu-operator" / "Chart.yaml").read_text())["appVersion"])


def flatten_kubeconfig(source, dest):
    """Copy a kubeconfig with its certificate/key files embedded (*-data), so it works inside the controller's
    mount namespace, where the cluster's pki directory is not mounted."""
    import base64

    import yaml

    source = Path(source)
    config = yaml.safe_load(source.read_text())
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in config.get(section) or []:
            body = entry.get(key) or {}
            for field in ("certificate-authority", "client-certificate", "client-key"):
                if body.get(field):
                    path = Path(body.pop(field))
                    path = path if path.is_absolute() else source.parent / path
                    body[field + "-data"] = base64.b64encode(path.read_bytes()).decode()
    Path(dest).write_text(yaml.safe_dump(config))
    os.chmod(dest, 0o600)


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log(message):
    print("%s [operator-supervisor] %s" % (time.strftime("%H:%M:%S"), message), flush=True)


class Supervisor:
    """Runs the controller while the chart's operator Deployment exists."""

    def __init__(self, kubeconfig, run_dir, namespace="gpu-operator", poll_seconds=1.0):
        from kubernetes import client, config

        self.kubeconfig = Path(kubeconfig).resolve()
        self.run_dir = Path(run_dir).resolve()
        self.namespace = namespace
        self.poll_seconds = poll_seconds
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.apps = client.AppsV1Api(api)
        self.ext = client.ApiextensionsV1Api(api)
        self.child = None
        self.missing = None  # the appVersion last reported as having no build
        self.stopping = False
        self.failures = 0
        self.next_start = 0.0
        self.builds = {}  # chart appVersion -> build directory
        self.releases = {}  # chart appVersion -> release
        self.build = None  # the running controller's build
        self.template = None  # what the running controller was started from (build, image, args, env)

    def deployment(self):
        from kubernetes.client.rest import ApiException

        try:
            return self.apps.read_namespaced_deployment(DEPLOYMENT, self.namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def crd_established(self):
        from kubernetes.client.rest import ApiException

        try:
            crd = self.ext.read_custom_resource_definition(CRD)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    def build_for(self, deployment):
        """The build whose chart made ``deployment`` (by its pod template's app.kubernetes.io/version), or None."""
        labels = deployment.spec.template.metadata.labels or {}
        return self.builds.get(labels.get("app.kubernetes.io/version"))

    @staticmethod
    def template_key(build, deployment):
        container = next(c for c in deployment.spec.template.spec.containers if c.name == "gpu-operator")
        env = [(v.name, v.value) for v in container.env or []]
        return (str(build), container.image, tuple(container.args or ()), tuple(env))

    def command(self, deployment):
        """unshare ... chroot ... gpu-operator <the container's args>, and the container's env."""
        container = next(c for c in deployment.spec.template.spec.containers if c.name == "gpu-operator")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "KUBECONFIG": str(self.run_dir / "kubeconfig")}
        for var in container.env or []:
            if var.value_from is not None:
                field = var.value_from.field_ref.field_path if var.value_from.field_ref else None
                if field == "metadata.namespace":
                    env[var.name] = self.namespace
                continue
            env[var.name] = var.value or ""
        args = [a for a in container.args or [] if not a.startswith(("--metrics-bind-address", "--health-probe"))]
        binary = self.build / "bin" / "gpu-operator"
        controller = [str(binary), *args, "--kubeconfig", str(self.run_dir / "kubeconfig"),
                      "--metrics-bind-address", "127.0.0.1:%d" % free_port(),
                      "--health-probe-bind-address", "127.0.0.1:%d" % free_port()]
        root = self.run_dir / "root"
        root.mkdir(parents=True, exist_ok=True)
        binds = sorted({str(self.run_dir), str(binary.parent)})
        argv = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", NAMESPACE_SCRIPT,
                "gpufleet-operator-ns", str(root), str(self.build / "opt" / "gpu-operator"), self.namespace, *binds, "--", *controller]
        return argv, env

    def start_child(self, deployment, build):
        flatten_kubeconfig(self.kubeconfig, self.run_dir / "kubeconfig")
        self.build = build
        self.template = self.template_key(build, deployment)
        argv, env = self.command(deployment)
        log("starting the controller %s: %s" % ((build / "VERSION").read_text().strip(), " ".join(argv[argv.index("--", 8) + 1:])))
        # Same stdout/stderr as the supervisor (its log file).
        self.child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)  # pylint: disable=consider-using-with

    def stop_child(self, reason):
        if self.child is None:
            return
        if self.child.poll() is None:
            log("stopping the controller (pid %d): %s" % (self.child.pid, reason))
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(15)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait(5)
        self.child = None

    def step(self):
        deployment = self.deployment()
        if deployment is None or deployment.metadata.deletion_timestamp:
            self.failures = 0
            self.stop_child("Deployment %s/%s is gone" % (self.namespace, DEPLOYMENT))
            return
        build = self.build_for(deployment)
        if build is None:
            self.stop_child("no testbed build for the chart's appVersion")
            version = (deployment.spec.template.metadata.labels or {}).get("app.kubernetes.io/version")
            if version != self.missing:
                log("Deployment %s/%s comes from a chart with appVersion %r; the testbed builds %s: not starting a "
                    "controller" % (self.namespace, DEPLOYMENT, version, ", ".join(
                        "%s (appVersion %s)" % (r, v) for v, r in sorted(self.releases.items()))))
                self.missing = version
            return
        self.missing = None
        if self.template is not None and self.template != self.template_key(build, deployment):
            # A new pod template is a new pod: no back-off from the old one's exits.
            self.failures = 0
            self.next_start = 0.0
            self.template = None
            self.stop_child("the Deployment's pod template changed (%s)" % (build / "VERSION").read_text().strip())
        if self.child is not None and self.child.poll() is not None:
            self.failures += 1
            delay = min(30.0, 2.0 * 2 ** (self.failures - 1))
            log("controller exited (rc %s); restarting in %.0fs" % (self.child.returncode, delay))
            self.child = None
            self.next_start = time.monotonic() + delay
        if self.child is None and time.monotonic() >= self.next_start and self.crd_established():
            self.start_child(deployment, build)

    def run(self):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for release, build_dir in build_all().items():
            self.builds[app_version(build_dir)] = build_dir
            self.releases[app_version(build_dir)] = release
            log("controller %s, chart appVersion %s: %s" % (release, app_version(build_dir), build_dir))
        log("waiting for Deployment %s/%s" % (self.namespace, DEPLOYMENT))
        while not self.stopping:
            try:
                self.step()
            except Exception as err:  # pylint: disable=broad-except  # API hiccups must not end the supervisor
                log("watch failed: %s" % err)
            time.sleep(self.poll_seconds)
        self.stop_child("supervisor stopping")


class Controller:
    """The supervisor as a child process of the caller (pytest fixtures); output to ``log_file``."""

    def __init__(self, kubeconfig, run_dir, log_file, namespace="gpu-operator"):
        self.argv = [sys.executable, "-m", "tests.testbed.operator", "run", "--kubeconfig", str(kubeconfig),
                     "--run-dir", str(run_dir), "--namespace", namespace]
        self.log_file = Path(log_file)
        self.proc = None

    def start(self):
        build_all()
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log_fh:
            self.proc = subprocess.Popen(self.argv, stdout=log_fh, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                         stdin=subprocess.DEVNULL, cwd=str(REPO_ROOT))
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, lines=30):
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def default_run_dir(testbed_dir, name):
    """Inside the kwokctl cluster directory, so Cluster.down() finds the processes by their command line."""
    from tests.testbed.cluster import Cluster

    return Cluster(name, testbed_dir).cluster_dir / "gpu-operator"


def _parser():
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.operator")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "start"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--kubeconfig", required=True)
        cmd.add_argument("--run-dir", required=True, help="the controller's files (inside the cluster directory)")
        cmd.add_argument("--namespace", default="gpu-operator")
        if name == "start":
            cmd.add_argument("--pidfile", required=True)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--pidfile", required=True)
    for name in ("build", "chart"):
        sub.add_parser(name).add_argument("--release", choices=RELEASES, default=DEFAULT_RELEASE)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.command == "run":
        supervisor = Supervisor(args.kubeconfig, args.run_dir, args.namespace)

        def _stop(*_):
            supervisor.stopping = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        supervisor.run()
        return 0
    if args.command == "start":
        build_all()  # fail here, in the foreground, if a build fails
        argv = [sys.executable, "-m", "tests.testbed.operator", "run", "--kubeconfig", str(Path(args.kubeconfig).resolve()),
                "--run-dir", str(Path(args.run_dir).resolve()), "--namespace", args.namespace]
        return daemon.start("gpu-operator controller", argv, args.pidfile)
    if args.command == "stop":
        return daemon.stop("gpu-operator controller", args.pidfile, grace_seconds=25)
    if args.command == "status":
        return daemon.status("gpu-operator controller", args.pidfile)
    if args.command == "build":
        print(build(args.release))
        return 0
    print(chart_dir(args.release))
    return 0


if __name__ == "__main__":
    sys.exit(main())
