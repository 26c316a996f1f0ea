# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What one Kubernetes node says about its GPUs, read from labels and status only (no I/O).

Used by the ``gpu_nodes`` inventory plugin and the ``gpu_cluster_info`` module. Label names are
those of GPU Feature Discovery, the GPU Operator and MIG Manager (NVIDIA/k8s-device-plugin
docs/gpu-feature-discovery/README.md, NVIDIA/gpu-operator controllers/state_manager.go, NVIDIA/mig-parted
pkg/mig/reconfigure/reconfigure.go).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    LABEL_COUNT,
    LABEL_DRIVER_VERSION,
    LABEL_FAMILY,
    LABEL_MEMORY,
    LABEL_MIG_CAPABLE,
    LABEL_MIG_CONFIG,
    LABEL_MIG_STATE,
    LABEL_MIG_STRATEGY,
    LABEL_PRODUCT,
    LABEL_REPLICAS,
    LABEL_SHARING_STRATEGY,
    PAUSED_VALUE,
    deploy_labels,
    mixed_mig_counts,
    node_gpu_allocatable,
    node_gpu_capacity,
    node_ready,
    nvidia_labels,
    parse_product,
    parse_resource,
    replicas,
    to_int,
    unschedulable,
)


def node_summary(node):
    """Flat GPU facts of one node (a dict as the API returns it: the JSON object).

    Keys are stable: the inventory plugin exposes them as host vars with a ``gpu_`` prefix and the
    cluster report embeds them per node.
    """
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    product = labels.get(LABEL_PRODUCT)
    parsed = parse_product(product)
    strategy = labels.get(LABEL_MIG_STRATEGY) or "none"
    deploy = deploy_labels(labels)
    mig_devices = mixed_mig_counts(labels)
    if strategy == "single" and parsed["mig_profile"] and not mig_devices:
        mig_devices = {parsed["mig_profile"]: to_int(labels.get(LABEL_COUNT), 0)}
    return {
        "node_name": metadata.get("name"),
        "model": parsed["model"],
        "product_label": product,
        "count": to_int(labels.get(LABEL_COUNT)),
        "memory_mb": to_int(labels.get(LABEL_MEMORY)),
        "family": labels.get(LABEL_FAMILY),
        "driver_version": labels.get(LABEL_DRIVER_VERSION),
        "mig_capable": labels.get(LABEL_MIG_CAPABLE) == "true",
        "mig_strategy": strategy,
        "mig_config": labels.get(LABEL_MIG_CONFIG),
        "mig_config_state": labels.get(LABEL_MIG_STATE),
        "mig_invalid": parsed["mig_invalid"],
        # Time-slicing / MPS as GFD labels it (NVIDIA/k8s-device-plugin internal/lm/resource.go): shares per
        # device (1 = not shared), the strategy, and whether the product carries GFD's -SHARED suffix.
        "replicas": replicas(labels),
        "sharing_strategy": labels.get(LABEL_SHARING_STRATEGY) or "none",
        "product_shared": parsed["shared"],
        "mig_devices": mig_devices,
        "deploy_labels": deploy,
        "deploy_paused": sorted(k for k, v in deploy.items() if v == PAUSED_VALUE),
        "capacity": node_gpu_capacity(node),
        "allocatable": node_gpu_allocatable(node),
        "ready": node_ready(node),
        "unschedulable": unschedulable(node),
        "labels": nvidia_labels(labels),
    }


def sharing_problems(summary):
    """Where GFD's time-slicing/MPS labels disagree with each other or with allocatable ([] = consistent; never raises).

    NVIDIA/k8s-device-plugin internal/lm/resource.go: ``<resource>.replicas`` > 1 goes with ``sharing-strategy``
    time-slicing or mps, and ``-SHARED`` ends the product of a shared resource that keeps its name; the device
    plugin advertises ``<resource>.shared`` with renameByDefault."""
    labels = summary.get("labels") or {}
    shares = summary.get("replicas") or 1
    strategy = summary.get("sharing_strategy") or "none"
    problems = []
    if shares > 1 and strategy not in ("time-slicing", "mps"):
        problems.append("label %s=%d but %s is %r (time-slicing or mps expected)" % (LABEL_REPLICAS, shares, LABEL_SHARING_STRATEGY, strategy))
    if shares <= 1 and strategy in ("time-slicing", "mps"):
        problems.append("label %s=%s but %s is %r (more than 1 expected)"
                        % (LABEL_SHARING_STRATEGY, strategy, LABEL_REPLICAS, labels.get(LABEL_REPLICAS)))
    if summary.get("product_shared") and shares <= 1:
        problems.append("label %s=%s says shared but %s is %r"
                        % (LABEL_PRODUCT, summary.get("product_label"), LABEL_REPLICAS, labels.get(LABEL_REPLICAS)))
    for resource, count in sorted((summary.get("allocatable") or {}).items()):
        parsed = parse_resource(resource)
        if count and parsed and parsed["shared"] and replicas(labels, parsed["base"]) <= 1:
            problems.append("allocatable %s=%d is a shared resource but label %s.replicas is %r"
                            % (resource, count, parsed["base"], labels.get(parsed["base"] + ".replicas")))
    return problems


def group_safe(value):
    """A fragment usable in an Ansible group name: lower case, [a-z0-9_] only."""
    text = re.sub(r"[^A-Za-z0-9]+", "_", str(value)).strip("_").lower()
    return text or "unknown"
