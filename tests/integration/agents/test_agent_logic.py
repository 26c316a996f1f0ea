"""Pure logic of the simulated operands, checked against the hardware catalog and the reference facts.

No cluster here: config generation/selection (mig-parted), GFD labels and device-plugin resources
per MIG strategy, computed from hosts built out of tests/testbed/gpusim/catalog.json.
"""

import os
from pathlib import Path

import pytest
import yaml

from tests.testbed.agents import hardware, migconfig, operands
from tests.testbed.gpusim import hoststate

# NVIDIA's v26.7.0 default MIG config (MIG Manager's assets), read-only beside the checkout (GPUFLEET_NVIDIA_DIR).
NVIDIA_DIR = Path(os.environ.get("GPUFLEET_NVIDIA_DIR") or Path(__file__).resolve().parents[3].parent / "shared" / "nvidia")
STATIC_CONFIG_MAP = NVIDIA_DIR / "gpu-operator-v26.7.0" / "assets" / "state-mig-manager" / "0400_configmap.yaml"


def nvidia_static_configs():
    """mig-configs of NVIDIA's default-mig-parted-config (v26.7.0)."""
    if not STATIC_CONFIG_MAP.exists():
        pytest.fail("NVIDIA's v26.7.0 MIG Manager assets not at %s (set GPUFLEET_NVIDIA_DIR)" % STATIC_CONFIG_MAP)
    return yaml.safe_load(yaml.safe_load(STATIC_CONFIG_MAP.read_text())["data"]["config.yaml"])["mig-configs"]


def make_gpu(model, index=0, mig=False, devices=()):
    """A Gpu as hardware.read_host returns it, from the catalog; `devices` are GI profile names."""
    entry = hoststate.catalog()["models"][hoststate.resolve_model(model)]
    total = entry["memory_total_bytes"]
    profiles = [hardware.GiProfile(
        index=p["index"], id=p["id"], name=hardware.profile_name(p["index"], p["slices"], p["memory_mb"], total),
        slices=p["slices"], instance_count=p["instances"], memory_mb=p["memory_mb"], multiprocessors=p["multiprocessors"],
        copy_engines=p["engines"]["copy"], decoders=p["engines"]["decoder"], encoders=p["engines"]["encoder"],
        jpegs=p["engines"]["jpeg"], ofas=p["engines"]["ofa"]) for p in entry["gi_profiles"]]
    by_name = {p.name: p for p in profiles}
    migs = [hardware.MigDevice(gpu=index, gi_id=i + 1, ci_id=0, gi_profile=by_name[d], ci_slices=by_name[d].slices,
                               multiprocessors=by_name[d].multiprocessors) for i, d in enumerate(devices)]
    return hardware.Gpu(index=index, name=entry["nvml_name"], uuid="GPU-%d" % index,
                        pci_device_id=int(entry["pci_device_id"], 16), memory_mb=total // 2 ** 20,
                        compute=tuple(entry["cuda_compute_capability"]), mig_capable=entry["mig_capable"],
                        mig_current=mig, mig_pending=mig, mig_devices=migs, gi_profiles=profiles)


def make_host(*gpus):
    return hardware.Host(driver_version="580.159.04", cuda_driver_version=13000, gpus=list(gpus))


@pytest.mark.parametrize("model", sorted(hoststate.catalog()["models"]))
def test_profile_names_match_what_nvml_reports(model):
    """go-nvlib's name formula gives the catalog's (real NVML) profile names for every model."""
    entry = hoststate.catalog()["models"][model]
    computed = [p.name for p in make_gpu(model).gi_profiles]
    assert computed == [p["name"].replace("MIG ", "") for p in entry["gi_profiles"]]


def test_generated_config_h200_matches_reference_formula():
    config = migconfig.generate([make_gpu("H200", i) for i in range(4)])["mig-configs"]
    assert config["all-disabled"] == [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]
    assert config["all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    assert config["all-balanced"] == [{"devices": "all", "mig-enabled": True,
                                       "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]
    assert config["all-1g.18gb"][0]["mig-devices"] == {"1g.18gb": 7}
    assert config["all-1g.18gb.me"][0]["mig-devices"] == {"1g.18gb+me": 1}
    assert config["all-1g.35gb"][0]["mig-devices"] == {"1g.35gb": 4}
    assert config["all-7g.141gb"][0]["mig-devices"] == {"7g.141gb": 1}


@pytest.mark.parametrize("model,balanced", [
    ("A100-SXM4-40GB", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    ("H100-80GB-HBM3", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),  # 1g.10gb (max 7) beats 1g.20gb (max 4)
    ("A30", {"1g.6gb": 2, "2g.12gb": 1}),
])
def test_generated_balanced_per_model(model, balanced):
    config = migconfig.generate([make_gpu(model)])["mig-configs"]
    assert config["all-balanced"][0]["mig-devices"] == balanced


def test_generated_config_agrees_with_the_static_default_config():
    """Each generated all-<profile> of a model has the static config's count for that model."""
    static = nvidia_static_configs()
    checked = 0
    for model in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-80GB-HBM3", "H200", "A30"):
        gpu = make_gpu(model)
        for name, entries in migconfig.generate([gpu])["mig-configs"].items():
            if name not in static:
                continue
            assert migconfig.select(static, name, [gpu]) == migconfig.select({name: entries}, name, [gpu]), (model, name)
            checked += 1
    assert checked >= 30


def test_select_unknown_name_names_it():
    with pytest.raises(migconfig.ConfigError, match="selected mig-config not present: all-3g.99gb"):
        migconfig.select({"all-disabled": [{"devices": "all", "mig-enabled": False}]}, "all-3g.99gb", [make_gpu("A30")])


def test_select_honours_device_filter_and_indexes():
    configs = {"x": [{"device-filter": ["0x233510DE"], "devices": [1], "mig-enabled": True,
                      "mig-devices": {"3g.71gb": 2, "1g.18gb": 0}}]}
    gpus = [make_gpu("H200", 0), make_gpu("H200", 1), make_gpu("A30", 2)]
    assert migconfig.select(configs, "x", gpus) == {1: (True, {"3g.71gb": 2})}


def test_applied_compares_mode_and_devices():
    configs = nvidia_static_configs()
    balanced = [make_gpu("H200", 0, True, ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"])]
    plan = migconfig.select(configs, "all-balanced", balanced)
    assert migconfig.applied(plan, balanced)
    assert not migconfig.applied(migconfig.select(configs, "all-1g.18gb", balanced), balanced)
    assert migconfig.mode_applied(migconfig.select(configs, "all-1g.18gb", balanced), balanced)
    assert not migconfig.mode_applied(migconfig.select(configs, "all-disabled", balanced), balanced)


@pytest.mark.parametrize("text,message", [
    ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "unknown version"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}", "mig-devices is required"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5: 1}}]}", "invalid MIG profile"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, extra: 1}]}", "unexpected field"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}", "must be empty"),
])
def test_parse_rejects_bad_configs(text, message):
    with pytest.raises(migconfig.ConfigError, match=message):
        migconfig.parse(text)


def test_wanted_devices_rejects_profile_of_another_model():
    with pytest.raises(migconfig.ConfigError, match=r"GPU 0 \(NVIDIA H200\): MIG profile 1g.10gb is not supported"):
        migconfig.wanted_devices(make_gpu("H200"), {"1g.10gb": 1})
    wanted = migconfig.wanted_devices(make_gpu("A100-SXM4-40GB"), {"1c.3g.20gb": 1, "1g.5gb": 2})
    assert [(p.name, c) for p, c in wanted] == [("3g.20gb", 1), ("1g.5gb", 1), ("1g.5gb", 1)]


def test_mig_parted_permutations_of_a_multiset():
    perms = list(hardware.mig_parted_permutations(["a", "a", "b", "c"]))
    assert len(perms) == 12 and len({tuple(p) for p in perms}) == 12
    # mig-parted's swap walk: position 0 keeps a, then takes b, then c (each swapped in from where it is)
    assert perms[:3] == [["a", "a", "b", "c"], ["a", "a", "c", "b"], ["a", "b", "a", "c"]]
    assert [p[0] for p in perms].index("b") == 6 and perms[6] == ["b", "a", "a", "c"]


def test_creation_order_is_mig_parteds_largest_first():
    gpu = make_gpu("H100-80GB-HBM3")
    wanted = migconfig.wanted_devices(gpu, {"1g.10gb": 2, "1g.10gb+me": 1, "2g.20gb": 1, "1c.3g.40gb": 1,
                                            "3g.40gb": 1})
    order = [(p.name, c) for p, c in hardware.creation_order(wanted)]
    assert order == [("3g.40gb", 3), ("3g.40gb", 1), ("2g.20gb", 2), ("1g.10gb+me", 1), ("1g.10gb", 1),
                     ("1g.10gb", 1)]


def test_gfd_and_plugin_none_strategy():
    host = make_host(*[make_gpu("H100-80GB-HBM3", i) for i in range(8)])
    labels = operands.gfd_labels(host, "none")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/gpu.compute.major"] == "9"
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.159.04"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "13.0"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert "nvidia.com/mig.strategy" not in labels
    assert operands.device_plugin_resources(host, "none") == ({"nvidia.com/gpu": 8}, None)


def test_single_strategy_uniform_layout():
    host = make_host(*[make_gpu("A100-SXM4-40GB", i, True, ["1g.5gb"] * 7) for i in range(2)])
    labels = operands.gfd_labels(host, "single")
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.memory"] == "4864"
    assert labels["nvidia.com/gpu.slices.gi"] == "1"
    assert operands.device_plugin_resources(host, "single") == ({"nvidia.com/gpu": 14}, None)


@pytest.mark.parametrize("gpus,reason", [
    ([("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb")], "more than one MIG device type"),
    ([()], "enabled but empty"),
    ([("7g.141gb",), None], "MIG enabled and disable"),
])
def test_single_strategy_invalid_layouts(gpus, reason):
    host = make_host(*[make_gpu("H200", i, d is not None, d or ()) for i, d in enumerate(gpus)])
    labels = operands.gfd_labels(host, "single")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.memory"]) == ("0", "0", "0")
    resources, error = operands.device_plugin_resources(host, "single")
    assert resources == {} and reason in error


def test_mixed_strategy_labels_and_resources():
    host = make_host(make_gpu("H200", 0, True, ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]),
                     make_gpu("H200", 1, True, ["1g.18gb+me"]), make_gpu("H200", 2))
    labels = operands.gfd_labels(host, "mixed")
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.18gb.count"] == "2"
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-MIG-1g.18gb"
    assert labels["nvidia.com/mig-3g.71gb.memory"] == "71424"
    assert labels["nvidia.com/mig-1g.18gb.me.count"] == "1"
    assert labels["nvidia.com/mig-1g.18gb.me.product"] == "NVIDIA-H200-MIG-1g.18gb.me"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/gpu.replicas"] == "1"
    resources, error = operands.device_plugin_resources(host, "mixed")
    assert error is None
    assert resources == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.18gb": 2, "nvidia.com/mig-2g.35gb": 1,
                         "nvidia.com/mig-3g.71gb": 1, "nvidia.com/mig-1g.18gb.me": 1}


def test_time_slicing_multiplies_and_renames():
    config = {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}, {"name": "nvidia.com/mig-1g.18gb", "replicas": 2, "rename": "small"}]}}}
    shared = operands.time_slicing(config)
    host = make_host(make_gpu("H200", 0, True, ["1g.18gb"] * 7), make_gpu("H200", 1))
    resources, error = operands.device_plugin_resources(host, "mixed")
    assert error is None
    assert operands.apply_time_slicing(resources, shared) == {"nvidia.com/gpu": 4, "small": 14}
    labels = operands.apply_time_slicing_labels(operands.gfd_labels(host, "mixed"), shared)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-SHARED"
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == ("4", "time-slicing")
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-MIG-1g.18gb"  # renamed: no -SHARED
    assert labels["nvidia.com/mig-1g.18gb.replicas"] == "2"
    by_default = operands.time_slicing({"sharing": {"timeSlicing": {"renameByDefault": True,
                                                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}})
    assert by_default == {"nvidia.com/gpu": (3, "nvidia.com/gpu.shared")}


def test_mps_sharing_as_nvidias_gfd_and_device_plugin():
    """sharing.mps (NVIDIA api/config/v1 Sharing.SharingStrategy): shares like time-slicing, labelled mps, mps.capable
    true; refused with the mixed strategy and on MIG (GFD fails on any MIG-enabled GPU; the plugin on MIG devices)."""
    config = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    shared = operands.time_slicing(config)
    assert shared.strategy == "mps" and shared == {"nvidia.com/gpu": (4, "nvidia.com/gpu")}
    host = make_host(make_gpu("H200", 0), make_gpu("H200", 1))
    labels = operands.apply_time_slicing_labels(operands.gfd_labels(host, "single"), shared)
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == ("NVIDIA-H200-SHARED", "4")
    assert (labels["nvidia.com/gpu.sharing-strategy"], labels["nvidia.com/mps.capable"]) == ("mps", "true")
    resources, error = operands.device_plugin_resources(host, "none")
    assert operands.apply_time_slicing(resources, shared) == {"nvidia.com/gpu": 8} and error is None
    assert operands.gfd_error(host, shared) is None and operands.sharing_error(host, "single", shared) is None
    assert "mixed is not supported with MPS" in operands.sharing_error(host, "mixed", shared)
    mig = make_host(make_gpu("H200", 0, True, ["1g.18gb"] * 7), make_gpu("H200", 1, True, ["1g.18gb"] * 7))
    assert "not supported for mig devices" in operands.gfd_error(mig, shared)
    assert "not supported for MIG devices" in operands.sharing_error(mig, "single", shared)
    assert operands.sharing_error(mig, "none", shared) is None  # whole GPUs under none: the plugin starts, GFD fails
    renamed = operands.time_slicing({"sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]},
                                                 "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}})
    assert renamed.strategy == "mps" and renamed == {"nvidia.com/gpu": (2, "nvidia.com/gpu.shared")}  # mps wins
    assert operands.time_slicing({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}).strategy \
        == "time-slicing"
    assert operands.time_slicing(None).strategy == "none"
