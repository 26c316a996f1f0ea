# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Built-in MIG profile tables per GPU model, for planning where NVML cannot be read.

A live table from NVML (gpu_info) always wins over this catalog (see plan.py). Data and sources:
catalog_data.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pickle
import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog_data
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError, UnknownModelError

NVIDIA_VENDOR_ID = "10DE"


def normalize_pci_device_id(value):
    """``0x233510de`` / ``0x2335`` / 0x233510DE (int) -> ``0x233510DE`` (device then vendor, NVIDIA/mig-parted pkg/types/device.go)."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        text = "%08X" % value
    else:
        text = str(value).strip().upper()
        if text.startswith("0X"):
            text = text[2:]
        text = text.split(":", 1)[0]
    if not re.match(r"^[0-9A-F]{4}([0-9A-F]{4})?$", text):
        raise PlanningError("'%s' is not a PCI device id: expected 0xDDDDVVVV, e.g. 0x233510DE" % (value,))
    if len(text) == 4:
        text += NVIDIA_VENDOR_ID
    return "0x" + text


def _name_key(name):
    """Compare names ignoring case, punctuation, spaces and a leading NVIDIA."""
    key = re.sub(r"[^A-Z0-9]", "", str(name).upper())
    return key[len("NVIDIA"):] if key.startswith("NVIDIA") else key


def _build_profiles(entry):
    layout = catalog_data.LAYOUTS[entry["layout"]]
    profiles = []
    for kind, index, profile_id, slices, memory_slices, count, starts in layout:
        engines = entry.get("engines", {}).get(kind) or (None,) * 5
        profiles.append({
            "name": entry["names"][kind],
            "id": profile_id,
            "index": index,
            "slices": slices,
            "memory_slices": memory_slices,
            "instance_count": count,
            "multiprocessors": entry.get("sms", {}).get(kind),
            "memory_mb": entry.get("profile_memory_mb", {}).get(kind),
            "copy_engines": engines[0],
            "decoders": engines[1],
            "encoders": engines[2],
            "jpegs": engines[3],
            "ofas": engines[4],
            "placements": [{"start": s, "size": memory_slices} for s in starts],
        })
    return profiles


def _build_model(entry):
    seven = entry["layout"] == "seven"
    boards = [{"name": name, "pci_device_id": pci} for name, pci in entry["boards"]]
    pci_ids = []
    for board in boards:
        if board["pci_device_id"] and board["pci_device_id"] not in pci_ids:
            pci_ids.append(board["pci_device_id"])
    model = {
        "name": entry["name"],
        "aliases": sorted(set(b["name"] for b in boards) - {entry["name"]}),
        "boards": boards,
        "pci_device_id": pci_ids[0],
        "pci_device_ids": pci_ids,
        "memory_mb": entry["memory_mb"],
        "memory_slices": 8 if seven else 4,
        "compute_slices": 7 if seven else 4,
        "mig_capable": True,
        "source": "catalog",
        "profiles": _build_profiles(entry),
    }
    if entry.get("placements_source"):
        model["placements_source"] = entry["placements_source"]
    return model


_MODELS = tuple(_build_model(entry) for entry in catalog_data.MODELS)


def all_models():
    """Every catalog model (deep copies, safe to modify), in catalog order."""
    return plain_copy(list(_MODELS))


def model_names():
    return [m["name"] for m in _MODELS]


_BY_NAME_KEY = {}  # _name_key of every name and alias -> model, built on first use


def plain_copy(data):
    """A deep copy of plain data (dicts, lists, scalars): a pickle round trip, several times faster than
    deepcopy, which dominated planning many nodes (each node's model and config copied)."""
    return pickle.loads(pickle.dumps(data, pickle.HIGHEST_PROTOCOL))


def get_model(name=None, pci_device_id=None):
    """The catalog model for an NVML name (or alias) or a PCI device id; None when unknown.

    The PCI id wins when both are given and it is known (names vary by board and driver).
    """
    if pci_device_id:
        wanted = normalize_pci_device_id(pci_device_id)
        for model in _MODELS:
            if wanted in model["pci_device_ids"]:
                return plain_copy(model)
    if name:
        key = _name_key(name)
        if not _BY_NAME_KEY:
            for model in reversed(_MODELS):  # the first model of the catalog wins, as a scan in order would
                _BY_NAME_KEY.update((_name_key(n), model) for n in [model["name"]] + model["aliases"])
        if key in _BY_NAME_KEY:
            return plain_copy(_BY_NAME_KEY[key])
    return None


def board(name=None, pci_device_id=None):
    """{'name', 'pci_device_id'} of the catalog board a GPU is, or None: the board whose NVML name matches
    ``name`` (ignoring case, punctuation and spaces, so a GFD product's model part matches too), else the
    board with that PCI device id. A board's name is the NVML name GFD builds ``nvidia.com/gpu.product`` from."""
    boards = [b for model in _MODELS for b in model["boards"]]
    if name:
        key = _name_key(name)
        for item in boards:
            if _name_key(item["name"]) == key:
                return dict(item)
    if pci_device_id:
        wanted = normalize_pci_device_id(pci_device_id)
        for item in boards:
            if item["pci_device_id"] == wanted:
                return dict(item)
    return None


def nvml_name(name=None, pci_device_id=None):
    """The NVML name of a GPU given by name and/or PCI id: the catalog board's spelling of ``name`` when it is a
    known board, else ``name`` as given (a live NVML read is the truth), else the board of the PCI id; None when
    neither says."""
    found = board(name=name, pci_device_id=None if name else pci_device_id)
    if found:
        return found["name"]
    return name or None


def require_model(name=None, pci_device_id=None):
    """Like get_model but raises UnknownModelError naming the GPU and the models known."""
    model = get_model(name=name, pci_device_id=pci_device_id)
    if model is None:
        what = " ".join(x for x in (
            "'%s'" % name if name else "",
            "(PCI device id %s)" % pci_device_id if pci_device_id else "") if x)
        raise UnknownModelError(
            "GPU %s is not in the built-in MIG catalog (known: %s); read its profile table with "
            "gpu_info on the host instead" % (what or "<unnamed>", ", ".join(model_names()))
        )
    return model


def model_from_gfd_product(product_label):
    """Catalog model for a GFD ``nvidia.com/gpu.product`` label, or None.

    GFD writes the NVML name with whitespace turned into ``-`` and may append ``-MIG-<profile>``
    (single strategy), ``-MIG-INVALID`` or ``-SHARED`` (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go, resource.go).
    """
    base = gpu_labels.model_from_product(product_label)
    return get_model(name=base) if base else None


def find_profile(model, profile_name):
    """The profile dict named ``profile_name`` in a model (or live) table, or None."""
    for profile in model.get("profiles", []):
        if profile["name"] == profile_name:
            return profile
    return None
