"""Kubernetes objects as the API returns them (dicts), for tests of code that reads nodes and pods.

Only what a test names is set, so a test shows the fields its code reads; ``status.capacity`` follows
``allocatable`` unless given, as on a node whose resources are all allocatable.
"""

READY = [{"type": "Ready", "status": "True"}]


def node(name="n1", labels=None, annotations=None, allocatable=None, capacity=None, unschedulable=None,
         conditions=None, resource_version=None, metadata=None, status=None):
    """A Node. ``allocatable`` values are kept as given (tests of quantity parsing pass strings or ints)."""
    meta = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if resource_version is not None:
        meta["resourceVersion"] = str(resource_version)
    meta.update(metadata or {})
    obj = {"metadata": meta, "spec": {} if unschedulable is None else {"unschedulable": unschedulable}}
    node_status = dict(status or {})
    if allocatable is not None:
        node_status["allocatable"] = dict(allocatable)
        node_status["capacity"] = dict(allocatable if capacity is None else capacity)
    elif capacity is not None:
        node_status["capacity"] = dict(capacity)
    if conditions is not None:
        node_status["conditions"] = list(conditions)
    if node_status:
        obj["status"] = node_status
    return obj


def pod(name="p", namespace="w", node_name=None, limits=None, init_limits=None, phase="Running", labels=None,
        uid=None, owner=None, runtime_class=None, metadata=None, spec=None, status=None):
    """A Pod with one container (``limits`` its resource limits) and, with ``init_limits``, one init container;
    ``owner`` is a controller ownerReference ({kind, name, uid}) or a kind alone."""
    meta = {"namespace": namespace, "name": name}
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    if owner is not None:
        reference = {"kind": owner, "name": "o"} if isinstance(owner, str) else dict(owner)
        meta["ownerReferences"] = [dict(reference, controller=True)]
    meta.update(metadata or {})
    pod_spec = {"containers": [{"name": "c", "resources": {"limits": dict(limits or {})}}]}
    if init_limits is not None:
        pod_spec["initContainers"] = [{"name": "init", "resources": {"limits": dict(init_limits)}}]
    if node_name is not None:
        pod_spec["nodeName"] = node_name
    if runtime_class is not None:
        pod_spec["runtimeClassName"] = runtime_class
    pod_spec.update(spec or {})
    return {"metadata": meta, "spec": pod_spec, "status": dict({"phase": phase}, **(status or {}))}


# The GPU Operator's operands and the app label of each one's pods (gpu-operator assets/state-*/ DaemonSets).
OPERAND_APPS = {"driver": "nvidia-driver-daemonset", "container-toolkit": "nvidia-container-toolkit-daemonset",
                "device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery": "gpu-feature-discovery",
                "dcgm-exporter": "nvidia-dcgm-exporter", "operator-validator": "nvidia-operator-validator",
                "mig-manager": "nvidia-mig-manager"}


def gpu_node(name="n1", labels=None, allocatable=None, **kwargs):
    """A Ready GPU node as the operator labels it: ``nvidia.com/gpu.present`` and every operand's
    ``nvidia.com/gpu.deploy.<operand>=true``, then ``labels`` over them."""
    base = {"nvidia.com/gpu.present": "true"}
    base.update(("nvidia.com/gpu.deploy." + operand, "true") for operand in OPERAND_APPS)
    base.update(labels or {})
    return node(name, labels=base, allocatable=allocatable or {}, conditions=READY, **kwargs)


def operand_pod(node_name, app, phase="Running", ready=True):
    """An operand's pod (app label ``app``) on ``node_name`` with one container, ready or not."""
    return pod("%s-%s" % (app, node_name), namespace="gpu-operator", node_name=node_name, phase=phase,
               labels={"app": app}, status={"containerStatuses": [{"name": "c", "ready": ready, "state": {}}]})
