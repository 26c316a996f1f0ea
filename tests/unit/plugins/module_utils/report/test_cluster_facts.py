"""Node summaries read from GFD, operator and mig-manager labels (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import is_gpu_node
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts

from .test_build import h100, node


def test_node_summary_reads_gfd_operator_and_mig_manager_labels():
    summary = cluster_facts.node_summary(h100("n", state="pending", **{
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change", "nvidia.com/gpu.deploy.driver": "true"}))
    assert summary["model"] == "NVIDIA-H100-80GB-HBM3" and summary["mig_strategy"] == "mixed"
    assert summary["mig_devices"] == {"1g.10gb": 7} and summary["allocatable"] == {"nvidia.com/mig-1g.10gb": 7}
    assert summary["deploy_paused"] == ["device-plugin"] and summary["ready"] is True
    single = cluster_facts.node_summary(node("s", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                                                   "nvidia.com/gpu.count": "14", "nvidia.com/mig.strategy": "single"}))
    assert single["model"] == "NVIDIA-A100-SXM4-40GB" and single["mig_devices"] == {"1g.5gb": 14}
    assert cluster_facts.group_safe("NVIDIA-H100-80GB-HBM3") == "nvidia_h100_80gb_hbm3"
    assert not is_gpu_node({"metadata": {"name": "cpu", "labels": {}}, "status": {}})
