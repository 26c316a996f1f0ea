"""Compute-instance profiles in mig-devices (``1c.3g.40gb``: a 3g.40gb GPU instance holding one compute instance of
one slice), accepted as mig-parted v0.15.0 accepts them: the key passes its format check (pkg/types
AssertValidMigProfileFormat) and names a profile the GPU lists (go-nvlib ParseMigProfile over the GPU's GI and CI
profiles); mig-parted then creates the GPU instance and that compute instance (pkg/mig/config/config.go)."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError, UnknownProfileError

H100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE"}


def _hw(count=1):
    return {"gpus": [dict(H100, index=i, mig={"current": True, "pending": True}, instances=[]) for i in range(count)]}


def _config(devices):
    return {"version": "v1", "mig-configs": {"custom": [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]}}


def test_a_compute_instance_profile_plans_in_its_gpu_instance():
    planned = plan.plan_node(_hw(), config_name="custom", config=_config({"1c.3g.40gb": 1, "3g.40gb": 1}))
    assert planned["feasible"], planned["reason"]
    (gpu,) = planned["gpus"]
    assert gpu["target"] == {"1c.3g.40gb": 1, "3g.40gb": 1}
    assert sorted((p["start"], p["size"]) for p in gpu["placements"]) == [(0, 4), (4, 4)]
    assert sorted(p["profile"] for p in gpu["placements"]) == ["1c.3g.40gb", "3g.40gb"]


def test_compute_instances_still_need_room_for_their_gpu_instances():
    planned = plan.plan_node(_hw(), config_name="custom", config=_config({"2c.3g.40gb": 2, "1g.10gb": 1}))
    assert not planned["feasible"] and "GPU 0" in planned["reason"]


@pytest.mark.parametrize("profile, offered", [("3c.4g.40gb", "1, 2, 4"), ("5c.7g.80gb", "1, 2, 3, 4, 7")])
def test_a_compute_slice_count_the_instance_does_not_offer_is_refused(profile, offered):
    with pytest.raises(UnknownProfileError, match="'%s' is not offered by NVIDIA H100 80GB HBM3.*of %s slices$"
                       % (profile, offered)):
        plan.plan_node(_hw(), config_name="custom", config=_config({profile: 1}))


def test_more_compute_than_gpu_slices_is_not_a_profile():
    with pytest.raises(PlanningError, match="2c.1g.10gb"):
        plan.plan_node(_hw(), config_name="custom", config=_config({"2c.1g.10gb": 1}))


def test_the_device_plugin_advertises_compute_instances_only_under_single():
    planned = plan.plan_node(_hw(2), config_name="custom", config=_config({"1c.7g.80gb": 1}))
    assert plan.expected_resources(planned, "single") == {gpu_labels.RESOURCE_GPU: 2}
    assert plan.expected_gfd_labels(planned, "single")[gpu_labels.LABEL_PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-1c.7g.80gb"
    assert plan.strategy_conflict(planned, "single") is None
    assert plan.expected_resources(planned, "mixed") == {}
