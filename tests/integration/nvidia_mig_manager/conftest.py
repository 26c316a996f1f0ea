"""A cluster of its own where NVIDIA's MIG Manager and device plugin run for every simulated GPU node.

The model x config matrix switches the ClusterPolicy's `mig.strategy`, a cluster singleton the session cluster's
other tests rely on, and puts 27 nodes under one rollout; so these tests install NVIDIA's v26.7.0 chart (and CRDs) on a
dedicated testbed cluster, with NVIDIA's v26.7.0 controller, and the agents in MIG Manager mode "nvidia"
(tests/testbed/agents/nvidia_mig.py) and device-plugin mode "nvidia" (tests/testbed/agents/nvidia_plugin.py), as on
the session cluster: the MIG change, the resources the node advertises and its GFD labels are all NVIDIA's programs'
answers. nvidia-mig-manager v0.15.0 needs v26.7.0's RBAC (it lists pods at the cluster scope, which v25.3.4's
ClusterRole for mig-manager does not grant)."""

import os

import pytest

from tests.integration.reconfigure.conftest import node_view
from tests.integration.reconfigure.test_rollout import gpu_allocatable
from tests.testbed.agents.pytest_agents import GPU_CLUSTER_VALUES, GpuAgents, nvml_lib_dir
from tests.testbed.cluster import Cluster, TestbedError
from tests.testbed.pytest_cluster import Testbed, unique_name

RELEASE = "v26.7.0"
MIG_STRATEGY = "nvidia.com/mig.strategy"


@pytest.fixture(scope="package")
def nvidia_cluster(tmp_path_factory):
    """GpuAgents (NVIDIA's MIG Manager and device plugin) on a cluster of its own with NVIDIA's v26.7.0 chart and
    controller."""
    workdir = tmp_path_factory.mktemp("nvidia-mig")
    cluster = Cluster(name="nvmig-%d" % os.getpid(), directory=workdir / "cluster")
    try:
        cluster.up()
    except TestbedError as exc:
        pytest.fail("testbed cluster for NVIDIA's MIG Manager did not start: %s" % exc, pytrace=False)
    bed = Testbed(cluster.kubeconfig, cluster.bin_dir, workdir, cluster=cluster)
    agents = GpuAgents(bed, workdir / "hosts", mig_manager="nvidia", device_plugin="nvidia")
    try:
        agents.start()
        agents.install_chart(GPU_CLUSTER_VALUES, release=RELEASE)
        yield agents
    finally:
        agents.stop()
        cluster.down()


@pytest.fixture
def add_nvidia_node(nvidia_cluster, request):
    """Factory for uniquely named simulated GPU nodes on nvidia_cluster, removed after the test."""
    created = []

    def make(hint, model, count, **kwargs):
        name = unique_name(hint or request.node.name[:30])
        created.append(name)
        return nvidia_cluster.add_gpu_node(name, model, count, **kwargs)

    yield make
    for name in created:
        nvidia_cluster.remove_gpu_node(name)


def host_environment(agents, names):
    """host_vars giving each node's host the simulated NVML of that node, for the role's gpu_info reads."""
    return {name: {"mig_reconfigure_host_environment": {
        "LD_LIBRARY_PATH": str(nvml_lib_dir()), "GPUFLEET_SIM_NVML_STATE": str(agents.state_path(name))}}
        for name in names}


def set_strategy(agents, names, strategy, allocatable, timeout=180):
    """Patch the ClusterPolicy's mig.strategy, then wait until NVIDIA's programs on every node of ``names`` follow:
    GFD's nvidia.com/mig.strategy label, a device-plugin pod started with MIG_STRATEGY=``strategy`` (NVIDIA's
    controller rolls the DaemonSet; the plugin takes the strategy from its pod's env) and the node's allocatable
    equal to ``allocatable[name]`` (GPU resources only)."""
    agents.patch_policy({"mig": {"strategy": strategy}})
    core = agents.testbed.core

    def plugin_follows(name):
        pods = core.list_namespaced_pod(agents.namespace, label_selector="app=nvidia-device-plugin-daemonset",
                                        field_selector="spec.nodeName=%s" % name).items
        live = [p for p in pods if not p.metadata.deletion_timestamp and p.status.phase == "Running"]
        return len(live) == 1 and any(e.name == "MIG_STRATEGY" and e.value == strategy
                                      for c in live[0].spec.containers for e in c.env or [])

    def followed():
        return all(agents.labels(name).get(MIG_STRATEGY) == strategy and plugin_follows(name)
                   and gpu_allocatable(node_view(agents.testbed, name)) == allocatable[name] for name in names)
    agents.testbed.wait_for(followed, timeout, "NVIDIA's GFD and device plugin on %d nodes to follow mig.strategy=%s" % (
        len(names), strategy), interval=1)
