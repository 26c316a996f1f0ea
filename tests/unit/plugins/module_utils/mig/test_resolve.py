"""Named configs: static, generated (MIG Manager >= v0.14) and resolution errors."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, migparted, resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import (
    UnknownConfigError,
    UnknownProfileError,
)

# all-balanced per model (NVIDIA/gpu-operator v26.7.0 assets/state-mig-manager/0400_configmap.yaml L358-465)
BALANCED = {
    "NVIDIA A100-SXM4-40GB": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    "NVIDIA A100-SXM4-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "NVIDIA H100 80GB HBM3": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "NVIDIA H100 NVL": {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
    "NVIDIA H200": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    "NVIDIA A30": {"1g.6gb": 2, "2g.12gb": 1},
    "NVIDIA B200": {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
}


@pytest.mark.parametrize("name", sorted(BALANCED))
def test_all_balanced_matches_reference(name):
    model = catalog.get_model(name)
    assert resolve.balanced_layout(model) == BALANCED[name]
    gpus = [{"index": 0, "name": name, "pci_device_id": model["pci_device_id"]}]
    for source in (None, resolve.builtin_config()):
        (target,) = resolve.resolve("all-balanced", gpus, config=source)
        assert target["mig_devices"] == BALANCED[name] and target["mig_enabled"] and target["selected"]


def test_builtin_config_is_valid_and_has_reference_counts():
    config = migparted.parse_config(resolve.builtin_config(), "builtin")
    configs = config["mig-configs"]
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    # all-1g.10gb: 80GB-class -> 7, A100-40GB -> 4 (same file)
    by_filter = dict((tuple(e["device-filter"]) if isinstance(e["device-filter"], list) else (e["device-filter"],),
                      e["mig-devices"]) for e in configs["all-1g.10gb"])
    # NVIDIA's static config groups the 80GB class (H100-80GB and A100-80GB ids) in one filter.
    (h100,) = [v for k, v in by_filter.items() if set(catalog.get_model("NVIDIA H100 80GB HBM3")["pci_device_ids"]) <= set(k)]
    (a100,) = [v for k, v in by_filter.items() if set(catalog.get_model("NVIDIA A100-SXM4-40GB")["pci_device_ids"]) <= set(k)]
    assert h100 == {"1g.10gb": 7} and a100 == {"1g.10gb": 4}
    assert "all-1g.18gb.me" in configs and "all-2g.12gb.me" in configs
    assert configs["all-1g.5gb.me"][0]["mig-devices"] == {"1g.5gb+me": 1}


def test_generated_config_single_model_has_no_filter():
    model = catalog.get_model("NVIDIA H200")
    generated = resolve.generate_config([dict(model, pci_device_ids=["0x233510DE"])])
    assert all("device-filter" not in e for entries in generated["mig-configs"].values() for e in entries)
    assert generated["mig-configs"]["all-1g.18gb"][0]["mig-devices"] == {"1g.18gb": 7}
    assert sorted(generated["mig-configs"]) == [
        "all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb",
        "all-7g.141gb", "all-balanced", "all-disabled", "all-enabled"]


def test_generated_config_two_models_filters_by_device():
    models = [catalog.get_model("NVIDIA H200"), catalog.get_model("NVIDIA A30")]
    generated = resolve.generate_config(models)
    assert all("device-filter" in e for e in generated["mig-configs"]["all-balanced"])
    assert len(generated["mig-configs"]["all-balanced"]) == 2


def test_named_configs():
    names = resolve.named_configs([catalog.get_model("NVIDIA A30")])
    assert names == sorted(["all-disabled", "all-enabled", "all-balanced", "all-1g.6gb", "all-1g.6gb.me",
                            "all-2g.12gb", "all-2g.12gb.me", "all-4g.24gb"])
    assert "all-7g.141gb" in resolve.named_configs()


def test_wrong_profile_for_model_names_alternatives():
    gpus = [{"index": 0, "name": "NVIDIA H200", "pci_device_id": "0x233510DE"}]
    for config in (None, resolve.builtin_config()):
        with pytest.raises(UnknownProfileError) as err:
            resolve.resolve("all-1g.10gb", gpus, config=config)
        assert str(err.value) == ("1g.10gb is not a profile of NVIDIA H200 (GPU 0); its 1-slice profiles are "
                                  "1g.18gb, 1g.18gb+me, 1g.35gb")
        assert err.value.alternatives == ["1g.18gb", "1g.18gb+me", "1g.35gb"]


def test_unknown_config_names_source_and_suggests():
    gpus = [{"index": 0, "name": "NVIDIA H200", "pci_device_id": "0x233510DE"}]
    with pytest.raises(UnknownConfigError) as err:
        resolve.resolve("all-balance", gpus)
    assert "all-balance" in str(err.value) and "generated" in str(err.value) and "all-balanced" in str(err.value)
    custom = {"version": "v1", "mig-configs": {"mine": [{"devices": "all", "mig-enabled": False}]}}
    with pytest.raises(UnknownConfigError, match="'theirs' is not defined in cm/custom-mig"):
        resolve.resolve("theirs", gpus, config=custom, source="cm/custom-mig")


def test_custom_config_profile_checked_against_model():
    gpus = [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B210DE"}]
    custom = {"version": "v1", "mig-configs": {"mine": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"2g.10gb": 3}}]}}
    with pytest.raises(UnknownProfileError, match="2g.10gb is not a profile of NVIDIA A100-SXM4-80GB.*2g.20gb"):
        resolve.resolve("mine", gpus, config=custom)


def test_unselected_gpu_is_reported():
    gpus = [{"index": 0, "name": "NVIDIA H200", "pci_device_id": "0x233510DE"},
            {"index": 1, "name": "NVIDIA H200", "pci_device_id": "0x233510DE"}]
    custom = {"version": "v1", "mig-configs": {"mine": [
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.18gb+me": 1}}]}}
    result = resolve.resolve("mine", gpus, config=custom)
    assert result[0]["selected"] is False
    assert result[1]["mig_devices"] == {"1g.18gb+me": 1}
