# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""GPU-scoped, PDB-aware node drain that remembers the cordon it found.

Why not kubernetes.core.k8s_drain: it fails on the first HTTP 429 from a PodDisruptionBudget, only warns
when its wait times out, has no GPU-only pod filter, returns no structured list of evicted pods and
cannot tell an admin's cordon from its own (ansible-collections/kubernetes.core
plugins/modules/k8s_drain.py and issues #474, #593, #797; kubernetes/kubernetes#37592). This module fills exactly those gaps.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    ApiException,
    DeadlineExceeded,
    annotations_of,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    GPU_RUNTIME_CLASSES,
    is_gpu_pod,
    pod_gpu_requests,
    pod_ref,
    unschedulable,
)

# Annotation holding the node's spec.unschedulable as found before our cordon ("true"/"false").
PRIOR_UNSCHEDULABLE_ANNOTATION = "gpufleet.io/prior-unschedulable"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


class DrainError(Exception):
    """A drain that cannot go on; ``result`` carries the structured state for the caller."""

    def __init__(self, message, result=None):
        super(DrainError, self).__init__(message)
        self.result = result or {}


# -- pure logic ----------------------------------------------------------------------------------------

def _owner_kinds(pod):
    return [ref.get("kind") for ref in (pod.get("metadata") or {}).get("ownerReferences") or []]


def _has_emptydir(pod):
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def summarize_pod(pod, reason=None):
    meta = pod.get("metadata") or {}
    out = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
           "gpu_resources": pod_gpu_requests(pod)}
    if reason:
        out["reason"] = reason
    return out


def classify_pods(pods, pod_scope="gpu", runtime_classes=GPU_RUNTIME_CLASSES, force=False,
                  delete_emptydir_data=False):
    """Split a node's pods into what the drain evicts, waits for, leaves alone, and what blocks it.

    Returns a dict with lists ``evict``, ``terminating``, ``left_alone`` and ``blockers`` of pod summaries.
    DaemonSet pods are never evicted: GPU Operator operands are paused by MIG Manager through their
    ``nvidia.com/gpu.deploy.*`` labels (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go), and a DaemonSet would
    recreate anything else on the cordoned node anyway.
    """
    plan = {"evict": [], "terminating": [], "left_alone": [], "blockers": []}
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
            plan["left_alone"].append(summarize_pod(pod, "static (mirror) pod"))
            continue
        if "DaemonSet" in _owner_kinds(pod):
            plan["left_alone"].append(summarize_pod(pod, "DaemonSet pod"))
            continue
        if phase in ("Succeeded", "Failed"):
            plan["left_alone"].append(summarize_pod(pod, "finished (%s)" % phase))
            continue
        if pod_scope == "gpu" and not is_gpu_pod(pod, runtime_classes):
            plan["left_alone"].append(summarize_pod(pod, "does not use a GPU"))
            continue
        if meta.get("deletionTimestamp"):
            plan["terminating"].append(summarize_pod(pod, "already terminating"))
            continue
        if not _owner_kinds(pod) and not force:
            plan["blockers"].append(summarize_pod(
                pod, "not managed by a controller: it would not be recreated (set force to evict it)"))
            continue
        if _has_emptydir(pod) and not delete_emptydir_data:
            plan["blockers"].append(summarize_pod(
                pod, "uses emptyDir, whose data eviction deletes (set delete_emptydir_data to evict it)"))
            continue
        plan["evict"].append(summarize_pod(pod))
    return plan


def _expression_matches(expression, labels):
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector, labels):
    """Kubernetes LabelSelector semantics (the Python client has no matcher). A PDB with an empty selector
    ({}) selects every pod of its namespace (policy/v1); a null selector selects none."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(expr, labels) for expr in selector.get("matchExpressions") or [])


def budgets_for(pod, pdbs):
    meta = pod.get("metadata") or {}
    return [pdb for pdb in pdbs
            if (pdb.get("metadata") or {}).get("namespace") == meta.get("namespace")
            and selector_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels"))]


def blocking_budgets(pods_to_evict, pdbs):
    """Budgets that allow fewer disruptions than the pods we would evict under them.

    Returns [{namespace, name, disruptions_allowed, pods: [ns/name...]}], the drain's predicted blocks
    (list budgets with disruptionsAllowed before draining: kubernetes.core k8s_drain fails on the first PDB refusal,
    ansible-collections/kubernetes.core#797)."""
    covered = {}
    for pod in pods_to_evict:
        for pdb in budgets_for(pod, pdbs):
            key = ((pdb.get("metadata") or {}).get("namespace"), (pdb.get("metadata") or {}).get("name"))
            entry = covered.setdefault(key, {"pdb": pdb, "pods": []})
            entry["pods"].append(pod_ref(pod))
    blocking = []
    for (namespace, name), entry in sorted(covered.items()):
        allowed = int((entry["pdb"].get("status") or {}).get("disruptionsAllowed") or 0)
        if allowed < len(entry["pods"]):
            blocking.append({"namespace": namespace, "name": name, "disruptions_allowed": allowed,
                             "pods": sorted(entry["pods"])})
    return blocking


# -- cordon bookkeeping ----------------------------------------------------------------------------------

def cordon_patch(node):
    """The merge patch that cordons ``node`` and records what it found, or None when nothing is needed."""
    annotations = annotations_of(node)
    cordoned = unschedulable(node)
    if PRIOR_UNSCHEDULABLE_ANNOTATION in annotations:
        # We cordoned it earlier (an interrupted run): keep the first record, it holds the admin's state.
        return None if cordoned else {"spec": {"unschedulable": True}}
    return {"metadata": {"annotations": {PRIOR_UNSCHEDULABLE_ANNOTATION: "true" if cordoned else "false"}},
            "spec": {"unschedulable": True}}


def uncordon_patch(node):
    """(patch or None, outcome) restoring the schedulability recorded by ``cordon_patch``.

    outcome: ``uncordoned``, ``left-cordoned`` (it was cordoned before us) or ``no-record``."""
    prior = annotations_of(node).get(PRIOR_UNSCHEDULABLE_ANNOTATION)
    if prior is None:
        return None, "no-record"
    if prior == "true":
        return {"metadata": {"annotations": {PRIOR_UNSCHEDULABLE_ANNOTATION: None}}}, "left-cordoned"
    return ({"metadata": {"annotations": {PRIOR_UNSCHEDULABLE_ANNOTATION: None}}, "spec": {"unschedulable": None}},
            "uncordoned")


# -- the drain against the API ---------------------------------------------------------------------------

# Conflicts in a row before a cordon or uncordon gives up (each one a change by another writer between our read and
# our write; the node's status heartbeats do not change the object's spec, but do change its resourceVersion).
CONFLICT_RETRIES = 5


class NodeDrainer(object):
    """Drain one node through ``KubeOps``; every method returns plain data for module results."""

    def __init__(self, ops, node_name, pod_scope="gpu", runtime_classes=GPU_RUNTIME_CLASSES,
                 force=False, delete_emptydir_data=False, disable_eviction=False, grace_period=None,
                 retry_delay=5.0):
        self.ops = ops
        self.node_name = node_name
        self.pod_scope = pod_scope
        self.runtime_classes = runtime_classes
        self.force = force
        self.delete_emptydir_data = delete_emptydir_data
        self.disable_eviction = disable_eviction
        self.grace_period = grace_period
        self.retry_delay = retry_delay
        self.node = None  # the node as drain_node's cordon left it
        self.evicted = []  # every pod evicted so far, kept when a later request fails

    def read_node(self):
        try:
            return self.ops.get_node(self.node_name)
        except ApiException as exc:
            if exc.status == 404:
                raise DrainError("node %s not found" % self.node_name)
            raise

    def plan(self, node=None):
        """What a drain would do now: pods to evict/wait for/skip, blockers, blocking budgets."""
        node = node or self.read_node()
        listing = self.ops.list_pods_on_node(self.node_name)
        pods = listing.get("items") or []
        plan = classify_pods(pods, self.pod_scope, self.runtime_classes, self.force, self.delete_emptydir_data)
        by_ref = dict((pod_ref(pod), pod) for pod in pods)
        namespaces = sorted(set(p["namespace"] for p in plan["evict"]))
        pdbs = []
        for namespace in namespaces:
            pdbs.extend(self.ops.list_pdbs(namespace).get("items") or [])
        evict_pods = [by_ref["%s/%s" % (p["namespace"], p["name"])] for p in plan["evict"]]
        plan["blocking_budgets"] = [] if self.disable_eviction else blocking_budgets(evict_pods, pdbs)
        plan["_pdbs"] = pdbs
        plan["_pods"] = by_ref
        plan["_listed"] = listing.get("metadata") or {}  # its resourceVersion: wait_gone watches from there
        plan["node_unschedulable"] = unschedulable(node)
        plan["cordon_needed"] = cordon_patch(node) is not None
        plan["node"] = node
        return plan

    def patch_as_read(self, node, make_patch):
        """Send ``make_patch(node)`` (a merge patch, or None for nothing to do) on the condition that the node is
        still as read (its resourceVersion): when it changed meanwhile (409 Conflict: an admin's cordon, another
        writer), read it again and make the patch anew, so a decision is never taken on a stale read.
        Returns (patch sent or None, the node after)."""
        for attempt in range(CONFLICT_RETRIES):
            patch = make_patch(node)
            if patch is None:
                return None, node
            version = (node.get("metadata") or {}).get("resourceVersion")
            if version:
                patch = dict(patch, metadata=dict(patch.get("metadata") or {}, resourceVersion=version))
            try:
                return patch, self.ops.patch_node(self.node_name, patch)
            except ApiException as exc:
                if exc.status != 409 or attempt == CONFLICT_RETRIES - 1:
                    raise
                node = self.read_node()
        return None, node  # not reached: the last attempt returns or raises

    def cordon(self, node):
        patch, node = self.patch_as_read(node, cordon_patch)
        return patch is not None, node

    def uncordon(self, node=None, also=None):
        """Restore the schedulability found; ``also``: a merge patch of metadata to apply in the same request
        (sent even when there is nothing to uncordon)."""
        outcome = []

        def make(current):
            patch, found = uncordon_patch(current)
            outcome[:] = [patch is not None, found]
            if not also:
                return patch
            merged = {"metadata": dict((key, dict(value)) for key, value in also.get("metadata", {}).items())}
            for key, value in ((patch or {}).get("metadata") or {}).items():
                merged["metadata"].setdefault(key, {}).update(value)
            if patch and "spec" in patch:
                merged["spec"] = patch["spec"]
            return merged

        self.patch_as_read(node or self.read_node(), make)
        return outcome[0], outcome[1]

    def evict_all(self, plan, deadline):
        """Evict the planned pods, retrying PDB refusals (429) until ``deadline``.

        Returns (evicted, gone_before, blocked) where blocked maps pod ref -> [budget ns/name]."""
        pending = list(plan["evict"])
        evicted, gone_before = [], []
        while True:
            still_blocked = []
            for pod in pending:
                try:
                    if self.disable_eviction:
                        self.ops.delete_pod(pod["namespace"], pod["name"], self.grace_period)
                    else:
                        self.ops.evict(pod["namespace"], pod["name"], self.grace_period)
                    evicted.append(pod)
                    self.evicted.append(pod)
                except ApiException as exc:
                    if exc.status == 404:
                        gone_before.append(pod)
                    elif exc.status == 429:
                        still_blocked.append(pod)
                    else:
                        raise DrainError("evicting pod %s/%s from node %s failed: HTTP %s %s" % (
                            pod["namespace"], pod["name"], self.node_name, exc.status, exc.reason),
                            {"evicted": evicted})
            pending = still_blocked
            if not pending:
                return evicted, gone_before, {}
            if time.monotonic() + self.retry_delay > deadline:
                blocked = {}
                for pod in pending:
                    full = plan["_pods"].get("%s/%s" % (pod["namespace"], pod["name"]))
                    blocked["%s/%s" % (pod["namespace"], pod["name"])] = [
                        "%s/%s" % (b["metadata"]["namespace"], b["metadata"]["name"])
                        for b in budgets_for(full or {}, plan["_pdbs"])] or ["unknown budget"]
                return evicted, gone_before, blocked
            time.sleep(self.retry_delay)

    def wait_gone(self, pods, deadline, listed=None):
        """Watch the node's pods until none of ``pods`` (by uid) remains; returns refs still present on
        timeout (empty list when all are gone). ``listed``: the metadata of a list of the node's pods made before
        the evictions (the drain plan's): the watch starts from its resourceVersion, so no list is needed here."""
        waiting = dict((p["uid"], "%s/%s" % (p["namespace"], p["name"])) for p in pods)
        if not waiting:
            return []
        if listed and listed.get("resourceVersion"):
            listing = {"metadata": listed}
        else:
            listing = self.ops.list_pods_on_node(self.node_name)
            present = set(((item.get("metadata") or {}).get("uid")) for item in listing.get("items") or [])
            for uid in list(waiting):
                if uid not in present:
                    waiting.pop(uid)
            if not waiting:
                return []

        def done(event_type, pod):
            uid = (pod.get("metadata") or {}).get("uid")
            if event_type == "DELETED" or (pod.get("spec") or {}).get("nodeName") != self.node_name:
                waiting.pop(uid, None)
            return not waiting

        def relisted(items):
            # After a broken watch: a pod deleted meanwhile is simply absent (its DELETED event was missed).
            present = set((item.get("metadata") or {}).get("uid") for item in items)
            for uid in list(waiting):
                if uid not in present:
                    waiting.pop(uid)
            return not waiting

        try:
            self.ops.watch(self.ops.lister("/api/v1/pods"), deadline, done, listing, relisted=relisted,
                           field_selector="spec.nodeName=%s" % self.node_name)
        except DeadlineExceeded:
            return sorted(waiting.values())
        return []


def public_plan(plan):
    """A drain plan without the raw objects, for module results."""
    return dict((k, v) for k, v in plan.items() if not k.startswith("_") and k != "node")


def drain_node(drainer, timeout, check_mode=False, plan=None):
    """Cordon, evict and wait, as one step. Returns a result dict; raises DrainError (with the same keys in
    ``result``) when blocked or late. The node stays cordoned on failure and the result says so.
    ``plan``: drainer.plan()'s result read just now (the rollout's fresh per-node plan), instead of reading again."""
    deadline = time.monotonic() + timeout
    plan = plan or drainer.plan()
    result = public_plan(plan)
    result["planned_evictions"] = result.pop("evict")
    result.update({"node": drainer.node_name, "evicted": [], "changed": False, "cordoned": False})
    if plan["blockers"]:
        raise DrainError("node %s: drain refused before any change, pods that cannot be evicted safely: %s" % (
            drainer.node_name, ", ".join("%s/%s (%s)" % (p["namespace"], p["name"], p["reason"])
                                         for p in plan["blockers"])), result)
    if check_mode:
        result["changed"] = plan["cordon_needed"] or bool(plan["evict"])
        result["would_evict"] = plan["evict"]
        return result
    changed, node = drainer.cordon(plan["node"])
    drainer.node = node  # the node as cordoned, for a caller that goes on with it (the rollout's MIG step)
    result["changed"] = changed
    result["cordoned"] = True
    evicted, gone_before, blocked = drainer.evict_all(plan, deadline)
    result["evicted"] = evicted
    result["gone_before_eviction"] = gone_before
    result["changed"] = result["changed"] or bool(evicted)
    if blocked:
        budgets = sorted(set(b for refs in blocked.values() for b in refs))
        result["blocked_by"] = budgets
        result["not_evicted"] = sorted(blocked)
        raise DrainError("node %s: eviction blocked by PDB %s until the deadline (%ss); pods not evicted: %s; "
                         "node left cordoned" % (drainer.node_name, ", ".join(budgets), timeout,
                                                 ", ".join(sorted(blocked))), result)
    remaining = drainer.wait_gone(evicted + plan["terminating"], deadline, plan.get("_listed"))
    if remaining:
        result["still_running"] = remaining
        raise DrainError("node %s: evicted pods still present at the deadline (%ss): %s; node left cordoned" % (
            drainer.node_name, timeout, ", ".join(remaining)), result)
    return result
