# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Every GPU NVIDIA's default MIG config names is simulated, and each simulated model is the GPU that config
describes: NVIDIA's own generator (``nvidia-mig-parted generate-config``, mig-parted v0.15.0, reading the
simulated NVML through go-nvml and naming profiles with go-nvlib) gives, for the model's PCI id, the configs
NVIDIA publishes for that id in gpu-operator v26.7.0 assets/state-mig-manager/0400_configmap.yaml (test data
in ../shared/nvidia)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

import pytest
import yaml

from tests.testbed.gpusim import hoststate

REPO = Path(__file__).resolve().parents[3]
STATIC_CONFIGMAP = REPO.parent / "shared" / "nvidia" / "gpu-operator-v26.7.0" / "assets" / "state-mig-manager" / \
    "0400_configmap.yaml"

# Where NVIDIA's generator offers a profile the published config does not list for that board, by (PCI id, config).
PUBLISHED_GAPS = {
    ("0x233B10DE", "all-1g.35gb"): "NVIDIA's file filters all-1g.35gb to the H200 141GB and GB300; the H200 NVL has none",
}

MIG_MODELS = sorted(k for k, m in hoststate.catalog()["models"].items() if m["mig_capable"])


def _published():
    # No skip: without NVIDIA's file nothing can be compared, and that is a failure.
    assert STATIC_CONFIGMAP.is_file(), "NVIDIA's default MIG ConfigMap is missing at %s" % STATIC_CONFIGMAP
    configmap = yaml.safe_load(STATIC_CONFIGMAP.read_text(encoding="utf-8"))
    return yaml.safe_load(configmap["data"]["config.yaml"])["mig-configs"]


def _filter_ids(entry):
    value = entry.get("device-filter")
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _published_for(pci_id):
    """{config name: (mig-devices, filtered)} of NVIDIA's first entry selecting a GPU with ``pci_id``
    (MIG-enabled configs; all-enabled and all-disabled are the same everywhere)."""
    out = {}
    for name, entries in _published().items():
        for entry in entries:
            ids = _filter_ids(entry)
            if entry.get("mig-enabled") and entry.get("mig-devices") and (ids is None or pci_id in ids):
                out[name] = (entry["mig-devices"], ids is not None)
                break
    return out


def test_every_device_filter_of_nvidias_default_config_is_one_simulated_model():
    published = set()
    for entries in _published().values():
        for entry in entries:
            published.update(_filter_ids(entry) or [])
    simulated = {}
    for key, model in hoststate.catalog()["models"].items():
        simulated.setdefault(model["pci_device_id"], []).append(key)
    assert len(published) == 27
    assert sorted(published - set(simulated)) == []
    assert {pci: keys for pci, keys in simulated.items() if len(keys) > 1} == {}


@pytest.mark.parametrize("model", MIG_MODELS)
def test_nvidias_generator_on_the_simulated_model_gives_nvidias_published_configs(model, sim_host, mig_parted):
    entry = hoststate.catalog()["models"][model]
    host = sim_host(model, 1)
    proc = host.run([mig_parted, "generate-config"])
    assert proc.returncode == 0, proc.stderr
    generated = yaml.safe_load(proc.stdout)["mig-configs"]
    pci_id = entry["pci_device_id"]
    published = _published_for(pci_id)
    generated_devices = {name: entries[0]["mig-devices"] for name, entries in generated.items()
                         if entries[0].get("mig-enabled") and entries[0].get("mig-devices")}
    # Every config NVIDIA publishes for this board by its PCI id, NVIDIA's generator makes the same.
    for name, (devices, filtered) in published.items():
        if filtered:
            assert generated_devices.get(name) == devices, (model, name)
    # Every config the generator makes for this board, NVIDIA publishes with the same counts.
    for name, devices in generated_devices.items():
        if (pci_id, name) in PUBLISHED_GAPS:
            assert name not in published, (model, name, "the published gap is closed: drop it from PUBLISHED_GAPS")
            continue
        assert name in published, "%s (%s): NVIDIA's generator makes %s %s, NVIDIA's file has no entry for it" % (
            model, pci_id, name, devices)
        assert published[name][0] == devices, (model, name)
    # The profile names the generator read through go-nvlib are the catalog's names.
    names = {p for devices in generated_devices.values() for p in devices}
    assert names == {p["name"][len("MIG "):] for p in entry["gi_profiles"]}, model
