"""The catalog data against NVIDIA's own files: the static default MIG config (gpu-operator v26.7.0
assets/state-mig-manager/0400_configmap.yaml, test data in ../shared/nvidia) and the GPUs it names;
planning from a model name alone for every catalog model and named config."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import (
    catalog,
    facts,
    migparted,
    plan,
    resolve,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import (
    canonical_profile_name,
    config_name_for,
    parse_profile,
)
from ansible_collections.gpufleet.gpu_operator.plugins.modules import mig_plan

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
STATIC_CONFIGMAP = os.path.join(ROOT, "..", "shared", "nvidia", "gpu-operator-v26.7.0", "assets", "state-mig-manager",
                                "0400_configmap.yaml")

# GPUs the static config names by device filter.
NEW_GPUS = ("0x234210DE", "0x234810DE", "0x233D10DE", "0x232910DE", "0x20B610DE", "0x294110DE", "0x318210DE",
            "0x31C210DE", "0x2BB510DE")

# Where NVIDIA's static config does not offer a GPU one of its own profiles, by (PCI id, config name).
STATIC_GAPS = {
    ("0x233B10DE", "all-1g.35gb"): "NVIDIA's file filters all-1g.35gb to H200 141GB and GB300; H200 NVL has no entry",
}


def _nvidia_static_config():
    # No skip: without NVIDIA's file nothing can be compared, and that is a failure.
    assert os.path.isfile(STATIC_CONFIGMAP), "NVIDIA's default MIG ConfigMap is missing at %s" % STATIC_CONFIGMAP
    with open(STATIC_CONFIGMAP) as handle:
        configmap = yaml.safe_load(handle)
    assert configmap["metadata"]["name"] == "default-mig-parted-config"
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _filter_ids(entry):
    value = entry.get("device-filter")
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _selects(entry, pci_id):
    ids = _filter_ids(entry)
    return ids is None or pci_id in ids


def test_builtin_config_equals_nvidias_static_config():
    nvidia = _nvidia_static_config()
    ours = resolve.builtin_config()
    assert len(nvidia["mig-configs"]) == 81
    assert sorted(ours["mig-configs"]) == sorted(nvidia["mig-configs"])
    for name, entries in nvidia["mig-configs"].items():
        assert ours["mig-configs"][name] == entries, name  # every entry, filter (list or string) and count
    assert ours == nvidia
    migparted.parse_config(ours, "builtin")  # and our own parser accepts it whole


def test_every_profile_name_in_the_static_config_parses():
    names = set()
    for config_name, entries in _nvidia_static_config()["mig-configs"].items():
        for entry in entries:
            for profile in entry.get("mig-devices") or {}:
                parse_profile(profile)
                assert canonical_profile_name(profile) == profile
                names.add(profile)
            if config_name.startswith("all-") and len(entry.get("mig-devices") or {}) == 1:
                (profile,) = entry["mig-devices"]
                assert config_name_for(profile) == config_name
    assert {"1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me", "4g.96gb+gfx"} <= names


def test_every_device_filter_is_a_catalog_model():
    ids = set()
    for entries in _nvidia_static_config()["mig-configs"].values():
        for entry in entries:
            ids.update(_filter_ids(entry) or [])
    assert set(NEW_GPUS) <= ids
    for pci_id in sorted(ids):
        model = catalog.get_model(pci_device_id=pci_id)
        assert model is not None, "%s is in NVIDIA's static config but not in the catalog" % pci_id
        assert pci_id in model["pci_device_ids"]


def _catalog_ids():
    return [(model["name"], pci_id) for model in catalog.all_models() for pci_id in model["pci_device_ids"]]


@pytest.mark.parametrize("name, pci_id", _catalog_ids())
def test_catalog_counts_equal_the_static_config(name, pci_id):
    """Each catalog GI profile has its all-<profile> config with the same maximum count, and every
    static entry that selects this GPU and names one of its profiles uses the catalog's count."""
    model = catalog.get_model(pci_device_id=pci_id)
    assert model["name"] == name
    configs = _nvidia_static_config()["mig-configs"]
    table = dict((p["name"], p) for p in model["profiles"])
    for profile in model["profiles"]:
        config_name = config_name_for(profile["name"])
        selected = [e for e in configs.get(config_name, []) if _selects(e, pci_id)]
        if (pci_id, config_name) in STATIC_GAPS:
            assert selected == []
            continue
        assert selected, "%s: no %s entry in NVIDIA's static config" % (name, config_name)
        assert selected[0]["mig-devices"] == {profile["name"]: profile["instance_count"]}
    for config_name, entries in configs.items():
        for entry in (e for e in entries if _selects(e, pci_id) and _filter_ids(e)):
            # Entries with a filter for this GPU must name only its profiles.
            assert set(entry["mig-devices"]) <= set(table), (config_name, entry)
        first = next((e for e in entries if _selects(e, pci_id)), None)
        if first and len(first.get("mig-devices") or {}) == 1:
            ((profile, count),) = first["mig-devices"].items()
            if profile in table:
                assert count == table[profile]["instance_count"], (config_name, name)
    (balanced,) = [e for e in configs["all-balanced"] if _selects(e, pci_id)]
    assert balanced["mig-devices"] == resolve.balanced_layout(model)


@pytest.mark.parametrize("pci_id", NEW_GPUS)
def test_new_models_are_marked_and_name_their_gaps(pci_id):
    model = catalog.get_model(pci_device_id=pci_id)
    assert model["placements_source"].startswith("assumed")
    assert all(p["multiprocessors"] is None and p["memory_mb"] is None for p in model["profiles"])
    assert catalog.get_model(name=model["name"])["pci_device_ids"] == [pci_id]


def test_rtx_pro_6000_profile_table():
    model = catalog.get_model(pci_device_id="0x2BB5")
    counts = dict((p["name"], p["instance_count"]) for p in model["profiles"])
    assert counts == {"1g.24gb": 4, "1g.24gb+me": 1, "1g.24gb+gfx": 4, "1g.24gb+me.all": 1, "1g.24gb-me": 4,
                      "2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb+me.all": 1, "2g.48gb-me": 2, "4g.96gb": 1,
                      "4g.96gb+gfx": 1}
    assert model["compute_slices"] == 4 and model["memory_slices"] == 4
    assert resolve.balanced_layout(model) == {"1g.24gb": 2, "2g.48gb": 1}


@pytest.mark.parametrize("pci_id", NEW_GPUS)
@pytest.mark.parametrize("strategy", ["none", "mixed"])
def test_planning_from_gfd_labels_of_the_new_gpus(pci_id, strategy):
    model = catalog.get_model(pci_device_id=pci_id)
    labels = {"nvidia.com/gpu.product": gpu_labels.product_label(model["name"]), "nvidia.com/gpu.count": "2",
              "nvidia.com/mig.strategy": strategy}
    hardware = facts.hardware_from_gfd_labels(labels, node_name="node-a")
    result = plan.plan_node(hardware, config_name="all-balanced")
    assert result["feasible"], result["reason"]
    assert [g["target"] for g in result["gpus"]] == [resolve.balanced_layout(model)] * 2
    static = plan.plan_node(hardware, config_name="all-balanced", config=resolve.builtin_config())
    assert static["feasible"] and [g["target"] for g in static["gpus"]] == [resolve.balanced_layout(model)] * 2


def test_planning_from_single_strategy_labels_with_attribute_profiles():
    labels = {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gb.me.all",
              "nvidia.com/gpu.count": "2", "nvidia.com/mig.strategy": "single"}
    hardware = facts.hardware_from_gfd_labels(labels, node_name="node-b")
    assert hardware["node_current"] == {"1g.24gb+me.all": 2} and len(hardware["gpus"]) == 2
    result = plan.plan_node(hardware, config_name="all-1g.24gb-me")
    assert result["feasible"] and result["gpus"][0]["target"] == {"1g.24gb-me": 4}


def _model_config_pairs():
    pairs = []
    for model in catalog.all_models():
        for pci_id in [None] + model["pci_device_ids"]:
            for config_name in resolve.named_configs([model]):
                pairs.append((model["name"], pci_id, config_name))
    return pairs


@pytest.mark.parametrize("name, pci_id, config_name", _model_config_pairs())
def test_plan_from_a_model_name_alone(name, pci_id, config_name):
    """What `mig_plan gpu_model=... gpu_count=... [pci_device_id=...] config_name=...` computes."""
    hardware = mig_plan._hardware({"gpu_info": None, "node_labels": None, "gpu_model": name, "gpu_count": 2,
                                   "pci_device_id": pci_id})
    result = plan.plan_node(hardware, config_name=config_name)
    assert result["feasible"], result["reason"]
    model = catalog.get_model(name=name)
    for gpu in result["gpus"]:
        assert gpu["model"] == name
        if config_name == "all-disabled":
            assert gpu["mig_enabled"] is False
        elif config_name == "all-balanced":
            assert gpu["target"] == resolve.balanced_layout(model)
        elif config_name != "all-enabled":
            (profile,) = gpu["target"]
            assert config_name_for(profile) == config_name
            assert gpu["target"][profile] == catalog.find_profile(model, profile)["instance_count"]
    # NVIDIA's static config: the same named config plans the same where it selects this GPU.
    static = resolve.builtin_config()["mig-configs"]
    wanted_id = pci_id or model["pci_device_id"]
    if config_name in static and any(_selects(e, wanted_id) for e in static[config_name]):
        hardware_with_id = mig_plan._hardware({"gpu_info": None, "node_labels": None, "gpu_model": name,
                                               "gpu_count": 2, "pci_device_id": wanted_id})
        from_static = plan.plan_node(hardware_with_id, config_name=config_name, config=resolve.builtin_config())
        assert from_static["feasible"], from_static["reason"]
        assert [g["target"] for g in from_static["gpus"]] == [g["target"] for g in result["gpus"]]
    else:
        assert (wanted_id, config_name) in STATIC_GAPS


@pytest.mark.parametrize("name", ["NVIDIA A100-SXM4-40GB", "NVIDIA GB300", "NVIDIA RTX PRO 6000 Blackwell Server Edition"])
def test_mig_plan_module_with_a_model_name_alone(tmp_path, name):
    """The module as Ansible runs it (arguments file, JSON out), for a model with several PCI ids and new ones."""
    args = {"gpu_model": name, "gpu_count": 2, "config_name": "all-balanced", "strategy": "mixed"}
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT]))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", "mig_plan.py"), str(path)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert result["feasible"] and not result.get("failed"), result
    layout = resolve.balanced_layout(catalog.get_model(name=name))
    assert result["expected_resources"] == dict(("nvidia.com/mig-" + k, 2 * v) for k, v in layout.items())
