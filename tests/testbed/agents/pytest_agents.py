"""Fixtures for the simulated GPU Operator node agents (see docs/DEVELOPING.md).

``gpu_agents`` (session): the agents process and NVIDIA's real GPU Operator controller
(tests/testbed/operator.py; it waits for the chart's operator Deployment) running against the
``testbed`` cluster, without the chart (for tests that install it themselves, e.g. through the
gpu_operator role).
``gpu_cluster`` (session): ``gpu_agents`` plus NVIDIA's chart (tests/testbed/operator.py DEFAULT_RELEASE, v26.7.0)
installed with helm as release ``gpu-operator`` in namespace ``gpu-operator`` (values: GPU_CLUSTER_VALUES).
``add_gpu_node`` (function): factory ``add_gpu_node(hint, model, count, labels=None, faults=None,
sim_faults=None, mig_enabled=False, mig_manager=None, **create_node_kwargs)`` -> node name; uniquely named simulated
GPU nodes, deleted after the test.

MIG Manager is NVIDIA's nvidia-mig-manager (tests/testbed/agents/nvidia_mig.py) unless asked otherwise:
``mig_manager="sim"`` on a node (annotation gpusim.gpufleet.io/mig-manager) or on GpuAgents (or GPUFLEET_MIG_MANAGER=sim
for the session's agents) runs the simulator (tests/testbed/agents/migmanager.py) for it: the benchmarks, the
simulator's own protocol tests (tests/integration/agents) and the upgrade tests' v25.3.4 start use it. The device
plugin is NVIDIA's nvidia-device-plugin with a kubelet endpoint per node (tests/testbed/agents/nvidia_plugin.py) unless
asked otherwise: ``device_plugin="sim"`` on a node (annotation gpusim.gpufleet.io/device-plugin) or on GpuAgents
(GPUFLEET_DEVICE_PLUGIN=sim) keeps the agents' own allocatable (the benchmarks').
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.testbed import operator as real_operator
from tests.testbed import oracle
from tests.testbed.agents.agent import FAULT_ANNOTATION, FAULTS, STATE_ANNOTATION
from tests.testbed.agents.migmanager import HOST_DRIVER_ANNOTATION
from tests.testbed.agents.nvidia_mig import MODE_ANNOTATION as MIG_MANAGER_ANNOTATION
from tests.testbed.agents.nvidia_plugin import MODE_ANNOTATION as DEVICE_PLUGIN_ANNOTATION
from tests.testbed.agents.pod_processes import MODES
from tests.testbed.gpusim import hoststate

REPO_ROOT = Path(__file__).resolve().parents[3]
GPUSIM_BUILD = REPO_ROOT / "tests" / "testbed" / "gpusim" / "build.sh"
NAMESPACE = "gpu-operator"
RELEASE = "gpu-operator"
# NVIDIA's controller's leader-election Lease (cmd/gpu-operator/main.go LeaderElectionID).
CONTROLLER_LEASE = "53822513.nvidia.com"
# migManager.config.name "" as the gpu_operator role renders it (MIG Manager then generates its config).
GPU_CLUSTER_VALUES = {"mig": {"strategy": "mixed"}, "driver": {"enabled": False}, "toolkit": {"enabled": False},
                      "migManager": {"config": {"name": "", "default": "all-disabled"}}}
# Short simulated durations so protocol tests stay quick; real ones are minutes.
TEST_TIMING = ["--reboot-seconds", "2", "--slow-seconds", "4", "--pod-wait-seconds", "20", "--rescan-seconds", "1",
               "--host-clients-seconds", "3"]


def nvml_lib_dir():
    """Directory of the simulated libnvidia-ml.so.1 (built and cached by gpusim/build.sh)."""
    if os.environ.get("GPUFLEET_SIM_NVML_LIB_DIR"):
        return Path(os.environ["GPUFLEET_SIM_NVML_LIB_DIR"])
    proc = subprocess.run([str(GPUSIM_BUILD)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("gpusim build failed:\n%s%s" % (proc.stdout, proc.stderr))
    return Path(proc.stdout.strip().splitlines()[-1])


def check_mode(what, mode):
    if mode not in MODES:
        raise ValueError("%s must be one of %s, not %r" % (what, ", ".join(MODES), mode))
    return mode


class GpuAgents:
    """The running agents process and helpers to make and inspect simulated GPU nodes."""

    __test__ = False

    def __init__(self, testbed, hosts_dir, namespace=NAMESPACE, mig_manager=None, device_plugin=None):
        self.mig_manager = check_mode("mig_manager", mig_manager or os.environ.get("GPUFLEET_MIG_MANAGER") or "nvidia")
        self.device_plugin = check_mode("device_plugin",
                                        device_plugin or os.environ.get("GPUFLEET_DEVICE_PLUGIN") or "nvidia")
        self.testbed = testbed
        self.hosts_dir = Path(hosts_dir)
        self.namespace = namespace
        self.proc = None
        self.log_file = self.hosts_dir / "agents.log"
        self.controller = None

    # -- process ---------------------------------------------------------------------------
    def start(self, extra_args=()):
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        self.start_controller()
        argv = [sys.executable, "-m", "tests.testbed.agents", "run", "--kubeconfig", self.testbed.kubeconfig,
                "--hosts-dir", str(self.hosts_dir), "--namespace", self.namespace,
                "--nvml-lib-dir", str(nvml_lib_dir()), "--gfd-binary", oracle.binary("gpu-feature-discovery"),
                "--mig-manager", self.mig_manager, "--device-plugin", self.device_plugin, *TEST_TIMING, *extra_args]
        log = open(self.log_file, "ab")  # pylint: disable=consider-using-with  # the child writes it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT))
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError("agents process exited (rc %s):\n%s" % (self.proc.returncode, self.log_tail()))

    def start_controller(self):
        """NVIDIA's controller, in the cluster directory when the testbed is ours (so Cluster.down stops it)."""
        cluster = getattr(self.testbed, "cluster", None)
        run_dir = cluster.cluster_dir / "gpu-operator" if cluster is not None else self.hosts_dir / "gpu-operator"
        self.controller = real_operator.Controller(self.testbed.kubeconfig, run_dir, self.hosts_dir / "gpu-operator.log",
                                                   self.namespace).start()

    def wait_controller_leading(self, timeout=150):
        """Until NVIDIA's controller holds its leader Lease and renews it. An API server outage longer than the
        controller's renew deadline (controller-runtime's 10 s) makes it exit; the supervisor starts it again after
        its back-off and the new process waits for the old Lease to expire (15 s) before it labels any new node."""
        from kubernetes import client

        api = client.CoordinationV1Api(self.testbed.api_client())

        def leading():
            spec = api.read_namespaced_lease(CONTROLLER_LEASE, self.namespace).spec
            renewed = spec.renew_time or spec.acquire_time
            if not spec.holder_identity or renewed is None:
                return None
            age = (datetime.datetime.now(datetime.timezone.utc) - renewed).total_seconds()
            return spec.holder_identity if age < (spec.lease_duration_seconds or 15) else None

        try:
            return self.testbed.wait_for(leading, timeout, "NVIDIA's controller to lead (Lease %s/%s renewed)"
                                         % (self.namespace, CONTROLLER_LEASE))
        except AssertionError as err:
            tail = self.controller.log_tail() if self.controller is not None else ""
            raise AssertionError("%s\ncontroller log:\n%s" % (err, tail)) from None

    def stop(self):
        if self.controller is not None:
            self.controller.stop()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log_file.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    # -- nodes -----------------------------------------------------------------------------
    def state_path(self, node):
        return self.hosts_dir / ("%s.state" % node)

    def add_gpu_node(self, name, model, count, labels=None, faults=None, sim_faults=None, mig_enabled=False,
                     mig_manager=None, device_plugin=None, host_driver=False, **node_kwargs):
        """Create the simulated host state and the kwok Node `name`; returns the name.

        faults: agent faults (FAULTS) set as node annotation; sim_faults: simulated-NVML faults
        (hoststate.FAULTS, e.g. reset_unsupported) written into the host state; node_kwargs go to
        testbed.create_node (capacity, allocatable, taints); mig_manager, device_plugin: "nvidia" or "sim" for this
        node only; host_driver: the driver is installed on the host (annotation HOST_DRIVER_ANNOTATION), which NVIDIA's
        MIG Manager reads when its pod starts (WITH_SHUTDOWN_HOST_GPU_CLIENTS).
        """
        unknown = set(faults or ()) - set(FAULTS)
        if unknown:
            raise ValueError("unknown agent fault(s) %s; known: %s" % (sorted(unknown), ", ".join(FAULTS)))
        state = self.state_path(name)
        hoststate.create_host(state, model, count, faults=sim_faults, mig_enabled=mig_enabled)
        annotations = {STATE_ANNOTATION: str(state)}
        if faults:
            annotations[FAULT_ANNOTATION] = ",".join(faults)
        if host_driver:
            annotations[HOST_DRIVER_ANNOTATION] = "true"
        if mig_manager is not None:
            annotations[MIG_MANAGER_ANNOTATION] = check_mode("mig_manager", mig_manager)
        if device_plugin is not None:
            annotations[DEVICE_PLUGIN_ANNOTATION] = check_mode("device_plugin", device_plugin)
        labels = dict(real_operator.NFD_GPU_NODE_LABELS, **(labels or {}))
        self.testbed.create_node(name, labels=labels, annotations=annotations, **node_kwargs)
        return name

    def remove_gpu_node(self, name):
        self.testbed.delete_node(name)
        for suffix in (".state", ".state.lock", ".mig-manager.log", ".mig-manager.log.cri", ".device-plugin.log"):
            (self.hosts_dir / (name + suffix)).unlink(missing_ok=True)

    def set_faults(self, name, faults):
        value = ",".join(faults) if faults else None
        self.testbed.core.patch_node(name, {"metadata": {"annotations": {FAULT_ANNOTATION: value}}})

    def labels(self, name):
        return dict(self.testbed.core.read_node(name).metadata.labels or {})

    def allocatable(self, name):
        return dict(self.testbed.core.read_node(name).status.allocatable or {})

    def capacity(self, name):
        return dict(self.testbed.core.read_node(name).status.capacity or {})

    def label(self, name, key, value):
        self.testbed.core.patch_node(name, {"metadata": {"labels": {key: value}}})

    def mig_manager_log(self, name):
        path = self.hosts_dir / ("%s.mig-manager.log" % name)
        return path.read_text() if path.exists() else ""

    def host_systemd_log(self, name):
        """What NVIDIA's MIG Manager asked of the node's host systemd (tests/testbed/fakehost/systemd_dbus.py): a
        line per unit job, such as `StopUnit kubelet.service: inactive`."""
        path = self.hosts_dir / ("%s.nvidia-mig-manager" % name) / "systemd.log"
        return path.read_text() if path.exists() else ""

    def device_plugin_log(self, name):
        """NVIDIA's nvidia-device-plugin's output for the node (device-plugin mode "nvidia"), every run of it."""
        path = self.hosts_dir / ("%s.nvidia-device-plugin" % name) / "device-plugin.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_labels(self, name, expected, timeout=60):
        """Wait until every key of `expected` has that value (None: absent); returns the labels."""
        def check():
            labels = self.labels(name)
            return labels if all(labels.get(k) == v for k, v in expected.items()) else None
        try:
            return self.testbed.wait_for(check, timeout, "labels %s on node %s" % (expected, name))
        except AssertionError as err:
            raise AssertionError("%s\nlabels now: %s\nmig-manager log:\n%s\nagents log:\n%s" % (
                err, json.dumps(self.labels(name), indent=1, sort_keys=True), self.mig_manager_log(name),
                self.log_tail(20))) from None

    def wait_state(self, name, state, timeout=60):
        return self.wait_labels(name, {"nvidia.com/mig.config.state": state}, timeout)

    def operand_pods(self, name):
        """Sorted `app` labels of the operand (DaemonSet) pods on node `name`."""
        pods = self.testbed.core.list_namespaced_pod(self.namespace, field_selector="spec.nodeName=%s" % name).items
        return sorted(p.metadata.labels.get("app", "") for p in pods if not p.metadata.deletion_timestamp
                      and any(o.kind == "DaemonSet" for o in p.metadata.owner_references or []))

    # -- ClusterPolicy ---------------------------------------------------------------------
    def policy(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.testbed.api_client()).get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy")

    def patch_policy(self, spec):
        from kubernetes import client

        return client.CustomObjectsApi(self.testbed.api_client()).patch_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": spec})

    # -- chart -----------------------------------------------------------------------------
    def install_chart(self, values=None, timeout=180, release=None):
        """helm upgrade --install of NVIDIA's chart (no --wait: the operator Deployment needs a node).

        release: which testbed build's chart (tests/testbed/operator.py RELEASES; default DEFAULT_RELEASE).
        Values: TESTBED_CHART_VALUES (nfd off), then ``values``.
        """
        args = ["upgrade", "--install", RELEASE, str(real_operator.chart_dir(release)), "--namespace", self.namespace,
                "--create-namespace", "--timeout", "%ds" % timeout, "--values", "-"]
        merged = json.loads(json.dumps(real_operator.TESTBED_CHART_VALUES))
        merged.update(values or {})
        self.testbed.helm(*args, input=json.dumps(merged), timeout=timeout + 30)
        self.testbed.wait_for(self.policy, 30, "ClusterPolicy cluster-policy")


@pytest.fixture(scope="session")
def gpu_agents(testbed, tmp_path_factory):
    """The agents process for this session (chart not installed); stopped at the end."""
    agents = GpuAgents(testbed, tmp_path_factory.mktemp("gpu-hosts"))
    agents.start()
    try:
        yield agents
    finally:
        agents.stop()


@pytest.fixture(scope="session")
def gpu_cluster(gpu_agents):
    """gpu_agents plus NVIDIA's gpu-operator chart (GPU_CLUSTER_VALUES: mixed strategy)."""
    gpu_agents.install_chart(GPU_CLUSTER_VALUES)
    return gpu_agents


@pytest.fixture
def add_gpu_node(gpu_agents, request):
    """Factory for uniquely named simulated GPU nodes (name hint -> node name), removed after the test."""
    from tests.testbed.pytest_cluster import unique_name

    created = []

    def make(hint, model, count, labels=None, faults=None, sim_faults=None, mig_enabled=False, mig_manager=None,
             **node_kwargs):
        name = unique_name(hint or request.node.name[:30])
        created.append(name)
        return gpu_agents.add_gpu_node(name, model, count, labels=labels, faults=faults, sim_faults=sim_faults,
                                       mig_enabled=mig_enabled, mig_manager=mig_manager, **node_kwargs)

    yield make
    for name in created:
        gpu_agents.remove_gpu_node(name)
