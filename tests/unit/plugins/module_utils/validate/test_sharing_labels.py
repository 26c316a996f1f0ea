"""Time-slicing/MPS labels in gpu_validate's check and the report: read as GFD writes them, malformed ones never raise.

GFD (NVIDIA/k8s-device-plugin v0.18.0 internal/lm/resource.go) writes gpu.replicas and gpu.sharing-strategy and
appends -SHARED to the product of a shared resource that keeps its name; the device plugin advertises count x
replicas, as <resource>.shared with renameByDefault. tests/integration/oracle/test_gfd_matrix.py checks the same
functions against NVIDIA's GFD binary on simulated hosts.
"""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report_build
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.cluster_facts import node_summary, sharing_problems
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from tests.support import kube

H100 = "NVIDIA-H100-80GB-HBM3"


H100_PAIR = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81559",
             "nvidia.com/mig.capable": "true"}


def node(labels, allocatable, name="n1"):
    return kube.node(name, labels=dict(H100_PAIR, **labels), allocatable=allocatable, conditions=kube.READY)


HARDWARE = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "mig_enabled": False, "mig_devices": []}] * 2}


@pytest.mark.parametrize("labels, allocatable", [
    ({"nvidia.com/gpu.product": H100 + "-SHARED", "nvidia.com/gpu.replicas": "4",
      "nvidia.com/gpu.sharing-strategy": "time-slicing"}, {"nvidia.com/gpu": "8"}),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "4",
      "nvidia.com/gpu.sharing-strategy": "time-slicing"}, {"nvidia.com/gpu.shared": "8", "nvidia.com/gpu": "0"}),
    ({"nvidia.com/gpu.product": H100 + "-SHARED", "nvidia.com/gpu.replicas": "2",
      "nvidia.com/gpu.sharing-strategy": "mps"}, {"nvidia.com/gpu": "4"}),
])
def test_shared_nodes_as_gfd_labels_them_are_healthy(labels, allocatable):
    result = validate_node(node(labels, allocatable), "none", HARDWARE)
    assert result["problems"] == []
    summary = result["summary"]
    assert summary["replicas"] == int(labels["nvidia.com/gpu.replicas"])
    assert summary["sharing_strategy"] == labels["nvidia.com/gpu.sharing-strategy"]
    assert summary["model"] == H100


@pytest.mark.parametrize("labels, allocatable, expected", [
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "none"},
     {"nvidia.com/gpu": "8"}, "gpu.replicas=4 but nvidia.com/gpu.sharing-strategy is 'none'"),
    ({"nvidia.com/gpu.product": H100 + "-SHARED", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"},
     {"nvidia.com/gpu": "2"}, "says shared but nvidia.com/gpu.replicas is '1'"),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
     {"nvidia.com/gpu": "2"}, "sharing-strategy=time-slicing but nvidia.com/gpu.replicas is '1'"),
    ({"nvidia.com/gpu.product": H100, "nvidia.com/gpu.replicas": "1"},
     {"nvidia.com/gpu.shared": "8"}, "allocatable nvidia.com/gpu.shared=8 is a shared resource"),
])
def test_inconsistent_sharing_labels_are_reported_in_validate_and_the_report(labels, allocatable, expected):
    problems = validate_node(node(labels, allocatable), "none", HARDWARE)["problems"]
    assert any(expected in p for p in problems), problems
    report = report_build.build_report([node(labels, allocatable)], [])
    assert any(expected in f["message"] and f["kind"] == "drift" for f in report["findings"]), report["findings"]


@pytest.mark.parametrize("labels", [
    {"nvidia.com/gpu.replicas": "x", "nvidia.com/gpu.sharing-strategy": "", "nvidia.com/gpu.product": "-SHARED"},
    {"nvidia.com/gpu.replicas": "-3", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me-SHARED",
     "nvidia.com/mig.strategy": "single"},
    {"nvidia.com/gpu.replicas": "", "nvidia.com/gpu.product": "SHARED-MIG-", "nvidia.com/mig-1g.10gb.replicas": "two"},
    {"nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.product": ""},
])
def test_malformed_sharing_labels_never_raise(labels):
    bad = node(labels, {"nvidia.com/gpu.shared": "lots", "nvidia.com/mig-1g.10gb.shared": "3"})
    summary = node_summary(bad)
    assert summary["replicas"] >= 1
    assert isinstance(sharing_problems(summary), list)
    for strategy in ("none", "single", "mixed"):
        assert isinstance(validate_node(bad, strategy, HARDWARE)["problems"], list)
    report = report_build.build_report([bad], [])
    assert report["nodes"][0]["replicas"] >= 1


@pytest.mark.parametrize("strategy", ["none", "single"])
def test_mps_labels_on_mig_enabled_gpus_are_a_problem(strategy):
    """GFD fails under MPS once a GPU is in MIG mode, so the MPS labels left on the node are stale."""
    mig = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "mig_enabled": True, "mig_devices": ["1g.10gb"] * 7}] * 2}
    labels = {"nvidia.com/gpu.product": H100 + "-SHARED", "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.sharing-strategy": "mps"}
    if strategy == "single":
        labels["nvidia.com/mig.strategy"] = "single"
    problems = validate_node(node(labels, {"nvidia.com/gpu": "4"}), strategy, mig)["problems"]
    assert any("MPS sharing is not supported on MIG-enabled GPUs" in p and "2 GPU(s)" in p for p in problems), problems
    healthy = validate_node(node(labels, {"nvidia.com/gpu": "4"}), "none", HARDWARE)["problems"]
    assert not any("MPS" in p for p in healthy)
