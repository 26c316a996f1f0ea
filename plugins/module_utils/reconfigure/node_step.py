# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The MIG step for one node, against MIG Manager's label protocol.

Protocol facts (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go): MIG Manager acts only when
``nvidia.com/mig.config`` *changes*, reports through ``nvidia.com/mig.config.state`` (pending, rebooting,
success, failed) and pauses the operands by setting ``nvidia.com/gpu.deploy.*`` to ``paused-for-mig-change``.
Device-plugin resources and GFD labels per strategy: NVIDIA/k8s-device-plugin internal/rm/rm.go and
internal/lm/mig-strategy.go, docs/gpu-feature-discovery/README.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    LABEL_MIG_CONFIG,
    LABEL_MIG_STATE,
    LABEL_MIG_STRATEGY,
    LABEL_PRODUCT,
    PRODUCT_SHARED_SUFFIX,
    deploy_label,
    devices_advertised,
    is_gpu_pod,
    labels_of,
    node_gpu_allocatable,
    node_ready,
    paused_deploy_labels,
    pod_ref,
    replicas,
    unschedulable,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    CONNECTION_ERRORS,
    ApiException,
    DeadlineExceeded,
    active_cluster_policy,
    annotations_of,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import connection_reason

MIG_MANAGER_APP = "nvidia-mig-manager"  # the app label of MIG Manager's pods (assets/state-mig-manager/0600_daemonset.yaml)
MIG_MANAGER_SELECTOR = "app=%s" % MIG_MANAGER_APP
# The label the DaemonSet controller puts on each pod and on the ControllerRevision of its template
# (k8s.io/api apps/v1 DefaultDaemonSetUniqueLabelKey).
REVISION_HASH_LABEL = "controller-revision-hash"
# What the node's MIG config label said before we changed it (for rollback), and the target we set.
# How MIG Manager logs why a change failed: its main loop logs the error of the reconfiguration with logrus's text
# format, `level=error msg="Error: <reason>"` (mig-parted cmd/nvidia-mig-manager/main.go, v0.15.0), quotes escaped.
MIG_MANAGER_ERROR = re.compile(r'level=error msg="Error: ((?:[^"\\]|\\.)*)"')
# MIG Manager's CDI step, run after the MIG change when ClusterPolicy cdi.enabled (the default from v26.7.0 on):
# pkg/mig/reconfigure handleCDI wraps its errors in this.
CDI_FAILURE = "failed to handle CDI"
PREVIOUS_CONFIG_ANNOTATION = "gpufleet.io/mig-previous-config"
TARGET_CONFIG_ANNOTATION = "gpufleet.io/mig-target-config"


class MigStepError(Exception):
    """The MIG step failed; ``result`` carries states seen, mismatches and diagnostics."""

    def __init__(self, message, result=None):
        super(MigStepError, self).__init__(message)
        self.result = result or {}


# -- cluster-wide settings ---------------------------------------------------------------------------------

def mig_strategy(policy, node):
    strategy = (((policy or {}).get("spec") or {}).get("mig") or {}).get("strategy")
    return strategy or labels_of(node).get(LABEL_MIG_STRATEGY) or "none"


def with_reboot(policy):
    """WITH_REBOOT in spec.migManager.env: a mode change may reboot the node
    (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html)."""
    env = (((policy or {}).get("spec") or {}).get("migManager") or {}).get("env") or []
    return any(e.get("name") == "WITH_REBOOT" and str(e.get("value")).lower() == "true" for e in env)


def operator_namespace(policy, default):
    return ((policy or {}).get("status") or {}).get("namespace") or default


def custom_config_name(policy):
    return ((((policy or {}).get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name") or ""


def find_config_source(ops, policy, node_name, namespace):
    """The mig-parted config MIG Manager on ``node_name`` reads (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go):
    the ClusterPolicy's custom ConfigMap, else the generated ``<node>-mig-config``, else the built-in.

    Returns {kind: custom|generated|builtin, namespace, name, text (None for builtin), source (for messages)}.
    Raises MigStepError when the ClusterPolicy names a ConfigMap that is missing or lacks config.yaml.
    """
    custom = custom_config_name(policy)
    if custom:
        configmap = ops.get_configmap(namespace, custom)
        if configmap is None:
            raise MigStepError("ClusterPolicy names MIG config ConfigMap %s/%s, which does not exist" % (
                namespace, custom))
        data = configmap.get("data") or {}
        # A custom ConfigMap must hold key config.yaml (GPU Operator docs, gpu-operator-mig.html); old charts' default map used
        # config-default.yaml.
        text = data.get("config.yaml") or data.get("config-default.yaml")
        if text is None:
            raise MigStepError("MIG config ConfigMap %s/%s has no key config.yaml (keys: %s)" % (
                namespace, custom, ", ".join(sorted(data)) or "none"))
        return {"kind": "custom", "namespace": namespace, "name": custom, "text": text,
                "source": "ConfigMap %s/%s" % (namespace, custom)}
    generated = "%s-mig-config" % node_name
    configmap = ops.get_configmap(namespace, generated)
    if configmap is not None and (configmap.get("data") or {}).get("config.yaml"):
        return {"kind": "generated", "namespace": namespace, "name": generated,
                "text": configmap["data"]["config.yaml"], "source": "ConfigMap %s/%s" % (namespace, generated)}
    return {"kind": "builtin", "namespace": None, "name": None, "text": None, "source": "built-in default config"}


# -- node views ----------------------------------------------------------------------------------------------

def mig_state(node):
    labels = labels_of(node)
    return {"config": labels.get(LABEL_MIG_CONFIG), "state": labels.get(LABEL_MIG_STATE)}


def resource_mismatches(expected, actual):
    """Human-readable differences between expected and advertised GPU resources ({} both sides = match)."""
    problems = []
    for name in sorted(set(expected) | set(actual)):
        want, have = int(expected.get(name, 0)), int(actual.get(name, 0))
        if want != have:
            problems.append("allocatable %s is %d, plan says %d" % (name, have, want))
    return problems


def _without_sharing(key, value, labels):
    """GFD appends -SHARED to gpu.product when a device is advertised as several replicas (time-slicing or MPS,
    NVIDIA/k8s-device-plugin internal/lm/resource.go); the plan names the product of the devices themselves."""
    text = str(value)
    if key == LABEL_PRODUCT and text.endswith(PRODUCT_SHARED_SUFFIX) and replicas(labels) > 1:
        return text[:-len(PRODUCT_SHARED_SUFFIX)]
    return text


def label_mismatches(expected, labels):
    problems = []
    for key in sorted(expected):
        if _without_sharing(key, labels.get(key), labels) != str(expected[key]):
            problems.append("GFD label %s is %r, plan says %r" % (key, labels.get(key), expected[key]))
    return problems


# -- the step against the API -----------------------------------------------------------------------------------

def set_config_label(ops, node, target, check_mode=False):
    """Point MIG Manager at ``target``: record the previous config for rollback, clear the stale state so
    the next ``success`` is this run's, and set the label. Returns (the patch, the node as the patch left it: None in
    check mode, where nothing is sent)."""
    labels = labels_of(node)
    annotations = annotations_of(node)
    patch = {"metadata": {"labels": {LABEL_MIG_CONFIG: target, LABEL_MIG_STATE: None},
                          "annotations": {TARGET_CONFIG_ANNOTATION: target}}}
    if annotations.get(TARGET_CONFIG_ANNOTATION) != target or PREVIOUS_CONFIG_ANNOTATION not in annotations:
        patch["metadata"]["annotations"][PREVIOUS_CONFIG_ANNOTATION] = labels.get(LABEL_MIG_CONFIG) or ""
    if not check_mode:
        return patch, ops.patch_node(node["metadata"]["name"], patch)
    return patch, None


def boot_id(node):
    """kubelet's ``status.nodeInfo.bootID``: it changes with every boot of the host."""
    return (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or None


def follow_state(ops, node_name, target, deadline, node=None, on_state=None):
    """Watch the node until MIG Manager reports ``success`` (and, after a reboot, the node is back and
    Ready) or ``failed``. Returns {final, states, rebooted, not_ready_seen, node}; final is
    success|failed|timeout|changed|deleted. A node NotReady while MIG Manager works is expected (a reboot, or
    kubelet stopped for a mode change with a host-installed driver: WITH_SHUTDOWN_HOST_GPU_CLIENTS in
    NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go) and only recorded.
    A reboot is known from ``rebooting`` or from a new ``status.nodeInfo.bootID`` (kubelet's, after a boot): a
    watch that re-lists after an error sees only the latest state and may miss ``rebooting``.
    ``on_state(state)`` is called for each new state seen (progress reporting)."""
    try:
        node = node or ops.get_node(node_name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return {"final": "deleted", "states": [], "rebooted": False, "not_ready_seen": False, "node": None}
    seen = []
    flags = {"rebooted": False, "final": None, "not_ready_seen": False}
    first_boot = boot_id(node)

    def done(event_type, obj):
        if event_type == "DELETED":
            flags["final"] = "deleted"
            return True
        if not node_ready(obj):
            flags["not_ready_seen"] = True
        if first_boot and boot_id(obj) and boot_id(obj) != first_boot:
            flags["rebooted"] = True
        labels = labels_of(obj)
        state = labels.get(LABEL_MIG_STATE)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
            if on_state is not None:
                on_state(state)
        if labels.get(LABEL_MIG_CONFIG) != target:
            flags["final"] = "changed"
            return True
        if state == "rebooting":
            flags["rebooted"] = True
        if state == "failed":
            flags["final"] = "failed"
            return True
        if state == "success" and (node_ready(obj) or not flags["rebooted"]):
            flags["final"] = "success"
            return True
        return False

    try:
        if not done("ADDED", node):
            node = ops.watch(ops.lister("/api/v1/nodes"), deadline, done, node,
                             field_selector="metadata.name=%s" % node_name)
    except DeadlineExceeded as exc:
        final = "timeout" if node_exists(ops, node_name) else "deleted"
        return {"final": final, "states": seen, "rebooted": flags["rebooted"],
                "not_ready_seen": flags["not_ready_seen"], "node": exc.last or node}
    return {"final": flags["final"], "states": seen, "rebooted": flags["rebooted"],
            "not_ready_seen": flags["not_ready_seen"], "node": None if flags["final"] == "deleted" else node}


def node_exists(ops, node_name):
    try:
        ops.get_node(node_name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def not_ready_text(node):
    """'node X is NotReady (reason: message)' from its Ready condition, or None when Ready."""
    if node_ready(node):
        return None
    ready = [c for c in ((node.get("status") or {}).get("conditions") or []) if c.get("type") == "Ready"]
    detail = ("Ready=%s, %s: %s" % (ready[0].get("status"), ready[0].get("reason"), ready[0].get("message"))
              if ready else "no Ready condition")
    return "node %s is NotReady (%s)" % ((node.get("metadata") or {}).get("name"), detail)


def mig_manager_pods(ops, node_name, pods=None):
    """MIG Manager's pods on ``node_name`` that are not being deleted; picked out of ``pods`` (the node's pods as
    just read, any namespace) when given, else listed."""
    if pods is None:
        pods = ops.list_pods_on_node(node_name, label_selector=MIG_MANAGER_SELECTOR).get("items") or []
    else:
        pods = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get("app") == MIG_MANAGER_APP]
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def mig_manager_not_running(ops, node_name, namespace, policy=None):
    """Why MIG Manager is not running on ``node_name``, or None when its pod runs there.

    Its pod mounts the ConfigMap spec.migManager.config.name names: while that ConfigMap is missing kubelet cannot
    start the container (FailedMount) and MIG Manager never sets a state (gpu-operator
    assets/state-mig-manager/0600_daemonset.yaml; NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go)."""
    if policy is None:
        policy = active_cluster_policy(ops.list_cluster_policies())
        namespace = operator_namespace(policy, namespace)
    custom = custom_config_name(policy)
    if custom and custom != "default-mig-parted-config" and ops.get_configmap(namespace, custom) is None:
        return ("MIG Manager is not running on node %s: ClusterPolicy spec.migManager.config.name names ConfigMap "
                "%s/%s, which does not exist, so its pod cannot mount its config and never starts (create the "
                "ConfigMap or fix the name)" % (node_name, namespace, custom))
    pods = mig_manager_pods(ops, node_name)
    if not pods:
        return "MIG Manager is not running on node %s: no nvidia-mig-manager pod there (%s=%s)" % (
            node_name, deploy_label("mig-manager"), labels_of(ops.get_node(node_name)).get(deploy_label("mig-manager")))
    status = pods[0].get("status") or {}
    if status.get("phase") != "Running":
        waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason") for c in status.get("containerStatuses") or []]
        return "MIG Manager is not running on node %s: pod %s is %s%s" % (
            node_name, pod_ref(pods[0]), status.get("phase") or "unknown",
            " (%s)" % ", ".join(w for w in waiting if w) if any(waiting) else "")
    return None


def current_revision_hash(daemonset, revisions):
    """The ``controller-revision-hash`` of ``daemonset``'s current template: its ControllerRevision with the highest
    revision (the DaemonSet controller's history; it labels each with the hash it puts on the pods), or None."""
    uid = (daemonset.get("metadata") or {}).get("uid")
    owned = [r for r in revisions
             if any(ref.get("uid") == uid for ref in (r.get("metadata") or {}).get("ownerReferences") or [])]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    return ((newest.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH_LABEL)


def daemonset_rolled_out(daemonset):
    """Whether every pod of ``daemonset`` runs its current template (what `kubectl rollout status` waits for)."""
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    return (int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
            and int(status.get("updatedNumberScheduled") or 0) >= int(status.get("desiredNumberScheduled") or 0))


def mig_manager_outdated(pod, daemonset, revisions):
    """Why ``pod``, MIG Manager's on a node, does not run its DaemonSet's current template, or None.

    A ClusterPolicy change to MIG Manager (its config name, env such as WITH_REBOOT, image) makes NVIDIA's controller
    update the DaemonSet, whose controller then replaces the pods one node at a time (RollingUpdate). A node labelled
    while its old pod still runs is reconfigured with the old settings, or loses its pod mid-change."""
    if daemonset_rolled_out(daemonset):
        return None
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        # The controller writes the new template's ControllerRevision in the same sync that records the generation
        # as observed: until then the newest revision is the old template's, and an old pod would look current.
        return ("DaemonSet %s has a new template (generation %s) its controller has not yet acted on (observed %s): "
                "MIG Manager pod %s may be replaced (kubectl -n %s rollout status daemonset/%s)" % (
                    meta.get("name"), meta.get("generation"), status.get("observedGeneration") or 0, pod_ref(pod),
                    meta.get("namespace"), meta.get("name")))
    current = current_revision_hash(daemonset, revisions)
    running = ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH_LABEL)
    if current is None or running == current:
        return None
    return ("MIG Manager pod %s runs an older template of DaemonSet %s (%s=%s, current %s): the DaemonSet is still "
            "rolling out a change (kubectl -n %s rollout status daemonset/%s)" % (
                pod_ref(pod), daemonset["metadata"]["name"], REVISION_HASH_LABEL, running, current,
                daemonset["metadata"].get("namespace"), daemonset["metadata"]["name"]))


class DaemonSetReads(object):
    """The DaemonSets a rollout's node threads check before each drain, each read again only once it is older than
    ``max_age`` seconds: a node starts every second or two in a wide window, and the DaemonSet is the same for all.
    A template change is then seen up to ``max_age`` late, within the seconds NVIDIA's controller itself takes to
    carry a ClusterPolicy change into the DaemonSet. A DaemonSet still rolling out is read fresh on every look."""

    def __init__(self, max_age=5.0, clock=time.monotonic):
        self.max_age = max_age
        self.clock = clock
        self.lock = threading.Lock()
        self.read = {}  # (namespace, name) -> (when, daemonset)

    def get(self, ops, namespace, name):
        key = (namespace, name)
        with self.lock:
            when, daemonset = self.read.get(key, (None, None))
        if when is not None and self.clock() - when < self.max_age and daemonset is not None \
                and daemonset_rolled_out(daemonset):
            return daemonset
        daemonset = ops.get_daemonset(namespace, name)
        with self.lock:
            self.read[key] = (self.clock(), daemonset)
        return daemonset


def mig_manager_rollout_pending(ops, node_name, pods=None, daemonsets=None):
    """Why MIG Manager on ``node_name`` is not yet its DaemonSet's current template (mig_manager_outdated), or None.
    None too when there is no such pod (mig_manager_not_running says why later) or when the account may not read
    DaemonSets and ControllerRevisions in the operator namespace (rbac/mig-reconfigure.yaml grants it).
    ``pods``: the node's pods as just read (else MIG Manager's are listed); ``daemonsets``: a DaemonSetReads shared
    by the rollout's threads (else the DaemonSet is read)."""
    owners = [(p, ref["name"]) for p in mig_manager_pods(ops, node_name, pods)
              for ref in (p.get("metadata") or {}).get("ownerReferences") or [] if ref.get("kind") == "DaemonSet"]
    if not owners:
        return None
    pod, name = owners[0]
    namespace = pod["metadata"]["namespace"]
    try:
        daemonset = daemonsets.get(ops, namespace, name) if daemonsets is not None else ops.get_daemonset(namespace, name)
        if daemonset is None or daemonset_rolled_out(daemonset):
            return None
        selector = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        revisions = ops.list_controller_revisions(namespace, ",".join(
            "%s=%s" % item for item in sorted(selector.items())) or None)
    except ApiException as exc:
        if exc.status == 403:
            return None
        raise
    return mig_manager_outdated(pod, daemonset, revisions)


def wait_mig_manager_current(ops, node_name, deadline, interval=2.0):
    """Wait until MIG Manager on ``node_name`` runs its DaemonSet's current template; returns why not at the
    deadline, or None. Called once a look found it outdated (mig_manager_rollout_pending), so it waits first."""
    while True:
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        pending = mig_manager_rollout_pending(ops, node_name)
        if pending is None or time.monotonic() >= deadline:
            return pending


def node_mismatches(node, expected_resources, expected_labels):
    """Where the node's allocatable GPU resources and GFD labels differ from the plan, now ([] = verified).

    The plan counts devices; under time-slicing or MPS the device plugin advertises each as ``replicas`` shares
    (as ``<resource>.shared`` with renameByDefault), so allocatable is folded back into devices first."""
    labels = labels_of(node)
    advertised = devices_advertised(node_gpu_allocatable(node, keep_zero=False), labels)
    return (resource_mismatches(expected_resources, dict((k, v) for k, v in advertised.items() if v))
            + label_mismatches(expected_labels or {}, labels))


def wait_verified(ops, node_name, expected_resources, expected_labels, deadline, node=None):
    """Watch until allocatable equals the plan and GFD labels agree; returns the mismatches left at the
    deadline ([] when verified). Allocatable lags the apply while the device plugin restarts
    (NVIDIA/k8s-device-plugin#240)."""
    return watch_verified(ops, node_name, expected_resources, expected_labels, deadline, node)[0]


def watch_verified(ops, node_name, expected_resources, expected_labels, deadline, node=None):
    """wait_verified's mismatches and the node as last seen: the write that gives the node back is conditional on
    its resourceVersion, and the device plugin and GFD write the node after MIG Manager's success."""
    node = node or ops.get_node(node_name)
    last = {"problems": [], "node": node}

    def done(obj):
        last["node"] = obj
        # A NotReady node's allocatable is whatever kubelet posted last: not a verification.
        not_ready = not_ready_text(obj)
        last["problems"] = ([not_ready] if not_ready else []) + node_mismatches(obj, expected_resources, expected_labels)
        return not last["problems"]

    try:
        ops.watch_node(node_name, deadline, done, node)
    except DeadlineExceeded:
        return last["problems"], last["node"]
    return [], last["node"]


def mig_manager_error(logs):
    """The reason MIG Manager last logged for a failed change, from its pods' logs ({pod: text}); None if none."""
    found = None
    for text in logs.values():
        for match in MIG_MANAGER_ERROR.finditer(text or ""):
            found = re.sub(r"\\(.)", r"\1", match.group(1))
    return found


def collect_diagnostics(ops, node_name, namespace, log_lines=100):
    """What an operator needs when a node's MIG change fails or hangs (GPU busy, reset refused, stuck ``pending``:
    NVIDIA/mig-parted#181, NVIDIA/gpu-operator#668, #2833)."""
    diagnostics = {"node": node_name}
    try:
        node = ops.get_node(node_name)
    except ApiException as exc:
        diagnostics["error"] = "cannot read node: HTTP %s" % exc.status
        if exc.status == 404:
            diagnostics.update(deleted=True, hints=["node %s no longer exists (deleted)" % node_name])
        return diagnostics
    except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        diagnostics["error"] = "cannot read node: API server unreachable (%s)" % connection_reason(exc)
        return diagnostics
    diagnostics.update(mig_state(node))
    diagnostics["ready"] = node_ready(node)
    diagnostics["unschedulable"] = unschedulable(node)
    diagnostics["paused_deploy_labels"] = paused_deploy_labels(node)
    diagnostics["gpu_allocatable"] = node_gpu_allocatable(node, keep_zero=False)
    logs = {}
    gpu_pods = []
    try:
        pods = ops.list_pods_on_node(node_name).get("items") or []
    except ApiException as exc:
        pods = []
        diagnostics["pods_error"] = "HTTP %s" % exc.status
    except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        pods = []
        diagnostics["pods_error"] = "API server unreachable (%s)" % connection_reason(exc)
    for pod in pods:
        labels = labels_of(pod)
        phase = (pod.get("status") or {}).get("phase")
        if labels.get("app") == MIG_MANAGER_APP:
            meta = pod.get("metadata") or {}
            try:
                logs[pod_ref(pod)] = ops.pod_log(meta.get("namespace"), meta.get("name"), tail_lines=log_lines)
            except ApiException as exc:
                logs[pod_ref(pod)] = "(logs unavailable: HTTP %s %s)" % (exc.status, exc.reason)
            except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
                logs[pod_ref(pod)] = "(logs unavailable: %s)" % connection_reason(exc)
        elif phase not in ("Succeeded", "Failed") and is_gpu_pod(pod):
            gpu_pods.append(pod_ref(pod))
    diagnostics["mig_manager_logs"] = logs
    diagnostics["gpu_pods_on_node"] = sorted(gpu_pods)
    hints = []
    reason = mig_manager_error(logs) if diagnostics["state"] == "failed" else None
    if reason:
        diagnostics["mig_manager_error"] = reason
    if reason and CDI_FAILURE in reason:
        hints.append("MIG Manager changed the MIG layout for %s, then its CDI step failed (ClusterPolicy cdi.enabled, "
                     "the default from GPU Operator v26.7.0 on: it runs the toolkit's nvidia-ctk to make the control "
                     "device nodes and the management CDI spec under the driver root): %s; its log does not keep "
                     "nvidia-ctk's own error: run nvidia-ctk cdi generate --mode=management in the MIG Manager pod to "
                     "see it, and check the driver root (driver.enabled, hostPaths.driverInstallDir)"
                     % (diagnostics["config"], reason))
    elif reason:
        hints.append("MIG Manager reported failed for %s: %s" % (diagnostics["config"], reason))
    elif diagnostics["state"] == "failed":
        hints.append("MIG Manager reported failed for %s: its log says why; a GPU held by a client (persistenced, "
                     "DCGM, a leftover process) is the usual cause, a mode change without reset support needs "
                     "WITH_REBOOT" % diagnostics["config"])
    elif diagnostics["state"] in ("pending", "rebooting"):
        hints.append("MIG Manager is still %s for %s" % (diagnostics["state"], diagnostics["config"]))
    if logs and all(text.startswith("(logs unavailable") for text in logs.values()):
        hints.append("MIG Manager logs could not be read through the API (kubectl logs -n %s %s)" % (
            namespace, ", ".join(sorted(logs))))
    if diagnostics["state"] is None:
        try:
            not_running = mig_manager_not_running(ops, node_name, namespace)
        except ApiException:
            not_running = None
        if not_running:
            hints.append(not_running)
    if not logs:
        hints.append("no MIG Manager pod on %s (is %s=true?)" % (node_name, deploy_label("mig-manager")))
    not_ready = not_ready_text(node)
    if not_ready:
        hints.append(not_ready)
    if diagnostics["paused_deploy_labels"]:
        hints.append("operands left paused (%s): un-wedge restores them and re-triggers MIG Manager"
                     % ", ".join(diagnostics["paused_deploy_labels"]))
    if gpu_pods:
        hints.append("pods still using GPUs on the node: %s" % ", ".join(sorted(gpu_pods)))
    diagnostics["hints"] = hints
    return diagnostics


def unwedge(ops, node_name, target, check_mode=False):
    """Restore deploy labels MIG Manager left paused and re-trigger it for ``target`` (NVIDIA/gpu-operator#2833;
    fixed upstream by NVIDIA/mig-parted PR #484).

    MIG Manager acts only on a *change* of the config label, or on its own start with the label present
    (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go). Removing and re-adding the label races the operator, which
    sets ``all-disabled`` on a node without the label (NVIDIA/gpu-operator controllers/nodelabeling_controller.go);
    so the label is set to ``target`` and the node's MIG Manager pod is restarted
    (its DaemonSet brings it back and it applies the label it finds). Returns {restored_labels, retriggered,
    restarted_pods}."""
    node = ops.get_node(node_name)
    restored = paused_deploy_labels(node)
    managers = mig_manager_pods(ops, node_name)
    restarted = ["%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in managers]
    if check_mode:
        return {"restored_labels": restored, "retriggered": target, "restarted_pods": restarted}
    labels = dict((k, "true") for k in restored)
    labels.update({LABEL_MIG_CONFIG: target, LABEL_MIG_STATE: None})
    ops.patch_node(node_name, {"metadata": {"labels": labels, "annotations": {TARGET_CONFIG_ANNOTATION: target}}})
    for pod in managers:
        ops.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    return {"restored_labels": restored, "retriggered": target, "restarted_pods": restarted}


def previous_config(node):
    return annotations_of(node).get(PREVIOUS_CONFIG_ANNOTATION)


def finish_annotations_patch():
    """Drop the in-progress marker once a node is verified; the previous config stays for rollback."""
    return {"metadata": {"annotations": {TARGET_CONFIG_ANNOTATION: None}}}


def clear_marker(ops, node_name):
    """Drop the in-progress marker of a verified node; returns the patched node."""
    return ops.patch_node(node_name, finish_annotations_patch())


def trigger(ops, node, target, retrigger=False):
    """Make MIG Manager act on ``target``: set the label when it says something else; re-trigger MIG Manager
    (unwedge: restore paused operands, set the label, restart its pod) when asked (``retrigger``) or when the
    label already says ``target`` and MIG Manager is idle or failed - the same value again would not wake it
    (it acts on changes). Returns what was done:
    {action: labelled|retriggered|none, unwedged (when retriggered), _node (when labelled: the patched node)}."""
    state = mig_state(node)
    name = node["metadata"]["name"]
    if retrigger or (state["config"] == target and state["state"] in (None, "", "failed")):
        return {"action": "retriggered", "unwedged": unwedge(ops, name, target)}
    if state["config"] != target:
        _patch, patched = set_config_label(ops, node, target)
        return {"action": "labelled", "_node": patched}
    return {"action": "none"}


def run_step(ops, node_name, target, planned, apply_timeout, verify_timeout, unwedge_on_timeout=False,
             retrigger=False, clear=True, node=None, progress=None, where=None):
    """The MIG step for one node, used by the rollout, its rollback and every node_mig_config action:
    set the label (or re-trigger) -> follow ``nvidia.com/mig.config.state`` within ``apply_timeout`` (once
    more after an un-wedge when ``unwedge_on_timeout``) -> verify allocatable and GFD labels against
    ``planned`` (preflight.plan_one's entry) within ``verify_timeout`` -> clear the in-progress marker (unless
    ``clear`` is false: the caller still holds the node). It neither drains nor uncordons.

    Returns {final (success|failed|timeout|changed), states, rebooted, trigger, unwedged (after a timeout),
    mismatches, verified, node (the latest view), timings: {apply_s, verify_s}}. ``where`` (a dict), when
    given, has ``stage`` set to label, apply, verify or clear as the step goes (where an error stopped it).

    ``progress(step, message)``, when given, hears each MIG Manager state seen, ``applied`` and ``verifying``."""
    where = {} if where is None else where
    started = time.monotonic()
    where["stage"] = "label"
    node = node or ops.get_node(node_name)
    report = progress or (lambda step, message="": None)

    def on_state(state):  # success and failed are reported once verified, or as the node's outcome
        if state in ("pending", "rebooting"):
            report(state, "%s=%s" % (LABEL_MIG_STATE, state))
    triggered = trigger(ops, node, target, retrigger)
    labelled = triggered.pop("_node", None)  # the node the label patch returned: no read before the watch
    outcome = {"trigger": triggered, "mismatches": [], "verified": False, "timings": {}}
    where["stage"] = "apply"
    report("labelled", "%s=%s" % (LABEL_MIG_CONFIG, target))
    followed = follow_state(ops, node_name, target, time.monotonic() + apply_timeout, node=labelled, on_state=on_state)
    states = list(followed["states"])
    not_ready_seen = followed["not_ready_seen"]
    if followed["final"] == "timeout" and not states:
        # MIG Manager never set a state for our label: say whether it runs at all there
        outcome["not_running"] = mig_manager_not_running(ops, node_name, "gpu-operator")
    if followed["final"] == "timeout" and unwedge_on_timeout and not outcome.get("not_running"):
        outcome["unwedged"] = unwedge(ops, node_name, target)
        report("unwedged", "MIG Manager re-triggered after %ss" % apply_timeout)
        followed = follow_state(ops, node_name, target, time.monotonic() + apply_timeout, on_state=on_state)
        states += followed["states"]
        not_ready_seen = not_ready_seen or followed["not_ready_seen"]
    outcome.update(final=followed["final"], states=states, rebooted=followed["rebooted"], node=followed["node"],
                   not_ready_seen=not_ready_seen)
    outcome["timings"]["apply_s"] = round(time.monotonic() - started, 3)
    if followed["final"] != "success":
        return outcome
    report("applied", "MIG Manager reported success for %s" % target)
    report("verifying", "allocatable and GFD labels against the plan")
    verifying = time.monotonic()
    where["stage"] = "verify"
    outcome["mismatches"], outcome["node"] = watch_verified(
        ops, node_name, planned["expected_resources"], planned.get("expected_gfd_labels"),
        time.monotonic() + verify_timeout, followed["node"])
    outcome["timings"]["verify_s"] = round(time.monotonic() - verifying, 3)
    outcome["verified"] = not outcome["mismatches"]
    if outcome["verified"] and clear:
        where["stage"] = "clear"
        outcome["node"] = clear_marker(ops, node_name)
    return outcome
