"""plan_node and the Kubernetes-side expectations derived from a plan."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import (
    PlanningError,
    UnknownModelError,
    UnknownProfileError,
)


def _hw(name, pci, count=1, current=False, pending=None, instances=None):
    return {"gpus": [{"index": i, "name": name, "pci_device_id": pci,
                      "mig": {"current": current, "pending": current if pending is None else pending},
                      "instances": list(instances or [])} for i in range(count)]}


A100 = ("NVIDIA A100-SXM4-40GB", "0x20B010DE")
H200 = ("NVIDIA H200", "0x233510DE")


def test_issue_example_a100_is_feasible():
    result = plan.plan_node(_hw(*A100), mig_devices={"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})
    assert result["feasible"] and result["changed"] and result["mode_change_required"]
    gpu = result["gpus"][0]
    assert gpu["creation_order"][0] == "3g.20gb"
    assert [c["profile"] for c in gpu["create"]] == gpu["creation_order"]
    assert sorted((p["profile"], p["start"]) for p in gpu["placements"]) == [
        ("1g.5gb", 0), ("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)]


def test_infeasible_layout_reports_reason_and_alternatives():
    result = plan.plan_node(_hw(*A100, count=2), mig_devices={"3g.20gb": 2, "2g.10gb": 1})
    assert not result["feasible"]
    assert "GPU 0 (NVIDIA A100-SXM4-40GB)" in result["reason"] and "GPU 1" in result["reason"]
    assert result["gpus"][0]["alternatives"][0] == {"3g.20gb": 2}


def test_already_applied_is_unchanged():
    instances = [{"profile": "1g.18gb", "start": s, "size": 1} for s in range(7)]
    result = plan.plan_node(_hw(*H200, current=True, instances=instances), config_name="all-1g.18gb")
    assert result["feasible"] and not result["changed"] and not result["mode_change_required"]
    assert len(result["gpus"][0]["keep"]) == 7 and not result["gpus"][0]["create"]


def test_incremental_change_keeps_wanted_instances():
    instances = [{"profile": "3g.71gb", "start": 4, "size": 4}, {"profile": "4g.71gb", "start": 0, "size": 4}]
    result = plan.plan_node(_hw(*H200, current=True, instances=instances), config_name="all-balanced")
    gpu = result["gpus"][0]
    assert gpu["changed"] and gpu["current"] == {"3g.71gb": 1, "4g.71gb": 1}
    assert gpu["keep"] == [{"profile": "3g.71gb", "start": 4, "size": 4}]
    assert gpu["destroy"] == [{"profile": "4g.71gb", "start": 0, "size": 4}]
    assert sorted(c["profile"] for c in gpu["create"]) == ["1g.18gb", "1g.18gb", "2g.35gb"]


def test_disable_and_pending_mode():
    result = plan.plan_node(_hw(*H200, current=True, pending=True), config_name="all-disabled")
    assert result["changed"] and result["mode_change_required"]
    # mode already pending the wanted value: a reset remains required, no new write
    result = plan.plan_node(_hw(*H200, current=False, pending=True), config_name="all-enabled")
    assert result["mode_change_required"] and result["changed"]
    result = plan.plan_node(_hw(*H200, current=False, pending=True), config_name="all-disabled")
    assert not result["mode_change_required"] and result["changed"]  # pending must be cleared


def test_unknown_profile_raises_before_planning():
    with pytest.raises(UnknownProfileError, match="1g.10gb is not a profile of NVIDIA H200"):
        plan.plan_node(_hw(*H200), config_name="all-1g.10gb")
    with pytest.raises(UnknownProfileError):
        plan.plan_node(_hw(*H200), mig_devices={"1g.10gb": 1})


def test_bad_arguments_and_unknown_models():
    with pytest.raises(PlanningError, match="exactly one"):
        plan.plan_node(_hw(*H200), config_name="all-balanced", mig_devices={})
    with pytest.raises(UnknownModelError, match="Tesla T4"):
        plan.plan_node(_hw("NVIDIA Tesla T4", "0x1EB810DE"), config_name="all-disabled")


def test_live_table_wins_over_catalog():
    hw = _hw("NVIDIA Future GPU", "0xFFFF10DE")
    hw["gpus"][0]["profiles"] = [
        {"name": "1g.50gb", "id": 19, "slices": 1, "instance_count": 2, "memory_slices": 1,
         "placements": [{"start": 0, "size": 1}, {"start": 1, "size": 1}]},
        {"name": "2g.100gb", "id": 14, "slices": 2, "instance_count": 1, "memory_slices": 2,
         "placements": [{"start": 0, "size": 2}]},
    ]
    result = plan.plan_node(hw, config_name="all-1g.50gb")
    assert result["feasible"] and result["gpus"][0]["profiles_source"] == "live"
    assert result["gpus"][0]["target"] == {"1g.50gb": 2}
    assert not plan.plan_node(hw, mig_devices={"1g.50gb": 1, "2g.100gb": 1})["feasible"]


def test_unselected_gpu_makes_plan_infeasible():
    config = {"version": "v1", "mig-configs": {"one": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.141gb": 1}}]}}
    result = plan.plan_node(_hw(*H200, count=2), config_name="one", config=config)
    assert not result["feasible"] and "no entry for GPU 1" in result["reason"]


def test_strategies_resources_and_labels():
    balanced = plan.plan_node(_hw(*H200, count=2), config_name="all-balanced")
    assert plan.strategy_conflict(balanced, "mixed") is None
    assert "one MIG profile" in plan.strategy_conflict(balanced, "single")
    assert plan.expected_resources(balanced, "mixed") == {
        "nvidia.com/mig-1g.18gb": 4, "nvidia.com/mig-2g.35gb": 2, "nvidia.com/mig-3g.71gb": 2}
    assert plan.expected_resources(balanced, "single") == {"nvidia.com/gpu": 0}
    assert plan.expected_gfd_labels(balanced, "single")["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-INVALID"
    assert plan.expected_gfd_labels(balanced, "mixed")["nvidia.com/mig-1g.18gb.count"] == "4"

    small = plan.plan_node(_hw(*H200, count=2), config_name="all-1g.18gb")
    assert plan.strategy_conflict(small, "single") is None
    assert plan.expected_resources(small, "single") == {"nvidia.com/gpu": 14}
    labels = plan.expected_gfd_labels(small, "single")
    assert labels == {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb",
                      "nvidia.com/gpu.count": "14"}

    disabled = plan.plan_node(_hw(*H200, count=2), config_name="all-disabled")
    assert plan.expected_resources(disabled, "single") == {"nvidia.com/gpu": 2}
    assert plan.expected_resources(disabled, "none") == {"nvidia.com/gpu": 2}

    enabled_empty = plan.plan_node(_hw(*H200), config_name="all-enabled")
    assert "no MIG devices" in plan.strategy_conflict(enabled_empty, "single")
    with pytest.raises(PlanningError, match="strategy 'both'"):
        plan.expected_resources(small, "both")


def test_mixed_node_single_strategy_conflict():
    config = {"version": "v1", "mig-configs": {"half": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
        {"devices": [1], "mig-enabled": False}]}}
    result = plan.plan_node(_hw(*H200, count=2), config_name="half", config=config)
    assert "same MIG mode" in plan.strategy_conflict(result, "single")
    assert plan.expected_resources(result, "mixed") == {"nvidia.com/mig-1g.18gb": 7, "nvidia.com/gpu": 1}


def test_mps_refuses_mig_enabled_layouts():
    """NVIDIA's GFD exits on a node with MPS sharing and any GPU in MIG mode (internal/lm/nvml.go isMPSCapable), the
    device plugin refuses MIG devices under MPS: enabling MIG on an MPS node can never be verified."""
    config = {"version": "v1", "mig-configs": {
        "half": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}, {"devices": [1], "mig-enabled": False}],
        "off": [{"devices": "all", "mig-enabled": False}]}}
    half = plan.plan_node(_hw(*H200, count=2), config_name="half", config=config)
    off = plan.plan_node(_hw(*H200, count=2), config_name="off", config=config)
    assert "MPS is not supported on MIG-enabled GPUs" in plan.sharing_conflict(half, "mps")
    assert "GPUs [0]" in plan.sharing_conflict(half, "mps")
    for sharing in ("none", "time-slicing", None, ""):
        assert plan.sharing_conflict(half, sharing) is None
    assert plan.sharing_conflict(off, "mps") is None
