# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Follow the pods a rollout evicted until their replacements run again (or the time is up).

An evicted pod comes back as a new pod of the same controller: a ReplicaSet's or a Job's pod under a new name,
a StatefulSet's under the same name - always with a new uid and the controller's uid in its ownerReferences
(the ``controller: true`` entry). A replacement is a pod of that controller that did not exist when the rollout
started (``known`` uids) and is not itself one of the evicted pods. Replacements are given to the evictions of
their controller in eviction order, oldest pod first; a replacement the rollout evicted again (it had landed on a
node changed later) hands its place on to the next one, so both evictions see the pod that runs in the end.
A pod without a controller is not recreated.

The cost is one list and one watch of the pods in the evicted pods' namespaces (a namespaced request for one
namespace, cluster-wide for several), never a request per pod.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    CONNECTION_ERRORS,
    ApiException,
    DeadlineExceeded,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import api_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import connection_reason

BACK_PHASES = ("Running", "Succeeded")
# Once every pod not back is a replacement the scheduler has refused (PodScheduled False, Unschedulable) and that
# stays so for this long, the follow ends: the rollout's nodes are done, waiting out the timeout would not change it.
SETTLE_S = 5.0
NO_CONTROLLER = "not recreated (no controller)"
NO_REPLACEMENT = "no replacement pod seen"


def controller_of(pod):
    """The pod's controller ownerReference as {kind, name, uid}, or None (a bare pod)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return {"kind": ref.get("kind"), "name": ref.get("name"), "uid": ref.get("uid")}
    return None


def eviction(node, pod):
    """What to remember of a pod evicted from ``node``: where it was, its uid, creation time and controller."""
    meta = pod.get("metadata") or {}
    return {"node": node, "pod": "%s/%s" % (meta.get("namespace"), meta.get("name")), "namespace": meta.get("namespace"),
            "uid": meta.get("uid"), "created": meta.get("creationTimestamp") or "", "owner": controller_of(pod)}


def pending_reason(pod):
    """Why a pod is not running: the scheduler's message (PodScheduled condition), else where it waits."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason") or "not scheduled"
    where = (pod.get("spec") or {}).get("nodeName")
    phase = status.get("phase") or "Pending"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "terminating"
    return "%s on %s" % (phase, where) if where else "%s, not scheduled yet" % phase


def _ref(pod):
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def outcome(evictions, pods, known):
    """Per node, where the pods evicted from it are now. ``evictions`` in eviction order (eviction()),
    ``pods`` the pods now (of the evicted pods' namespaces), ``known`` the pod uids before the rollout.

    Returns ({node: {"evicted", "returned", "returned_on" {node: count}, "pending" [{"pod", "replaces",
    "reason"}], "not_back" [{"pod", "reason"}]}}, done) - done when every pod with a controller is back
    (Running, or Succeeded for a Job's)."""
    evicted_uids = set(e["uid"] for e in evictions)
    by_owner = collections.OrderedDict()
    for e in evictions:
        if e["owner"]:
            by_owner.setdefault(e["owner"]["uid"], []).append(e)
    current = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = controller_of(pod)
        if owner and owner["uid"] in by_owner and meta.get("uid") not in known and meta.get("uid") not in evicted_uids \
                and not meta.get("deletionTimestamp"):
            current.setdefault(owner["uid"], []).append(pod)
    final = {}  # eviction uid -> the replacement pod its line ends with (or None)
    for owner_uid, evs in by_owner.items():
        lines, line_of = [], {}
        for e in evs:
            if e["uid"] in known:
                line = {"pod": None}
                lines.append(line)
                line_of[e["uid"]] = line
        waiting = collections.deque(lines)
        replacements = [(e["created"], e["pod"], e["uid"], None) for e in evs if e["uid"] not in known] + [
            ((p.get("metadata") or {}).get("creationTimestamp") or "", _ref(p), None, p)
            for p in current.get(owner_uid, [])]
        for _created, _name, evicted_uid, pod in sorted(replacements, key=lambda r: (r[0], r[1])):
            if evicted_uid is not None:  # a replacement evicted again: its line still waits for a pod
                line = waiting.popleft() if waiting else {"pod": None}
                line_of[evicted_uid] = line
                waiting.append(line)
            elif waiting:
                waiting.popleft()["pod"] = pod
        for e in evs:
            final[e["uid"]] = line_of[e["uid"]]["pod"] if e["uid"] in line_of else None
    result, done = collections.OrderedDict(), True
    for e in evictions:
        row = result.setdefault(e["node"], {"evicted": 0, "returned": 0, "returned_on": {}, "pending": [],
                                            "not_back": []})
        row["evicted"] += 1
        if not e["owner"]:
            row["not_back"].append({"pod": e["pod"], "reason": NO_CONTROLLER})
            continue
        pod = final.get(e["uid"])
        if pod is None:
            row["not_back"].append({"pod": e["pod"], "reason": NO_REPLACEMENT})
            done = False
        elif (pod.get("status") or {}).get("phase") in BACK_PHASES:
            where = (pod.get("spec") or {}).get("nodeName") or "?"
            row["returned"] += 1
            row["returned_on"][where] = row["returned_on"].get(where, 0) + 1
        else:
            row["pending"].append({"pod": _ref(pod), "replaces": e["pod"], "reason": pending_reason(pod)})
            done = False
    return dict(result), done


def follow(ops, evictions, known, timeout):
    """Watch the evicted pods' namespaces until every evicted pod with a controller is back or ``timeout``
    seconds pass; returns outcome()'s per-node dict at that moment."""
    if not evictions:
        return {}
    namespaces = sorted(set(e["namespace"] for e in evictions))
    path = "/api/v1/namespaces/%s/pods" % namespaces[0] if len(namespaces) == 1 else "/api/v1/pods"
    list_func = ops.lister(path)
    try:
        listing = ops.list_pods_in_namespace(namespaces[0]) if len(namespaces) == 1 else ops.list_pods()
    except (ApiException,) + CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
        return stopped(outcome(evictions, [], known)[0], exc)
    pods = collections.OrderedDict(((p.get("metadata") or {}).get("uid"), p) for p in listing.get("items") or []
                                   if (p.get("metadata") or {}).get("namespace") in namespaces)
    state = {"result": outcome(evictions, pods.values(), known)}
    if state["result"][1] or timeout <= 0:
        return state["result"][0]
    owners = set(e["owner"]["uid"] for e in evictions if e["owner"])
    deadline = time.monotonic() + timeout
    state["refused"] = refused_only(state["result"][0], pods)

    def done(event_type, pod):
        meta = pod.get("metadata") or {}
        owner = controller_of(pod)
        if meta.get("namespace") not in namespaces or not owner or owner["uid"] not in owners:
            return False
        if event_type == "DELETED":
            pods.pop(meta.get("uid"), None)
        else:
            pods[meta.get("uid")] = pod
        state["result"] = outcome(evictions, pods.values(), known)
        refused, state["refused"] = state["refused"], refused_only(state["result"][0], pods)
        return state["result"][1] or refused != state["refused"]  # back, or the settle clock starts/stops

    since = listing
    settle_until = None
    while not state["result"][1]:
        settle_until = (settle_until or time.monotonic() + SETTLE_S) if state["refused"] else None
        try:
            since = ops.watch(list_func, min(deadline, settle_until or deadline), done, since) or since
        except DeadlineExceeded:
            break  # the timeout, or refused replacements that stayed refused for SETTLE_S
        except (ApiException,) + CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
            return stopped(state["result"][0], exc)
    return state["result"][0]


def refused_only(result, pods):
    """True when something is not back and each pod not back is a replacement the scheduler refused
    (PodScheduled False, reason Unschedulable) or a pod nothing recreates."""
    by_ref = dict((_ref(p), p) for p in pods.values())
    waiting = False
    for row in result.values():
        if any(p["reason"] != NO_CONTROLLER for p in row["not_back"]):
            return False
        for pending in row["pending"]:
            conditions = ((by_ref.get(pending["pod"]) or {}).get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
                       for c in conditions):
                return False
            waiting = True
    return waiting


def stopped(result, exc):
    """``result`` (outcome()'s per-node dict) when the pods could not be followed to the end because the API
    server failed (unreachable past the retries, or an error status): each pod not seen back says so, instead
    of "no replacement pod seen". Following is a report, not a step: the rollout's rows must not be lost to it."""
    why = connection_reason(exc) if isinstance(exc, CONNECTION_ERRORS) else api_reason(exc)
    note = "not followed to the end: Kubernetes API server %s (%s)" % (
        "unreachable" if isinstance(exc, CONNECTION_ERRORS) else "error", why)
    for row in result.values():
        for entry in row["not_back"]:
            if entry["reason"] == NO_REPLACEMENT:
                entry["reason"] = "%s; %s" % (NO_REPLACEMENT, note)
        for entry in row["pending"]:
            entry["reason"] = "%s; %s" % (entry["reason"], note)
    return result


def lines(node, followed):
    """Text lines for the summary: how many came back and where, then each pod still away and why."""
    if not followed or not followed["evicted"]:
        return []
    where = ", ".join("%d on %s" % (count, name) for name, count in sorted(followed["returned_on"].items()))
    out = ["%s: %d of %d evicted pods running again%s" % (node, followed["returned"], followed["evicted"],
                                                          ": " + where if where else "")]
    out.extend("%s: %s (replaces %s) Pending: %s" % (node, p["pod"], p["replaces"], p["reason"])
               for p in followed["pending"])
    out.extend("%s: %s %s" % (node, p["pod"], p["reason"]) for p in followed["not_back"])
    return out
