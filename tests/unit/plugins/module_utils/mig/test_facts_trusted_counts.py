"""A30: NVML's GPU-instance profile counts are not trusted (mig-parted hard-codes the A30 table,
NVIDIA/mig-parted pkg/mig/discovery/discovery.go); the live table is corrected from the catalog."""

import copy

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, facts, plan, resolve


def _live_gpu(model_name, wrong=None):
    """A gpu_info-like GPU whose live table is the catalog's, with ``wrong`` {profile: count} as NVML misreports."""
    model = catalog.get_model(model_name)
    profiles = []
    for profile in model["profiles"]:
        profile = dict(profile, remaining=profile["instance_count"])
        if wrong and profile["name"] in wrong:
            profile["instance_count"] = wrong[profile["name"]]
        profiles.append(profile)
    return {"index": 0, "name": model["name"], "pci_device_id": model["pci_device_id"],
            "mig": {"current": True, "pending": True}, "profiles": profiles, "instances": []}


def test_a30_counts_come_from_the_catalog():
    gpu = _live_gpu("NVIDIA A30", wrong={"1g.6gb+me": 4, "2g.12gb+me": 2})
    before = copy.deepcopy(gpu)
    corrected = dict((p["name"], p) for p in facts.trusted_live_profiles(gpu))
    assert gpu == before  # the input is not modified
    assert corrected["1g.6gb+me"]["instance_count"] == 1 and corrected["1g.6gb+me"]["nvml_instance_count"] == 4
    assert corrected["2g.12gb+me"]["instance_count"] == 1 and corrected["2g.12gb+me"]["nvml_instance_count"] == 2
    assert all(p["instance_count_source"] == "catalog" for p in corrected.values())
    assert dict((n, p["instance_count"]) for n, p in corrected.items()) == {
        "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}
    # Correcting twice changes nothing more (NVML's figure stays the one NVML gave).
    again = facts.trusted_live_profiles(dict(gpu, profiles=list(corrected.values())))
    assert dict((p["name"], p["nvml_instance_count"]) for p in again)["1g.6gb+me"] == 4


def test_other_gpus_and_unknown_profiles_are_left_as_nvml_reports_them():
    h200 = _live_gpu("NVIDIA H200", wrong={"1g.18gb+me": 3})
    assert facts.trusted_live_profiles(h200) == h200["profiles"]
    a30 = _live_gpu("NVIDIA A30")
    a30["profiles"].append({"name": "1g.6gb+gfx", "instance_count": 4, "placements": []})
    extra = [p for p in facts.trusted_live_profiles(a30) if p["name"] == "1g.6gb+gfx"]
    assert extra == [{"name": "1g.6gb+gfx", "instance_count": 4, "placements": []}]
    assert facts.trusted_live_profiles({"pci_device_id": "not an id", "profiles": [{"name": "x"}]}) == [{"name": "x"}]


def test_plans_from_a_corrected_a30_table_use_the_true_counts():
    wrong = _live_gpu("NVIDIA A30", wrong={"1g.6gb+me": 4})
    # Trusted blindly, NVML's count would make MIG Manager's generated all-1g.6gb.me ask for 4 instances.
    raw_model = plan.model_for_gpu(wrong)
    assert resolve.generate_config([raw_model])["mig-configs"]["all-1g.6gb.me"][0]["mig-devices"] == {"1g.6gb+me": 4}
    fixed = dict(wrong, profiles=facts.trusted_live_profiles(wrong))
    result = plan.plan_node({"gpus": [fixed]}, config_name="all-1g.6gb.me")
    assert result["feasible"] and result["gpus"][0]["target"] == {"1g.6gb+me": 1}
    assert result["gpus"][0]["profiles_source"] == "live"
