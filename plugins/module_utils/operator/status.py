# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Is the GPU Operator ready? ClusterPolicy state plus the operand pods on every GPU node.

Pure Python over plain dicts (objects as the API returns them, decoded JSON).
Operand names, pod ``app`` labels and ``nvidia.com/gpu.deploy.*`` keys are those of GPU Operator
v26.7.0 (NVIDIA/gpu-operator assets/state-*/*daemonset.yaml, controllers/state_manager.go); the ClusterPolicy status
enum from api/nvidia/v1/clusterpolicy_types.go.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    LABEL_GPU_PRESENT,
    PAUSED_VALUE,
    deploy_label,
    is_gpu_node,
    labels_of,
)

# operand -> (pod label app=, ClusterPolicy spec key holding 'enabled', enabled when the key is absent)
OPERANDS = (
    ("driver", "nvidia-driver-daemonset", "driver", True),
    ("container-toolkit", "nvidia-container-toolkit-daemonset", "toolkit", True),
    ("device-plugin", "nvidia-device-plugin-daemonset", "devicePlugin", True),
    ("gpu-feature-discovery", "gpu-feature-discovery", "gfd", True),
    ("dcgm-exporter", "nvidia-dcgm-exporter", "dcgmExporter", True),
    ("dcgm", "nvidia-dcgm", "dcgm", False),
    ("operator-validator", "nvidia-operator-validator", None, True),
    ("mig-manager", "nvidia-mig-manager", "migManager", True),
)
OPERAND_NAMES = tuple(name for name, _app, _key, _default in OPERANDS)
OPERAND_APP = dict((name, app) for name, app, _key, _default in OPERANDS)
# With driver.nvidiaDriverCRD.enabled the driver runs from NVIDIADriver CRs, one DaemonSet per CR and node pool,
# named nvidia-<type>-driver-<os>-<hash>; every driver pod, ClusterPolicy's or a CR's, carries this component label
# (NVIDIA/gpu-operator v26.7.0 manifests/state-driver/0500_daemonset.yaml, assets/state-driver/0500_daemonset.yaml).
COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENTS = ("nvidia-driver", "nvidia-vgpu-host-manager")


def enabled_operands(cluster_policy):
    """Operands the ClusterPolicy enables, in deployment order."""
    spec = (cluster_policy or {}).get("spec") or {}
    enabled = []
    for name, _app, key, default in OPERANDS:
        if key is None:
            enabled.append(name)
            continue
        value = (spec.get(key) or {}).get("enabled")
        if value is None:
            value = default
        if value:
            enabled.append(name)
    return enabled


def expected_operands(node, operands):
    """Operands that should run on this node: enabled and deploy label 'true' or paused.

    The operator labels every GPU node for the container operands; mig-manager only MIG-capable ones
    (NVIDIA/gpu-operator controllers/state_manager.go). A label an admin set to 'false' means "not here" and is honoured.
    """
    labels = labels_of(node)
    expected = {}
    for name in operands:
        value = labels.get(deploy_label(name))
        if name == "mig-manager" and value is None:
            continue  # not MIG-capable: the operator does not set this label
        if value == "false":
            continue
        expected[name] = value
    return expected


def pod_condition(pod):
    """'ready', or why not ('Pending', 'Running, not ready', 'Failed', 'terminating')."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "terminating"
    if phase == "Succeeded":
        return "ready"
    if phase != "Running":
        return phase
    for container in status.get("containerStatuses") or []:
        if not container.get("ready"):
            waiting = (container.get("state") or {}).get("waiting") or {}
            return "Running, container %s not ready%s" % (
                container.get("name"), (" (%s)" % waiting["reason"]) if waiting.get("reason") else "")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return "Running, not ready"
    return "ready"


def node_report(node, operands, pods):
    """{operand: 'ready' | reason} for one node; ``pods`` are the operator namespace's pods."""
    name = node["metadata"]["name"]
    by_app = {}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != name:
            continue
        labels = pod.get("metadata", {}).get("labels") or {}
        app = labels.get("app")
        if app != OPERAND_APP["driver"] and labels.get(COMPONENT_LABEL) in DRIVER_COMPONENTS:
            app = OPERAND_APP["driver"]  # an NVIDIADriver CR's driver pod
        by_app.setdefault(app, []).append(pod)
    report = {}
    for operand, label in sorted(expected_operands(node, operands).items()):
        if label is None:
            report[operand] = "node not labelled %s by the operator" % deploy_label(operand)
            continue
        if label == PAUSED_VALUE:
            report[operand] = PAUSED_VALUE
            continue
        candidates = by_app.get(OPERAND_APP[operand]) or []
        if not candidates:
            report[operand] = "no %s pod on the node" % OPERAND_APP[operand] + (
                " (nor one of an NVIDIADriver CR, %s=nvidia-driver)" % COMPONENT_LABEL if operand == "driver" else "")
            continue
        conditions = [pod_condition(pod) for pod in candidates]
        report[operand] = "ready" if "ready" in conditions else "pod %s: %s" % (
            candidates[0]["metadata"]["name"], conditions[0])
    return report


def assess(cluster_policy, nodes, pods, wanted_nodes=None):
    """Readiness of the whole operator.

    ``wanted_nodes``: names that must be GPU nodes (the inventory's); None means every GPU node
    (``gpu_labels.is_gpu_node``: labelled gpu.present=true or by GFD, or advertising GPU resources).
    Returns a dict with ``ready`` (bool), ``state``
    (ClusterPolicy status.state or a reason), ``nodes`` {node: {operand: status}} and
    ``not_ready`` ["node: operand (reason)", ...].
    """
    not_ready = []
    if cluster_policy is None:
        state = "ClusterPolicy cluster-policy not found"
        not_ready.append(state)
        operands = []
    else:
        state = ((cluster_policy.get("status") or {}).get("state")) or "no status yet"
        if state != "ready":
            not_ready.append("ClusterPolicy cluster-policy: state %s" % state)
        operands = enabled_operands(cluster_policy)
    by_name = dict((node["metadata"]["name"], node) for node in nodes)
    if wanted_nodes is None:
        names = sorted(name for name, node in by_name.items() if is_gpu_node(node))
    else:
        names = sorted(wanted_nodes)
    reports = {}
    for name in names:
        node = by_name.get(name)
        if node is None:
            reports[name] = {"node": "not found in the cluster"}
        elif not is_gpu_node(node):
            reports[name] = {"node": "no GPU: not labelled %s=true, no GFD labels, no GPU resources" % LABEL_GPU_PRESENT}
        else:
            reports[name] = node_report(node, operands, pods)
        for operand, status in sorted(reports[name].items()):
            if status != "ready":
                not_ready.append("%s: %s (%s)" % (name, operand, status))
    if cluster_policy is not None and not names:
        not_ready.append("no GPU node found (none labelled %s=true or by GFD, none advertising GPUs)" % LABEL_GPU_PRESENT)
    return {"ready": not not_ready, "state": state, "operands": operands, "nodes": reports, "not_ready": not_ready}
