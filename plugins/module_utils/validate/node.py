# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Does a GPU node's Kubernetes view agree with itself and with its hardware? (pure, no I/O)

Checks GFD labels and device-plugin allocatable per MIG strategy (NVIDIA/k8s-device-plugin
docs/gpu-feature-discovery/README.md, internal/lm/mig-strategy.go, internal/rm/rm.go) against each other
and, when the node's hardware facts are known, against them. Every problem names the label, resource or GPU it is about.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    LABEL_COUNT,
    LABEL_MEMORY,
    LABEL_MIG_STRATEGY,
    LABEL_PRODUCT,
    LABEL_SHARING_STRATEGY,
    PRODUCT_SHARED_SUFFIX,
    RESOURCE_GPU,
    devices_advertised,
    mig_count_label,
    mig_resource,
    parse_resource,
    product_label,
    resource_mig_profile,
    resource_profile,
    single_mig_product_label,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.cluster_facts import node_summary, sharing_problems


def _mig_enabled(gpu):
    """MIG mode from either our short form (mig_enabled) or gpu_info's (mig: {current, pending})."""
    if "mig_enabled" in gpu:
        return bool(gpu["mig_enabled"])
    current = (gpu.get("mig") or {}).get("current")
    return current is True or current == 1 or str(current).lower() in ("enabled", "true", "1")


def _mig_profiles(gpu):
    """One profile name per MIG device: per compute instance of each GPU instance (<C>c.<profile> when C < G)."""
    if "mig_devices" in gpu:
        return list(gpu["mig_devices"] or [])
    devices = []
    for instance in gpu.get("instances") or []:
        profile = instance.get("profile")
        if not profile:
            continue
        match = re.match(r"^(\d+)g\.", profile)
        gi_slices = int(match.group(1)) if match else None
        computes = instance.get("compute_instances")
        if computes is None:
            devices.append(profile)
            continue
        for compute in computes:
            slices = compute.get("slices")
            devices.append(profile if slices in (None, gi_slices) else "%dc.%s" % (slices, profile))
    return devices


def _memory_mib(gpu):
    for key in ("memory_mib", "memory_mb", "memory_total_mib", "memory_total_mb"):
        if gpu.get(key):
            return int(gpu[key])
    return None


def hardware_view(hardware):
    """What the hardware says, per strategy: model, memory, full GPUs, MIG devices per profile.

    Accepts ``gpu_info``'s per-GPU keys (name, mig {current}, instances [{profile}], memory) or the short
    form {name, memory_mib, mig_enabled, mig_devices: [profile, ...]}.
    """
    gpus = hardware.get("gpus") or []
    models = sorted(set(gpu.get("name") for gpu in gpus if gpu.get("name")))
    mig_devices = {}
    full_gpus = 0
    mig_enabled = 0
    for gpu in gpus:
        if _mig_enabled(gpu):
            mig_enabled += 1
            for profile in _mig_profiles(gpu):
                key = resource_profile(profile)
                mig_devices[key] = mig_devices.get(key, 0) + 1
        else:
            full_gpus += 1
    memory = sorted(set(_memory_mib(gpu) for gpu in gpus if _memory_mib(gpu)))
    return {"count": len(gpus), "models": models, "memory_mib": memory, "full_gpus": full_gpus,
            "mig_enabled_gpus": mig_enabled, "mig_devices": mig_devices}


def _label_vs_allocatable(summary, strategy, problems):
    labels = summary["labels"]
    # Devices behind the resources: time-sliced/MPS shares (maybe renamed .shared) divided by their replicas.
    allocatable = devices_advertised(summary["allocatable"], labels)
    total = sum(summary["allocatable"].values())
    label_count = summary["count"]
    if LABEL_PRODUCT not in labels:
        problems.append("label %s missing (gpu-feature-discovery has not labelled the node)" % LABEL_PRODUCT)
    if strategy in ("single", "mixed") and labels.get(LABEL_MIG_STRATEGY) != strategy:
        problems.append("label %s is %r, ClusterPolicy says %s" % (LABEL_MIG_STRATEGY, labels.get(LABEL_MIG_STRATEGY), strategy))
    if summary["mig_invalid"]:
        problems.append("label %s=%s: GFD found a MIG layout the single strategy cannot advertise"
                        % (LABEL_PRODUCT, summary["product_label"]))
    problems.extend(sharing_problems(summary))
    if total == 0:
        problems.append("device plugin advertises 0 GPU resources (allocatable has no nvidia.com/gpu or nvidia.com/mig-*)")
    if strategy == "mixed":
        for profile, count in sorted(summary["mig_devices"].items()):
            advertised = allocatable.get(mig_resource(profile), 0)
            if advertised != count:
                problems.append("label %s=%d but allocatable %s=%d"
                                % (mig_count_label(profile), count, mig_resource(profile), advertised))
        for resource, advertised in sorted(allocatable.items()):
            # A resource no longer advertised stays in the node status at 0 (kubelet keeps extended resources).
            profile = resource_mig_profile(resource)
            if advertised and profile and profile not in summary["mig_devices"]:
                problems.append("allocatable %s=%d has no %s label" % (resource, advertised, mig_count_label(profile)))
    elif label_count is not None and allocatable.get(RESOURCE_GPU, 0) != label_count and not summary["mig_invalid"]:
        problems.append("label %s=%d but allocatable %s=%d" % (LABEL_COUNT, label_count, RESOURCE_GPU, allocatable.get(RESOURCE_GPU, 0)))


def _product_without_sharing(summary):
    """The product label as the hardware gives it: GFD's -SHARED suffix (time-slicing/MPS) removed."""
    product = summary["product_label"] or ""
    return product[:-len(PRODUCT_SHARED_SUFFIX)] if summary["product_shared"] else product


def _labels_vs_hardware(summary, strategy, hardware, problems):
    view = hardware_view(hardware)
    labels = summary["labels"]
    allocatable = devices_advertised(summary["allocatable"], labels)
    if not view["count"]:
        problems.append("hardware reports no GPU")
        return view
    if summary["sharing_strategy"] == "mps" and view["mig_enabled_gpus"]:
        # NVIDIA's GFD exits before labelling (internal/lm/nvml.go isMPSCapable) and the device plugin refuses MIG
        # devices under MPS (internal/plugin/mps.go): the node's labels are what GFD wrote before MIG was enabled.
        problems.append("label %s=mps but %d GPU(s) are in MIG mode: MPS sharing is not supported on MIG-enabled GPUs "
                        "(GFD and the device plugin refuse; the node's labels are stale)"
                        % (LABEL_SHARING_STRATEGY, view["mig_enabled_gpus"]))
    if len(view["models"]) == 1:
        expected = product_label(view["models"][0])
        if summary["model"] and summary["model"] != expected:
            problems.append("label %s=%s but the hardware is %s" % (LABEL_PRODUCT, summary["product_label"], view["models"][0]))
    single_mig = strategy == "single" and view["mig_enabled_gpus"] > 0
    if not single_mig:
        if summary["count"] is not None and summary["count"] != view["count"]:
            problems.append("label %s=%s but the hardware has %d GPUs" % (LABEL_COUNT, summary["count"], view["count"]))
        if len(view["memory_mib"]) == 1 and summary["memory_mb"] is not None and summary["memory_mb"] != view["memory_mib"][0]:
            problems.append("label %s=%s but the hardware has %d MiB per GPU" % (LABEL_MEMORY, summary["memory_mb"], view["memory_mib"][0]))
    if strategy == "mixed":
        if allocatable.get(RESOURCE_GPU, 0) != view["full_gpus"]:
            problems.append("allocatable %s=%d but the hardware has %d GPUs without MIG"
                            % (RESOURCE_GPU, allocatable.get(RESOURCE_GPU, 0), view["full_gpus"]))
        for profile in sorted(set(view["mig_devices"]) | set(summary["mig_devices"])):
            want = view["mig_devices"].get(profile, 0)
            have = summary["mig_devices"].get(profile, 0)
            if want != have:
                problems.append("label %s=%d but the hardware has %d %s MIG devices" % (mig_count_label(profile), have, want, profile))
    elif single_mig:
        profiles = sorted(view["mig_devices"])
        if len(profiles) == 1 and view["full_gpus"] == 0:
            expected = single_mig_product_label(view["models"][0] if len(view["models"]) == 1 else "?", profiles[0])
            if _product_without_sharing(summary) != expected:
                problems.append("label %s=%s but the hardware's MIG layout gives %s" % (LABEL_PRODUCT, summary["product_label"], expected))
            if allocatable.get(RESOURCE_GPU, 0) != view["mig_devices"][profiles[0]]:
                problems.append("allocatable %s=%d but the hardware has %d %s MIG devices"
                                % (RESOURCE_GPU, allocatable.get(RESOURCE_GPU, 0), view["mig_devices"][profiles[0]], profiles[0]))
        else:
            problems.append("MIG layout %s (with %d GPUs without MIG) cannot be advertised under the single strategy"
                            % (view["mig_devices"], view["full_gpus"]))
    elif allocatable.get(RESOURCE_GPU, 0) != view["count"]:
        problems.append("allocatable %s=%d but the hardware has %d GPUs" % (RESOURCE_GPU, allocatable.get(RESOURCE_GPU, 0), view["count"]))
    return view


def validate_node(node, strategy, hardware=None, operands=None):
    """Problems of one GPU node (empty list = healthy) and the resources a smoke test should request.

    ``operands``: {operand: 'ready' | reason} from operator_status.node_report.
    ``hardware``: {'gpus': [{'name', 'memory_mib', 'mig_enabled', 'mig_devices': [profile, ...]}]} or None.
    """
    summary = node_summary(node)
    problems = []
    for operand, status in sorted((operands or {}).items()):
        if status != "ready":
            problems.append("operand %s: %s" % (operand, status))
    _label_vs_allocatable(summary, strategy, problems)
    if hardware is not None:
        _labels_vs_hardware(summary, strategy, hardware, problems)
    smoke = sorted(resource for resource, count in summary["allocatable"].items() if count > 0)
    if strategy != "mixed":
        smoke = [resource for resource in smoke if parse_resource(resource)["kind"] == "gpu"]
    return {"node": summary["node_name"], "problems": problems, "smoke_resources": smoke, "summary": summary}
