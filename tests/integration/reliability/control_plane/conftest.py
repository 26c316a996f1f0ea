"""Fixtures for the control-plane reliability tests: their own testbed cluster, because these tests stop and start
its kube-apiserver and etcd, which must not disturb the tests of the shared session cluster.

``testbed``, ``gpu_agents``, ``gpu_cluster`` and ``add_gpu_node`` are overridden for this directory with the
same behaviour as tests/testbed/pytest_cluster.py and tests/testbed/agents/pytest_agents.py (package scope, on
the directory's own cluster); ``testbed_namespace`` and ``testbed_node`` then use it too. ``fault_proxy``
is tests.testbed.faultproxy in front of that cluster's API server. The Runner and workload helpers are
tests/integration/reconfigure/conftest.py's."""

import os

import pytest

from tests.integration.reconfigure.conftest import Runner, apply_automation_rbac
from tests.testbed.agents.pytest_agents import GPU_CLUSTER_VALUES, GpuAgents
from tests.testbed.cluster import Cluster, TestbedError
from tests.testbed.faultproxy import FaultProxy
from tests.testbed.pytest_cluster import Testbed, unique_name


@pytest.fixture(scope="package")
def testbed(tmp_path_factory):
    """A cluster for this directory only (its components are stopped and started by the tests)."""
    workdir = tmp_path_factory.mktemp("reliability-testbed")
    cluster = Cluster(name="reliability-%d" % os.getpid(), directory=workdir / "cluster")
    try:
        seconds = cluster.up()
    except TestbedError as exc:
        pytest.fail("reliability testbed cluster did not start: %s" % exc, pytrace=False)
    cluster.start_reaper(os.getpid())
    bed = Testbed(cluster.kubeconfig, cluster.bin_dir, workdir, cluster=cluster)
    bed.start_seconds = seconds
    try:
        yield bed
    finally:
        cluster.down()


@pytest.fixture(scope="package")
def gpu_agents(testbed, tmp_path_factory):
    agents = GpuAgents(testbed, tmp_path_factory.mktemp("reliability-gpu-hosts"))
    # The "slow" fault holds a node's MIG Manager 30 s in its hardware step, the driver's first MIG change (the
    # outages of these tests fit inside it: MIG Manager gives up a reconfiguration whose own API call fails); its
    # wait for operand pods is longer than the default test timing, as after an API server restart
    # kube-controller-manager is started again and takes a while to delete the paused DaemonSets' pods.
    agents.start(extra_args=("--pod-wait-seconds", "240", "--slow-seconds", "30"))
    try:
        yield agents
    finally:
        agents.stop()


@pytest.fixture(scope="package")
def gpu_cluster(gpu_agents):
    gpu_agents.install_chart(GPU_CLUSTER_VALUES)
    return gpu_agents


@pytest.fixture
def add_gpu_node(gpu_agents, request):
    """As tests/testbed/agents/pytest_agents.py's, after NVIDIA's controller leads again: the tests of this directory
    stop the API server, which makes the controller exit; a node added before it is back gets no operands."""
    created = []

    def make(hint, model, count, labels=None, faults=None, sim_faults=None, mig_enabled=False, **node_kwargs):
        if not created:
            gpu_agents.wait_controller_leading()
        name = unique_name(hint or request.node.name[:30])
        created.append(name)
        return gpu_agents.add_gpu_node(name, model, count, labels=labels, faults=faults, sim_faults=sim_faults,
                                       mig_enabled=mig_enabled, **node_kwargs)

    yield make
    for name in created:
        gpu_agents.remove_gpu_node(name)


@pytest.fixture(scope="package")
def automation_kubeconfig(testbed):
    return apply_automation_rbac(testbed)


@pytest.fixture
def runner(automation_kubeconfig, tmp_path):
    return Runner(automation_kubeconfig, tmp_path / "ansible")


@pytest.fixture
def fault_proxy(testbed):
    proxy = FaultProxy.for_kubeconfig(testbed.kubeconfig, testbed.cluster.cluster_dir).start()
    yield proxy
    proxy.stop()
