"""Replay the read-only probe of a real H200 (tests/fixtures/h200/) against the catalog and planner."""

import copy
import json
import os
import re

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import UnknownProfileError

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "h200")


def _read(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


@pytest.fixture(scope="module")
def probe():
    return json.loads(_read("probe.json"))


@pytest.fixture(scope="module")
def live_gpu(probe):
    (gpu,) = probe["gpu_info"]["gpus"]
    return gpu


def test_probe_ran_on_an_h200_with_mig_untouched(probe, live_gpu):
    assert live_gpu["name"] == "NVIDIA H200" and live_gpu["pci_device_id"] == "0x233510DE"
    assert live_gpu["mig"] == {"current": False, "pending": False}
    assert live_gpu["instances"] == []
    direct = json.loads(_read("gpu_info_direct.json"))
    assert direct["gpus"][0]["profiles"] == live_gpu["profiles"]


def test_live_table_equals_catalog(live_gpu):
    model = catalog.get_model(name=live_gpu["name"], pci_device_id=live_gpu["pci_device_id"])
    assert model["memory_mb"] == live_gpu["memory_mb"]
    keys = ("id", "index", "slices", "memory_slices", "instance_count", "multiprocessors", "memory_mb",
            "copy_engines", "decoders", "encoders", "jpegs", "ofas", "placements")
    live = dict((p["name"], dict((k, p[k]) for k in keys)) for p in live_gpu["profiles"])
    built_in = dict((p["name"], dict((k, p[k]) for k in keys)) for p in model["profiles"])
    assert live == built_in


def test_live_table_matches_nvidia_smi(live_gpu):
    by_id = dict((p["id"], p) for p in live_gpu["profiles"])
    lgipp = re.findall(r"Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)", _read("nvidia-smi-mig-lgipp.txt"))
    assert len(lgipp) == len(by_id) == 7
    for profile_id, starts, size in lgipp:
        placements = by_id[int(profile_id)]["placements"]
        assert [p["start"] for p in placements] == [int(s) for s in starts.split(",")]
        assert set(p["size"] for p in placements) == {int(size)}
    rows = re.findall(r"\|\s+0\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+[\d.]+\s+\w+\s+(\d+)", _read("nvidia-smi-mig-lgip.txt"))
    assert len(rows) == 7
    for name, profile_id, free, total, sms in rows:
        profile = by_id[int(profile_id)]
        assert (profile["name"], profile["instance_count"], profile["remaining"], profile["multiprocessors"]) == (
            name, int(total), int(free), int(sms))


@pytest.mark.parametrize("key, config_name, strategy", [
    ("all_balanced", "all-balanced", "mixed"), ("all_1g_18gb", "all-1g.18gb", "single")])
def test_recorded_plans_are_reproduced(probe, key, config_name, strategy):
    recorded = probe[key]
    hardware = {"gpus": probe["gpu_info"]["gpus"]}
    result = plan.plan_node(hardware, config_name=config_name)
    assert recorded["feasible"] and result["feasible"]
    stable = ("index", "model", "mig_enabled", "target", "current", "placements", "creation_order", "create",
              "mode_change_required", "feasible", "reason", "changed")
    assert [dict((k, g[k]) for k in stable) for g in recorded["plan"]["gpus"]] == [
        dict((k, g[k]) for k in stable) for g in json.loads(json.dumps(result))["gpus"]]
    assert recorded["expected_resources"] == plan.expected_resources(result, strategy)
    assert recorded["expected_gfd_labels"] == plan.expected_gfd_labels(result, strategy)
    # The built-in catalog alone (as from GFD labels) plans the same placements.
    catalog_only = copy.deepcopy(hardware)
    for gpu in catalog_only["gpus"]:
        gpu.pop("profiles")
    assert plan.plan_node(catalog_only, config_name=config_name)["gpus"][0]["placements"] == result["gpus"][0]["placements"]


def test_recorded_invalid_layout_failed_naming_valid_profiles(probe):
    recorded = probe["all_1g_10gb"]
    assert recorded["failed"]
    expected = "1g.10gb is not a profile of NVIDIA H200 (GPU 0); its 1-slice profiles are 1g.18gb, 1g.18gb+me, 1g.35gb"
    assert recorded["msg"] == expected
    with pytest.raises(UnknownProfileError) as err:
        plan.plan_node({"gpus": probe["gpu_info"]["gpus"]}, config_name="all-1g.10gb")
    assert str(err.value) == expected
