"""A cluster of its own where NVIDIA's MIG Manager and device plugin run for every simulated GPU node.

nvidia-mig-manager v0.15.0 is what GPU Operator v26.7.0 (the production pin) ships, and it needs that release's RBAC:
it lists pods at the cluster scope (third-party GPU client DaemonSets), which v25.3.4's ClusterRole for mig-manager
does not grant (on the session cluster, whose chart is v25.3.4, the run stops in `pending`: "pods is forbidden ...
cannot list resource "pods" ... at the cluster scope"). So these tests install NVIDIA's v26.7.0 chart (and CRDs) on a
dedicated testbed cluster, with NVIDIA's v26.7.0 controller, and the agents in MIG Manager mode "nvidia"
(tests/testbed/agents/nvidia_mig.py) and device-plugin mode "nvidia" (tests/testbed/agents/nvidia_plugin.py): the
MIG change, the resources the node advertises and its GFD labels are all NVIDIA's programs' answers. Everything
else is the session's machinery: the same Cluster class, GpuAgents and simulated NVML.
"""

import os

import pytest

from tests.testbed.agents.pytest_agents import GPU_CLUSTER_VALUES, GpuAgents
from tests.testbed.cluster import Cluster, TestbedError
from tests.testbed.pytest_cluster import Testbed, unique_name

RELEASE = "v26.7.0"


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
