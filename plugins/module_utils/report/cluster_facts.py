# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What one Kubernetes node says about its GPUs, read from labels and status only (no I/O).

Used by the ``gpu_nodes`` inventory plugin and the ``gpu_cluster_facts`` module. Label names are
those of GPU Feature Discovery, the GPU Operator and MIG Manager (reference
nvidia-gpu-operator-and-mig.md §3.5, §3.7, §6).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from kubernetes.utils import parse_quantity
except ImportError:  # pragma: no cover - the inventory plugin and the modules check for the client themselves
    parse_quantity = None

NVIDIA = "nvidia.com/"
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"  # set by the operator on nodes with an NVIDIA PCI device (§3.7)
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_STATE = "nvidia.com/mig.config.state"
LABEL_DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_VALUE = "paused-for-mig-change"  # MIG Manager's pause value for operand deploy labels (§3.5)
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"
# Mixed strategy: nvidia.com/mig-<profile>.count per MIG device type (§6.2).
_MIXED_COUNT = re.compile(r"^nvidia\.com/mig-(?P<profile>.+)\.count$")
# Product label suffixes GFD appends: -MIG-<profile> under single, -SHARED with replicas (§6.1, §6.2).
_PRODUCT_SUFFIX = re.compile(r"(-MIG-.*|-SHARED)$")


def _int(value, default=None):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _quantity(value):
    """A Kubernetes quantity as an int (kubernetes.utils.parse_quantity: "2", "1k", "2e3"); extended resources
    (nvidia.com/*) are whole numbers, so a fraction is cut and anything unreadable is reported as 0."""
    if parse_quantity is None:
        return _int(value, 0)
    try:
        return int(parse_quantity(value))
    except (TypeError, ValueError, ArithmeticError):
        return 0


def gpu_resources(resources):
    """The nvidia.com/gpu and nvidia.com/mig-* entries of a capacity/allocatable/requests map, as ints."""
    result = {}
    for name, value in (resources or {}).items():
        if name == RESOURCE_GPU or name.startswith(RESOURCE_MIG_PREFIX):
            result[name] = _quantity(value)
    return result


def model_from_product_label(product):
    """GFD's sanitised product label without the MIG/SHARED suffix, e.g. NVIDIA-H100-80GB-HBM3."""
    if not product:
        return None
    return _PRODUCT_SUFFIX.sub("", product) or None


def mixed_mig_devices(labels):
    """{profile: count} from mixed-strategy labels (profile names as in the resource, '+' already '.')."""
    devices = {}
    for key, value in labels.items():
        match = _MIXED_COUNT.match(key)
        if match:
            devices[match.group("profile")] = _int(value, 0)
    return devices


def single_mig_profile(product):
    """The MIG profile named by a single-strategy product label (<model>-MIG-<profile>), else None."""
    if product and "-MIG-" in product:
        return product.split("-MIG-", 1)[1] or None
    return None


def node_condition(node, kind):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def is_gpu_node(node):
    """A node the GPU Operator would manage: labelled gpu.present, labelled by GFD, or advertising GPUs."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_GPU_PRESENT) == "true" or LABEL_PRODUCT in labels:
        return True
    return bool(gpu_resources((node.get("status") or {}).get("capacity")))


def node_summary(node):
    """Flat GPU facts of one node (a dict as the API returns it: the JSON object).

    Keys are stable: the inventory plugin exposes them as host vars with a ``gpu_`` prefix and the
    cluster report embeds them per node.
    """
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    labels = metadata.get("labels") or {}
    product = labels.get(LABEL_PRODUCT)
    strategy = labels.get(LABEL_MIG_STRATEGY) or "none"
    ready = node_condition(node, "Ready")
    deploy = dict((k[len(DEPLOY_PREFIX):], v) for k, v in labels.items() if k.startswith(DEPLOY_PREFIX))
    mig_devices = mixed_mig_devices(labels)
    single_profile = single_mig_profile(product)
    if strategy == "single" and single_profile and not mig_devices:
        mig_devices = {single_profile: _int(labels.get(LABEL_COUNT), 0)}
    return {
        "node_name": metadata.get("name"),
        "model": model_from_product_label(product),
        "product_label": product,
        "count": _int(labels.get(LABEL_COUNT)),
        "memory_mb": _int(labels.get(LABEL_MEMORY)),
        "family": labels.get(LABEL_FAMILY),
        "driver_version": labels.get(LABEL_DRIVER_VERSION),
        "mig_capable": labels.get(LABEL_MIG_CAPABLE) == "true",
        "mig_strategy": strategy,
        "mig_config": labels.get(LABEL_MIG_CONFIG),
        "mig_config_state": labels.get(LABEL_MIG_STATE),
        "mig_invalid": bool(product and product.endswith("-MIG-INVALID")),
        "mig_devices": mig_devices,
        "deploy_labels": deploy,
        "deploy_paused": sorted(k for k, v in deploy.items() if v == PAUSED_VALUE),
        "capacity": gpu_resources(status.get("capacity")),
        "allocatable": gpu_resources(status.get("allocatable")),
        "ready": bool(ready and ready.get("status") == "True"),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "labels": dict((k, v) for k, v in labels.items() if k.startswith(NVIDIA)),
    }


def group_safe(value):
    """A fragment usable in an Ansible group name: lower case, [a-z0-9_] only."""
    text = re.sub(r"[^A-Za-z0-9]+", "_", str(value)).strip("_").lower()
    return text or "unknown"
