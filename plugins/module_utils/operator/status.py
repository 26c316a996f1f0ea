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
# NVIDIA's controller labels each GPU node with the NVIDIADriver that owns its driver (internal/consts/consts.go
# NVIDIADriverOwnerLabel; internal/nvidiadriver/nvidiadriver.go AssignOwners); the DaemonSets it creates for an
# NVIDIADriver have that NVIDIADriver as their controller (internal/state/driver.go, SetControllerReference).
DRIVER_OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
NVIDIADRIVER_KIND = "NVIDIADriver"


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


def uses_nvidia_drivers(cluster_policy):
    """Whether the ClusterPolicy leaves the driver to NVIDIADriver resources (chart driver.nvidiaDriverCRD.enabled)."""
    return bool((((cluster_policy or {}).get("spec") or {}).get("driver") or {}).get("useNvidiaDriverCRD"))


def _controller_of(obj):
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("kind"), ref.get("name")
    return None, None


def driver_daemonset_owners(daemonsets):
    """{DaemonSet name: NVIDIADriver name} of the DaemonSets an NVIDIADriver controls."""
    owners = {}
    for daemonset in daemonsets or []:
        kind, name = _controller_of(daemonset)
        if kind == NVIDIADRIVER_KIND:
            owners[daemonset["metadata"]["name"]] = name
    return owners


def _is_driver_pod(pod):
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get("app") == OPERAND_APP["driver"] or labels.get(COMPONENT_LABEL) in DRIVER_COMPONENTS


def driver_pod_view(pod, daemonset_owners):
    """{pod, nvidia_driver, source, image, state} of a driver pod: which NVIDIADriver's DaemonSet made it (null for
    ClusterPolicy's nvidia-driver-daemonset, or when ``daemonset_owners`` is None and the DaemonSets were not read)."""
    kind, owner = _controller_of(pod)
    nvidia_driver = (daemonset_owners or {}).get(owner) if kind == "DaemonSet" else None
    containers = (pod.get("spec") or {}).get("containers") or []
    image = next((c.get("image") for c in containers if c.get("name") == "nvidia-driver-ctr"),
                 containers[0].get("image") if containers else None)
    if nvidia_driver:
        source = "NVIDIADriver %s" % nvidia_driver
    elif ((pod.get("metadata") or {}).get("labels") or {}).get("app") == OPERAND_APP["driver"]:
        source = "ClusterPolicy"
    else:
        source = "DaemonSet %s" % owner if owner else "no controller"
    return {"pod": pod["metadata"]["name"], "nvidia_driver": nvidia_driver, "source": source, "image": image,
            "state": pod_condition(pod)}


def _driver_status(node, candidates, crd_mode, daemonset_owners):
    """(status, the driver pod's view or None) for the driver operand of ``node``."""
    if crd_mode:
        owner = labels_of(node).get(DRIVER_OWNER_LABEL)
        if not owner:
            return ("no NVIDIADriver selects the node (NVIDIA's controller labels the nodes it routes to an NVIDIADriver "
                    "%s=<name>)" % DRIVER_OWNER_LABEL), (driver_pod_view(candidates[0], daemonset_owners) if candidates else None)
        if daemonset_owners is not None:
            views = [driver_pod_view(pod, daemonset_owners) for pod in candidates]
            own = [view for view in views if view["nvidia_driver"] == owner]
            if not own:
                others = ", ".join("%s of %s" % (view["pod"], view["source"]) for view in views)
                return ("no driver pod of NVIDIADriver %s (the node's %s) on the node%s"
                        % (owner, DRIVER_OWNER_LABEL, " (found %s)" % others if others else "")), (views[0] if views else None)
            ready = [view for view in own if view["state"] == "ready"]
            view = (ready or own)[0]
            return ("ready" if ready else "pod %s of NVIDIADriver %s: %s" % (view["pod"], owner, view["state"])), view
    if not candidates:
        return ("no %s pod on the node (nor one of an NVIDIADriver CR, %s=nvidia-driver)"
                % (OPERAND_APP["driver"], COMPONENT_LABEL)), None
    views = [driver_pod_view(pod, daemonset_owners) for pod in candidates]
    ready = [view for view in views if view["state"] == "ready"]
    view = (ready or views)[0]
    return ("ready" if ready else "pod %s: %s" % (view["pod"], view["state"])), view


def node_report(node, operands, pods, crd_mode=False, daemonset_owners=None, drivers=None):
    """{operand: 'ready' | reason} for one node; ``pods`` are the operator namespace's pods.

    ``crd_mode``: the ClusterPolicy leaves the driver to NVIDIADriver resources (``uses_nvidia_drivers``); the node's
    driver is then the pod of the NVIDIADriver NVIDIA's controller routed the node to (its owner label), found through
    ``daemonset_owners`` (``driver_daemonset_owners``; None: any driver pod on the node counts). ``drivers``: a dict
    that gets the node's driver pod (``driver_pod_view``, or None) under the node's name.
    """
    name = node["metadata"]["name"]
    by_app = {}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != name:
            continue
        app = (pod.get("metadata", {}).get("labels") or {}).get("app")
        if _is_driver_pod(pod):
            app = OPERAND_APP["driver"]  # ClusterPolicy's driver pod or an NVIDIADriver's
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
        if operand == "driver":
            report[operand], view = _driver_status(node, candidates, crd_mode, daemonset_owners)
            if drivers is not None:
                drivers[name] = view
            continue
        if not candidates:
            report[operand] = "no %s pod on the node" % OPERAND_APP[operand]
            continue
        conditions = [pod_condition(pod) for pod in candidates]
        report[operand] = "ready" if "ready" in conditions else "pod %s: %s" % (
            candidates[0]["metadata"]["name"], conditions[0])
    return report


def nvidia_driver_problems(nvidia_drivers):
    """One line per NVIDIADriver that is not ready, with its error condition's reason and message."""
    lines = []
    for driver in sorted(nvidia_drivers or [], key=lambda d: d["metadata"]["name"]):
        status = driver.get("status") or {}
        state = status.get("state") or "no status yet"
        if state == "ready":
            continue
        error = next((c for c in status.get("conditions") or [] if c.get("type") == "Error" and c.get("status") == "True"),
                     None)
        why = " (%s: %s)" % (error.get("reason"), error.get("message")) if error else ""
        lines.append("NVIDIADriver %s: state %s%s" % (driver["metadata"]["name"], state, why))
    return lines


def assess(cluster_policy, nodes, pods, wanted_nodes=None, daemonsets=None, nvidia_drivers=None):
    """Readiness of the whole operator.

    ``wanted_nodes``: names that must be GPU nodes (the inventory's); None means every GPU node
    (``gpu_labels.is_gpu_node``: labelled gpu.present=true or by GFD, or advertising GPU resources).
    ``daemonsets``, ``nvidia_drivers``: the operator namespace's DaemonSets and the NVIDIADrivers, read when the
    ClusterPolicy leaves the driver to NVIDIADrivers (None: not read).
    Returns a dict with ``ready`` (bool), ``state``
    (ClusterPolicy status.state or a reason), ``nodes`` {node: {operand: status}}, ``drivers`` {node: driver pod view
    or None} and ``not_ready`` ["node: operand (reason)", ...].
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
    crd_mode = uses_nvidia_drivers(cluster_policy)
    owners = driver_daemonset_owners(daemonsets) if daemonsets is not None else None
    if crd_mode:
        not_ready.extend(nvidia_driver_problems(nvidia_drivers))
    drivers = {}
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
            reports[name] = node_report(node, operands, pods, crd_mode, owners, drivers)
        for operand, status in sorted(reports[name].items()):
            if status != "ready":
                not_ready.append("%s: %s (%s)" % (name, operand, status))
    if cluster_policy is not None and not names:
        not_ready.append("no GPU node found (none labelled %s=true or by GFD, none advertising GPUs)" % LABEL_GPU_PRESENT)
    return {"ready": not not_ready, "state": state, "operands": operands, "nodes": reports, "drivers": drivers,
            "not_ready": not_ready}
