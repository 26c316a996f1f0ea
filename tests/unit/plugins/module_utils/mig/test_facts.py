"""Hardware facts from GFD labels."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import UnknownModelError


def test_none_strategy_counts_gpus():
    hw = facts.hardware_from_gfd_labels({"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "8"})
    assert len(hw["gpus"]) == 8 and hw["gpus"][0]["pci_device_id"] == "0x233510DE"
    assert not hw["gpus"][0]["mig"]["current"]
    assert plan.plan_node(hw, config_name="all-balanced")["feasible"]


def test_mixed_strategy_reads_profile_counts():
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2",
              "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.5gb.count": "4",
              "nvidia.com/mig-1g.5gb.me.count": "0", "nvidia.com/mig-3g.20gb.count": "2",
              "nvidia.com/mig-2g.10gb.count": "2", "nvidia.com/mig-1g.5gb.memory": "4864"}
    hw = facts.hardware_from_gfd_labels(labels, node_name="gpu-1")
    assert hw["node_current"] == {"1g.5gb": 4, "3g.20gb": 2, "2g.10gb": 2}
    assert hw["gpus"][0]["mig"]["current"] and len(hw["gpus"]) == 2
    assert not plan.plan_node(hw, config_name="all-balanced")["changed"]
    assert plan.plan_node(hw, config_name="all-1g.5gb")["changed"]


def test_single_strategy_estimates_gpu_count():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb", "nvidia.com/gpu.count": "28",
              "nvidia.com/mig.strategy": "single"}
    hw = facts.hardware_from_gfd_labels(labels)
    assert len(hw["gpus"]) == 4 and hw["gpu_count_estimated"]
    assert hw["node_current"] == {"1g.18gb": 28}


def test_unknown_product_names_node():
    with pytest.raises(UnknownModelError, match="NVIDIA-Tesla-T4.*node gpu-9"):
        facts.hardware_from_gfd_labels({"nvidia.com/gpu.product": "NVIDIA-Tesla-T4", "nvidia.com/gpu.count": "1"},
                                       node_name="gpu-9")
    with pytest.raises(UnknownModelError, match="how many GPUs"):
        facts.hardware_from_gfd_labels({"nvidia.com/gpu.product": "NVIDIA-H200"})
