"""Catalog lookups and table consistency against the reference figures."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import UnknownModelError


def test_lookup_by_name_alias_and_pci_id():
    assert catalog.get_model("NVIDIA H200")["pci_device_id"] == "0x233510DE"
    assert catalog.get_model("nvidia h200 nvl")["name"] == "NVIDIA H200"
    assert catalog.get_model(pci_device_id="0x20b0")["name"] == "NVIDIA A100-SXM4-40GB"
    assert catalog.get_model(pci_device_id=0x233510DE)["name"] == "NVIDIA H200"
    assert catalog.get_model("NVIDIA Tesla T4") is None
    with pytest.raises(UnknownModelError, match="Tesla T4"):
        catalog.require_model("NVIDIA Tesla T4")


@pytest.mark.parametrize("label, model", [
    ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA A100-SXM4-40GB"),
    ("NVIDIA-H200-MIG-INVALID", "NVIDIA H200"),
    ("NVIDIA-A30-SHARED", "NVIDIA A30"),
    ("NVIDIA-H100-NVL-MIG-1g.12gb", "NVIDIA H100 NVL"),
])
def test_model_from_gfd_product(label, model):
    assert catalog.model_from_gfd_product(label)["name"] == model


def test_gfd_product_name():
    assert gpu_labels.product_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


def test_copies_are_independent():
    model = catalog.get_model("NVIDIA H200")
    model["profiles"].clear()
    assert catalog.get_model("NVIDIA H200")["profiles"]


# Names and instance counts per model from the static mig-parted config (NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml).
STATIC_COUNTS = {
    "NVIDIA A100-SXM4-40GB": {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "NVIDIA A100-SXM4-80GB": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "NVIDIA H100 80GB HBM3": {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "NVIDIA H100 NVL": {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
    "NVIDIA H200": {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
    "NVIDIA A30": {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
    "NVIDIA B200": {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
}


@pytest.mark.parametrize("name", sorted(STATIC_COUNTS))
def test_profile_names_and_counts_match_static_config(name):
    model = catalog.get_model(name)
    assert dict((p["name"], p["instance_count"]) for p in model["profiles"]) == STATIC_COUNTS[name]
    for profile in model["profiles"]:
        assert len(profile["placements"]) >= profile["instance_count"]
        for pl in profile["placements"]:
            assert pl["start"] + pl["size"] <= model["memory_slices"]
            assert pl["size"] == profile["memory_slices"]


def test_h200_table_matches_real_lgipp():
    """ids and placements read on a real H200 (tests/fixtures/h200/nvidia-smi-mig-lgipp.txt)."""
    lgipp = {19: ((0, 1, 2, 3, 4, 5, 6), 1), 20: ((0, 1, 2, 3, 4, 5, 6), 1), 15: ((0, 2, 4, 6), 2),
             14: ((0, 2, 4), 2), 9: ((0, 4), 4), 5: ((0,), 4), 0: ((0,), 8)}
    model = catalog.get_model("NVIDIA H200")
    for profile in model["profiles"]:
        starts, size = lgipp[profile["id"]]
        assert [p["start"] for p in profile["placements"]] == list(starts)
        assert all(p["size"] == size for p in profile["placements"])
