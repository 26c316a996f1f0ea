"""Node checks: labels, allocatable and hardware agree (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from tests.support.kube import gpu_node as node


MIXED_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2",
                "nvidia.com/gpu.memory": "81559", "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-3g.40gb.count": "1"}
MIXED_ALLOC = {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1"}
HARDWARE = {"gpus": [
    {"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "mig": {"current": True},
     "instances": [{"profile": "1g.10gb", "compute_instances": [{"slices": 1}]}, {"profile": "1g.10gb"},
                   {"profile": "3g.40gb", "compute_instances": [{"slices": 3}]},
                   {"profile": "3g.40gb", "compute_instances": []}]},
    {"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "mig": {"current": False}, "instances": []},
]}


def test_healthy_mixed_node_passes_and_lists_smoke_resources():
    result = validate_node(node("a", MIXED_LABELS, MIXED_ALLOC), "mixed", HARDWARE, {"device-plugin": "ready"})
    assert result["problems"] == []
    assert result["smoke_resources"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]


def test_resources_left_at_zero_are_not_problems():
    alloc = dict(MIXED_ALLOC, **{"nvidia.com/mig-7g.80gb": "0"})
    assert validate_node(node("a", MIXED_LABELS, alloc), "mixed", HARDWARE)["problems"] == []
    alloc["nvidia.com/mig-7g.80gb"] = "1"
    assert validate_node(node("a", MIXED_LABELS, alloc), "mixed")["problems"] == [
        "allocatable nvidia.com/mig-7g.80gb=1 has no nvidia.com/mig-7g.80gb.count label"]


def test_device_plugin_advertising_nothing_is_caught():
    zero = dict((k, "0") for k in MIXED_ALLOC)
    result = validate_node(node("a", MIXED_LABELS, zero), "mixed", HARDWARE, {"device-plugin": "ready"})
    assert "device plugin advertises 0 GPU resources (allocatable has no nvidia.com/gpu or nvidia.com/mig-*)" in result["problems"]
    assert "label nvidia.com/mig-1g.10gb.count=2 but allocatable nvidia.com/mig-1g.10gb=0" in result["problems"]


def test_labels_that_disagree_with_hardware_are_caught():
    labels = dict(MIXED_LABELS, **{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig-3g.40gb.count": "2"})
    alloc = dict(MIXED_ALLOC, **{"nvidia.com/mig-3g.40gb": "2"})
    result = validate_node(node("a", labels, alloc), "mixed", HARDWARE, {"mig-manager": "no nvidia-mig-manager pod on the node"})
    assert "operand mig-manager: no nvidia-mig-manager pod on the node" in result["problems"]
    assert "label nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB but the hardware is NVIDIA H100 80GB HBM3" in result["problems"]
    assert "label nvidia.com/mig-3g.40gb.count=2 but the hardware has 1 3g.40gb MIG devices" in result["problems"]


def test_single_strategy_invalid_layout():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID", "nvidia.com/gpu.count": "0",
              "nvidia.com/mig.strategy": "single"}
    result = validate_node(node("a", labels, {"nvidia.com/gpu": "0"}), "single", HARDWARE)
    assert any("MIG-INVALID" in p for p in result["problems"])
    assert any("cannot be advertised under the single strategy" in p for p in result["problems"])
