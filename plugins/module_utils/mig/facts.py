# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Hardware facts from a node's GFD labels, for planning from the controller when NVML cannot be
read. Label meanings: NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md (base labels) and internal/lm/mig-strategy.go (per-strategy MIG labels)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError, UnknownModelError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import canonical_profile_name

# GPUs whose NVML GPU-instance profile counts are not to be trusted, by PCI device id. mig-parted
# hard-codes the A30's profile table because "NVML has a bug that reports incorrect profiles for this
# GPU" (NVIDIA/mig-parted v0.15.0 pkg/mig/discovery/discovery.go); the collection takes the counts
# from its catalog (catalog_data.py, the same table as mig-parted's) instead.
NVML_COUNTS_UNTRUSTED = {"0x20B710DE": "NVIDIA A30"}


def trusted_live_profiles(gpu):
    """One GPU's live (NVML) profile table, with instance counts from the catalog where NVML's are
    known to be wrong (NVML_COUNTS_UNTRUSTED). A corrected profile keeps NVML's figure as
    ``nvml_instance_count`` and says ``instance_count_source: catalog``; other GPUs' tables, and
    profiles the catalog lacks, are returned as they are. Returns a new list; the input is unchanged.
    """
    profiles = [dict(p) for p in (gpu.get("profiles") or [])]
    try:
        pci = catalog.normalize_pci_device_id(gpu.get("pci_device_id"))
    except PlanningError:
        return profiles
    if pci not in NVML_COUNTS_UNTRUSTED:
        return profiles
    known = catalog.get_model(pci_device_id=pci)
    for profile in profiles:
        listed = catalog.find_profile(known, profile.get("name")) if known else None
        if listed is None or profile.get("instance_count_source") == "catalog":
            continue
        profile["nvml_instance_count"] = profile.get("instance_count")
        profile["instance_count"] = listed["instance_count"]
        profile["instance_count_source"] = "catalog"
    return profiles


def hardware_from_gfd_labels(labels, allocatable=None, node_name=None):
    """hardware dict for plan.plan_node built from GFD labels (and, optionally, allocatable).

    The model and the board (NVML name, PCI device id) come from ``nvidia.com/gpu.product`` via the catalog. GPU count: ``gpu.count`` under
    strategy none/mixed; under single that label counts MIG devices, so the GPU count is estimated
    from the profile's maximum per GPU (``gpu_count_estimated: true``). MIG devices are known only
    per node (``node_current``), not per GPU. Raises UnknownModelError naming the node and product.
    """
    labels = labels or {}
    product = labels.get(gpu_labels.LABEL_PRODUCT)
    model = catalog.model_from_gfd_product(product)
    where = " on node %s" % node_name if node_name else ""
    if model is None:
        raise UnknownModelError("GPU product label %r%s is not in the built-in MIG catalog (known: %s)"
                                % (product, where, ", ".join(catalog.model_names())))
    strategy = labels.get(gpu_labels.LABEL_MIG_STRATEGY, "none")
    count_label = gpu_labels.to_int(labels.get(gpu_labels.LABEL_COUNT))
    node_current = {}
    estimated = False
    mig_enabled = False
    if strategy == "mixed":
        for profile, devices in gpu_labels.mixed_mig_counts(labels).items():
            if devices:
                node_current[canonical_profile_name(profile)] = devices
        mig_enabled = bool(node_current)
        count = count_label
    elif strategy == "single" and gpu_labels.single_mig_profile(product):
        profile = canonical_profile_name(gpu_labels.single_mig_profile(product))
        devices = count_label or 0
        node_current[profile] = devices
        info = catalog.find_profile(model, profile)
        per_gpu = (info or {}).get("instance_count") or 1
        count = int(math.ceil(devices / float(per_gpu))) if devices else None
        estimated = True
        mig_enabled = True
    else:
        count = count_label
    if count is None and allocatable:
        count = gpu_labels.to_int(allocatable.get(gpu_labels.RESOURCE_GPU))
    if count is None:
        raise UnknownModelError("cannot tell how many GPUs node%s has: no usable %s label"
                                % (" " + node_name if node_name else "", gpu_labels.LABEL_COUNT))
    if count > gpu_labels.MAX_GPUS_PER_NODE:
        raise PlanningError("node%s: %s=%d is more GPUs than a node holds (at most %d accepted)"
                            % (" " + node_name if node_name else "", gpu_labels.LABEL_COUNT, count,
                               gpu_labels.MAX_GPUS_PER_NODE))
    # The board (NVML name and PCI id) the product names: GFD writes the GPU's own NVML name, which differs
    # between boards sharing one profile table (H100 80GB HBM3 and H100 PCIe).
    board = catalog.board(name=gpu_labels.model_from_product(product)) or {}
    gpus = [{
        "index": i,
        "name": board.get("name") or model["name"],
        "pci_device_id": board.get("pci_device_id") or model["pci_device_id"],
        "mig": {"current": mig_enabled, "pending": mig_enabled},
        "instances": [],
    } for i in range(count)]
    return {
        "source": "gfd-labels",
        "node": node_name,
        "strategy": strategy,
        "gpu_count_estimated": estimated,
        "node_current": node_current,
        "gpus": gpus,
    }
