"""Sizes no GPU has are refused in one line before planning grows with them: a profile count in a mig-parted config
or a module option, a GPU count from a label, and a config whose values are YAML alias bombs or keys of mixed types."""

import time

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, migparted, placement, plan, resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.catalog import get_model
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import MigConfigError, PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import MAX_PROFILE_COUNT

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE",
        "mig": {"current": True, "pending": True}}


def config(mig_devices="{1g.10gb: 7}", devices="all", extra=""):
    return ("version: v1\nmig-configs:\n  custom:\n    - devices: %s\n      mig-enabled: true\n"
            "      mig-devices: %s\n%s" % (devices, mig_devices, extra))


def alias_bomb(levels=9, width=9):
    """Anchors defined inside a device filter list: each level holds ``width`` references to the one below, so the
    value expands to width**levels items when rendered."""
    defs = ["&l0 [%s]" % ",".join(["0x233010DE"] * width)]
    defs += ["&l%d [%s]" % (i, ",".join(["*l%d" % (i - 1)] * width)) for i in range(1, levels)]
    return defs


@pytest.mark.parametrize("count", [MAX_PROFILE_COUNT + 1, 10 ** 9, 10 ** 30])
def test_a_config_count_past_the_bound_is_refused_naming_the_field(count):
    started = time.process_time()
    with pytest.raises(MigConfigError) as err:
        migparted.parse_config(config("{1g.10gb: %d}" % count), "ConfigMap gpu-operator/custom")
    assert "mig-configs.custom[0].mig-devices.1g.10gb: count %d is more than any GPU holds" % count in str(err.value)
    assert time.process_time() - started < 1.0  # refused by the check, not after a search


def test_a_count_within_the_bound_is_still_planned_and_found_infeasible():
    parsed = migparted.parse_config(config("{1g.10gb: %d}" % MAX_PROFILE_COUNT), "cm")
    result = plan.plan_node({"gpus": [H100]}, "custom", parsed)
    assert not result["feasible"] and "%d x 1g.10gb exceeds its maximum of 7 per GPU" % MAX_PROFILE_COUNT \
        in result["reason"]


def test_module_option_and_placement_counts_share_the_bound():
    model = get_model("NVIDIA H100 80GB HBM3")
    with pytest.raises(PlanningError, match=r"MIG profile '1g.10gb' \(GPU 0\): count 1000000 is more than any GPU"):
        resolve.check_profiles({"1g.10gb": 10 ** 6}, model, 0)
    with pytest.raises(PlanningError, match="MIG profile '1g.10gb': count 1000000 is more than any GPU"):
        placement.solve(model, {"1g.10gb": 10 ** 6})
    with pytest.raises(PlanningError, match="count must be a whole number >= 0, got '7'"):
        placement.solve(model, {"1g.10gb": "7"})


def test_an_alias_bomb_in_a_config_is_named_in_a_few_characters():
    bomb = "[%s]" % ", ".join(alias_bomb())
    for text, where in (("version: %s\nmig-configs: {}\n" % bomb, "version: unknown version"),
                        (config("{1g.10gb: 7}") + "  other:\n    - devices: %s\n      mig-enabled: false\n" % bomb,
                         "mig-configs.other[0].devices")):
        started = time.process_time()
        with pytest.raises(MigConfigError) as err:
            migparted.parse_config(text, "cm")
        message = str(err.value)
        assert time.process_time() - started < 1.0
        assert where in message and len(message) < 400, message[:400]


def test_keys_of_mixed_types_are_named_not_a_traceback():
    text = config() + "      1: a\n      other: b\n"
    with pytest.raises(MigConfigError, match=r"unknown field\(s\) 1, other"):
        migparted.parse_config(text, "cm")
    with pytest.raises(MigConfigError, match=r"unknown field\(s\) 7, extra"):
        migparted.parse_config("version: v1\n7: x\nextra: y\nmig-configs: {}\n", "cm")


@pytest.mark.parametrize("count", ["65", "100000000"])
def test_a_gpu_count_label_past_the_bound_names_the_node(count):
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": count}
    started = time.process_time()
    with pytest.raises(PlanningError, match="node gpu-7: nvidia.com/gpu.count=%s is more GPUs than a node holds" % count):
        facts.hardware_from_gfd_labels(labels, node_name="gpu-7")
    assert time.process_time() - started < 1.0
    labels["nvidia.com/gpu.count"] = "64"
    assert len(facts.hardware_from_gfd_labels(labels, node_name="gpu-7")["gpus"]) == 64
