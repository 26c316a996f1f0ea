# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The GPU vocabulary of Kubernetes objects: NVIDIA's label and resource names and how to read them.

The one place in the collection that knows label names, resource names, GPU Feature Discovery's product
label forms, and how a pod's or a node's GPU resources are counted. Pure functions over objects as the
API returns them (decoded JSON); nothing here raises on malformed labels or quantities.

Sources (NVIDIA's public documentation and source):

- Labels set by GPU Feature Discovery (``nvidia.com/gpu.product``, ``gpu.count``, ``gpu.replicas``,
  ``gpu.sharing-strategy``, ``mig.strategy``, ``mig-<profile>.count``, the ``-MIG-<profile>``,
  ``-MIG-INVALID`` and ``-SHARED`` product forms):
  https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/README.md
- Resource names (``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``) per MIG strategy, and time-slicing /
  MPS sharing, where ``renameByDefault`` advertises ``<resource>.shared`` and GFD appends ``-SHARED`` to the
  product of a shared resource that keeps its name: https://github.com/NVIDIA/k8s-device-plugin#shared-access-to-gpus
  and https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html
- Labels of the GPU Operator and MIG Manager (``gpu.present``, ``gpu.deploy.<operand>``, ``mig.config``,
  ``mig.config.state``, the pause value ``paused-for-mig-change``):
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html and
  https://github.com/NVIDIA/mig-parted/blob/main/deployments/gpu-operator/reconfigure-mig.sh
- How Kubernetes counts a pod's requests (containers summed, init containers as the largest, sidecar init
  containers with the app containers): https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

VENDOR_PREFIX = "nvidia.com/"

# -- node labels -------------------------------------------------------------------------------------------
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"  # set by the GPU Operator on nodes with an NVIDIA PCI device
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
# The most GPUs a node is taken to hold when a label or a resource count says how many (HGX and DGX boards carry
# 8, the largest 16): a count past it is a broken label, named in one line, never a list built that long.
MAX_GPUS_PER_NODE = 64
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_FAMILY = "nvidia.com/gpu.family"
LABEL_DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_STATE = "nvidia.com/mig.config.state"
LABEL_DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_VALUE = "paused-for-mig-change"  # MIG Manager's value for deploy labels while it changes MIG

# -- resources -------------------------------------------------------------------------------------------
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"  # time-slicing / MPS with renameByDefault: nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared
RESOURCE_GPU_SHARED = RESOURCE_GPU + SHARED_SUFFIX
# A renamed resource keeps the vendor prefix and the kind (nvidia.com/gpu.<name>, nvidia.com/mig-...).
GPU_RESOURCE_PREFIXES = (RESOURCE_GPU, RESOURCE_MIG_PREFIX)
GPU_RUNTIME_CLASSES = ("nvidia",)  # the GPU Operator's RuntimeClass
GPU_TAINT_KEY = RESOURCE_GPU  # the taint key GPU nodes commonly carry (nvidia.com/gpu:NoSchedule)

# -- product label forms -----------------------------------------------------------------------------------
PRODUCT_MIG_INFIX = "-MIG-"
PRODUCT_SHARED_SUFFIX = "-SHARED"
PRODUCT_MIG_INVALID = "INVALID"

_MIXED_COUNT = re.compile(r"^nvidia\.com/mig-(?P<profile>.+)\.count$")
_PRODUCT_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")


# -- names ---------------------------------------------------------------------------------------------------

def resource_profile(profile):
    """A MIG profile as resource and label names write it: ``1g.10gb+me`` -> ``1g.10gb.me``."""
    return str(profile).replace("+", ".")


def mig_resource(profile, shared=False):
    """``nvidia.com/mig-<profile>`` (``.shared`` appended when renamed by sharing)."""
    return RESOURCE_MIG_PREFIX + resource_profile(profile) + (SHARED_SUFFIX if shared else "")


def mig_count_label(profile):
    """Mixed strategy's per-profile count label ``nvidia.com/mig-<profile>.count``."""
    return RESOURCE_MIG_PREFIX + resource_profile(profile) + ".count"


def deploy_label(operand):
    """``nvidia.com/gpu.deploy.<operand>``."""
    return DEPLOY_LABEL_PREFIX + operand


def short_resource_name(name):
    """A resource name without the vendor prefix, for tables: ``nvidia.com/mig-1g.10gb`` -> ``mig-1g.10gb``."""
    text = str(name)
    return text[len(VENDOR_PREFIX):] if text.startswith(VENDOR_PREFIX) else text


def is_gpu_resource(name):
    """``nvidia.com/gpu``, its shared/renamed forms (``nvidia.com/gpu.shared``) and ``nvidia.com/mig-*``."""
    return isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIXES)


def parse_resource(name):
    """{'kind': 'gpu'|'mig', 'profile': MIG profile (resource form) or None, 'shared': bool, 'base': name
    without ``.shared``} of a GPU resource name, or None when it is not one."""
    if not is_gpu_resource(name):
        return None
    shared = name.endswith(SHARED_SUFFIX)
    base = name[:-len(SHARED_SUFFIX)] if shared else name
    if base.startswith(RESOURCE_MIG_PREFIX):
        profile = base[len(RESOURCE_MIG_PREFIX):]
        return {"kind": "mig", "profile": profile or None, "shared": shared, "base": base}
    return {"kind": "gpu", "profile": None, "shared": shared, "base": base}


def resource_mig_profile(name):
    """The MIG profile a resource name carries (``nvidia.com/mig-1g.10gb.shared`` -> ``1g.10gb``), else None."""
    parsed = parse_resource(name)
    return parsed["profile"] if parsed and parsed["kind"] == "mig" else None


# -- quantities ----------------------------------------------------------------------------------------------

def to_int(value, default=None):
    """An int from a label value or quantity, or ``default`` when it is not a whole number."""
    if isinstance(value, bool):
        return default
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def quantity(value):
    """A Kubernetes quantity as an int (kubernetes.utils.parse_quantity: "2", "1k", "2e3"); extended resources
    (nvidia.com/*) are whole numbers, so a fraction is cut and anything unreadable counts as 0."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    # Imported here, not at the top: gpu_info on each GPU host reaches this file through mig.facts, and the
    # client's import is 0.28 s of its run (1000 hosts per validation).
    try:
        from kubernetes.utils import parse_quantity
    except ImportError:  # pragma: no cover - the modules and the inventory plugin check for the client themselves
        return to_int(value, 0)
    try:
        return int(parse_quantity(value))
    except (TypeError, ValueError, ArithmeticError):
        return 0


def gpu_resources(resources, keep_zero=True):
    """The GPU entries of a capacity/allocatable/requests map, as ints (zero entries kept unless asked)."""
    result = {}
    for name, value in (resources or {}).items():
        if is_gpu_resource(name):
            count = quantity(value)
            if count or keep_zero:
                result[name] = count
    return result


# -- product label -------------------------------------------------------------------------------------------

def product_label(model_name):
    """The ``nvidia.com/gpu.product`` value GFD derives from an NVML name: characters outside
    ``[A-Za-z0-9-_. ]`` dropped, whitespace runs turned into ``-``."""
    return re.sub(r"\s+", "-", _PRODUCT_UNSAFE.sub("", str(model_name or "")).strip())


def single_mig_product_label(model_name, profile):
    """The product GFD writes under the single strategy: ``<model>-MIG-<profile>``, with ``+`` in the profile
    written as ``.`` (``1g.10gb+me`` -> ``1g.10gb.me``; NVIDIA/k8s-device-plugin internal/resource/nvml-mig-device.go,
    GetName) before the label is sanitised like any product."""
    return product_label("%s%s%s" % (model_name, PRODUCT_MIG_INFIX, str(profile or "").replace("+", ".")))


def parse_product(product):
    """{'model', 'mig_profile', 'mig_invalid', 'shared'} of a GFD product label; never raises.

    Forms: ``<model>``, ``<model>-SHARED``, ``<model>-MIG-<profile>``, ``<model>-MIG-<profile>-SHARED``,
    ``<model>-MIG-INVALID``. An empty or non-string label gives model None.
    """
    out = {"model": None, "mig_profile": None, "mig_invalid": False, "shared": False}
    if not isinstance(product, str) or not product.strip():
        return out
    text = product.strip()
    if text.endswith(PRODUCT_SHARED_SUFFIX):
        out["shared"] = True
        text = text[:-len(PRODUCT_SHARED_SUFFIX)]
    model, mark, profile = text.partition(PRODUCT_MIG_INFIX)
    if mark:
        if profile == PRODUCT_MIG_INVALID:
            out["mig_invalid"] = True
        else:
            out["mig_profile"] = profile or None
    out["model"] = model or None
    return out


def model_from_product(product):
    """The model part of a product label (no ``-MIG-*`` / ``-SHARED``), e.g. ``NVIDIA-H100-80GB-HBM3``."""
    return parse_product(product)["model"]


def single_mig_profile(product):
    """The MIG profile a single-strategy product label names (``<model>-MIG-<profile>``), else None."""
    return parse_product(product)["mig_profile"]


def mixed_mig_counts(labels):
    """{profile: count} from mixed-strategy ``nvidia.com/mig-<profile>.count`` labels (profiles as in the
    resource names, ``+`` already ``.``); a malformed count reads 0."""
    devices = {}
    for key, value in (labels or {}).items():
        match = _MIXED_COUNT.match(key) if isinstance(key, str) else None
        if match:
            devices[match.group("profile")] = to_int(value, 0)
    return devices


def replicas(labels, resource=RESOURCE_GPU):
    """GFD's ``<resource>.replicas`` label of a base resource: how many shares each device is advertised as
    (1 when absent, malformed or 0, which GFD writes for MIG-enabled GPUs)."""
    parsed = parse_resource(resource)
    base = parsed["base"] if parsed else resource
    count = to_int((labels or {}).get(base + ".replicas"), 1)
    return count if count and count > 0 else 1


def devices_advertised(allocatable, labels):
    """{base resource: devices} behind a GPU resource map: shared forms folded into their base resource and
    divided by its replicas (``nvidia.com/gpu.shared: 8`` with ``gpu.replicas=4`` is 2 ``nvidia.com/gpu``)."""
    shares = {}
    for name, count in gpu_resources(allocatable).items():
        base = parse_resource(name)["base"]
        shares[base] = shares.get(base, 0) + count
    return dict((base, count // replicas(labels, base)) for base, count in shares.items())


def shares_expected(devices, node):
    """The inverse of devices_advertised for a node whose layout changes: {resource: count} its device plugin will
    advertise for ``devices`` ({base resource: devices}) under the node's current sharing. Each base resource is
    multiplied by the node's ``<resource>.replicas`` label and named ``<resource>.shared`` when the node already
    advertises shared names (renameByDefault applies to every shared resource of a config). A resource the node has
    no replicas label for counts once: the room is under- rather than over-counted, so no pod is promised a share
    that will not be there (NVIDIA/k8s-device-plugin README, "Shared Access to GPUs")."""
    labels = labels_of(node)
    renamed = any(parse_resource(name)["shared"] for name in gpu_resources(
        ((node or {}).get("status") or {}).get("allocatable") or {}, keep_zero=False))
    shares = {}
    for base, count in (devices or {}).items():
        factor = to_int(labels.get(base + ".replicas"), 1)
        factor = factor if factor and factor > 1 else 1
        name = base + ".shared" if renamed and factor > 1 else base
        shares[name] = shares.get(name, 0) + int(count) * factor
    return shares


# -- objects -------------------------------------------------------------------------------------------------

def labels_of(obj):
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def pod_ref(pod):
    """``namespace/name`` of a pod."""
    meta = (pod or {}).get("metadata") or {}
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def container_gpu_requests(container):
    """{resource: count} one container asks for: its requests, the limit where no request is set (as
    Kubernetes defaults it; both must be equal for extended resources)."""
    resources = (container or {}).get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return gpu_resources(merged, keep_zero=False)


def pod_gpu_requests(pod):
    """{resource: count} a pod holds, as Kubernetes counts it: app containers and sidecar init containers
    (restartPolicy Always) summed; an init container's need is its own plus the sidecars started before
    it; the pod holds the larger of the two. Zero entries dropped."""
    spec = (pod or {}).get("spec") or {}
    total, sidecars, init_peak = {}, {}, {}
    for container in spec.get("containers") or []:
        for name, count in container_gpu_requests(container).items():
            total[name] = total.get(name, 0) + count
    for container in spec.get("initContainers") or []:
        wanted = container_gpu_requests(container)
        if container.get("restartPolicy") == "Always":
            for name, count in wanted.items():
                sidecars[name] = sidecars.get(name, 0) + count
            need = dict(sidecars)
        else:
            need = dict(sidecars)
            for name, count in wanted.items():
                need[name] = need.get(name, 0) + count
        for name, count in need.items():
            init_peak[name] = max(init_peak.get(name, 0), count)
    for name, count in sidecars.items():
        total[name] = total.get(name, 0) + count
    for name, count in init_peak.items():
        total[name] = max(total.get(name, 0), count)
    return dict((k, v) for k, v in total.items() if v)


def is_gpu_pod(pod, runtime_classes=GPU_RUNTIME_CLASSES):
    """A pod uses GPUs when it requests a GPU resource (incl. shared ones) or runs under a GPU runtime class
    (a pod with only ``runtimeClassName: nvidia`` and no request still sees every device:
    https://github.com/NVIDIA/gpu-operator/issues/2570)."""
    if pod_gpu_requests(pod):
        return True
    return ((pod or {}).get("spec") or {}).get("runtimeClassName") in tuple(runtime_classes or ())


def node_gpu_capacity(node, keep_zero=True):
    return gpu_resources(((node or {}).get("status") or {}).get("capacity"), keep_zero)


def node_gpu_allocatable(node, keep_zero=True):
    """{resource: int} of the node's allocatable GPU resources. ``keep_zero=False`` drops the entries
    kubelet keeps at 0 for resources no longer advertised."""
    return gpu_resources(((node or {}).get("status") or {}).get("allocatable"), keep_zero)


def is_gpu_node(node):
    """A node with GPUs: labelled ``gpu.present=true`` by the operator, labelled by GFD (``gpu.product``),
    or with a GPU resource in its capacity (a standalone device plugin, or before the operator has labelled
    it; kubelet keeps the resource at 0 while the device plugin is down)."""
    labels = labels_of(node)
    if labels.get(LABEL_GPU_PRESENT) == "true" or LABEL_PRODUCT in labels:
        return True
    return bool(node_gpu_capacity(node))


def node_condition(node, kind):
    for condition in (((node or {}).get("status") or {}).get("conditions")) or []:
        if condition.get("type") == kind:
            return condition
    return None


def node_ready(node):
    condition = node_condition(node, "Ready")
    return bool(condition and condition.get("status") == "True")


def unschedulable(node):
    return bool(((node or {}).get("spec") or {}).get("unschedulable"))


def deploy_labels(labels):
    """{operand: value} of the ``nvidia.com/gpu.deploy.<operand>`` labels."""
    return dict((k[len(DEPLOY_LABEL_PREFIX):], v) for k, v in (labels or {}).items()
                if isinstance(k, str) and k.startswith(DEPLOY_LABEL_PREFIX))


def paused_deploy_labels(node):
    """Sorted full deploy label keys MIG Manager has paused on the node."""
    return sorted(deploy_label(op) for op, value in deploy_labels(labels_of(node)).items() if value == PAUSED_VALUE)


def nvidia_labels(labels):
    """The ``nvidia.com/*`` labels."""
    return dict((k, v) for k, v in (labels or {}).items() if isinstance(k, str) and k.startswith(VENDOR_PREFIX))
