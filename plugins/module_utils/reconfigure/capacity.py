# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Will the pods a MIG rollout evicts find GPUs again? A cluster-wide count per GPU resource, before any change.

After all-balanced, a pod asking ``nvidia.com/gpu: 1`` finds no whole GPU on a mixed-strategy node
(NVIDIA/k8s-device-plugin README: MIG devices are advertised as ``nvidia.com/mig-<profile>`` instead), and it stays Pending.
The count is per resource and ignores per-node packing (a pod asking 2 needs both on one node), so it can
only under-report: a warning here is certain, no warning is likely but not certain.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    node_gpu_allocatable,
    pod_gpu_requests,
    pod_ref,
    shares_expected,
    unschedulable,
)


def shortages(plans, nodes, pods):
    """GPU resources that the pods to evict ask for in total and the cluster will not have free once the plan
    is done, as a list of ``{"resource", "wanted", "room", "pods": [{"pod", "asks"}]}`` sorted by resource
    (empty when every evicted pod finds room). ``plans``: mig_rollout plan entries; ``nodes``/``pods``: every
    Node and Pod. Any GPU resource name counts alike: whole GPUs, MIG slices and their time-sliced
    ``.shared`` forms (gpu_labels.pod_gpu_requests / node_gpu_allocatable).

    Room is counted node by node and never below zero: a node whose device plugin is restarting advertises
    nothing for a moment while its pods still hold their devices, and that must not take room from others."""
    planned = dict((p["node"], p) for p in plans if not p.get("errors"))
    evicted = set(k for p in planned.values() for k in p.get("pods_to_evict") or [])
    capacity_of = {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        entry = planned.get(name)
        if entry is not None:
            if entry.get("admin_cordoned"):
                continue  # stays cordoned after the change: no room for anyone
            capacity_of[name] = shares_expected(entry.get("expected_resources"), node)  # time-sliced/MPS: shares
        elif not unschedulable(node):
            capacity_of[name] = node_gpu_allocatable(node)
    used_on = {}
    wanted, asking = {}, {}
    for pod in pods:
        key = pod_ref(pod)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requests = pod_gpu_requests(pod)
        if key in evicted:
            for resource, count in requests.items():
                wanted[resource] = wanted.get(resource, 0) + count
                asking.setdefault(resource, []).append({"pod": key, "asks": count})
            continue
        used = used_on.setdefault((pod.get("spec") or {}).get("nodeName"), {})
        for resource, count in requests.items():
            used[resource] = used.get(resource, 0) + count  # stays where it is and keeps its devices
    free = {}
    for name, capacity in capacity_of.items():
        used = used_on.get(name, {})
        for resource, count in capacity.items():
            free[resource] = free.get(resource, 0) + max(0, count - used.get(resource, 0))
    return [{"resource": resource, "wanted": wanted[resource], "room": free.get(resource, 0),
             "pods": sorted(asking[resource], key=lambda a: a["pod"])}
            for resource in sorted(wanted) if wanted[resource] > free.get(resource, 0)]


def shortage_text(shortage, limit=3):
    """One line for a shortage: what the pods ask for in all, the room there will be, and the pods (the first
    ``limit`` with their requests, then how many more; all of them when ``limit`` is None)."""
    pods = shortage["pods"] if limit is None else shortage["pods"][:limit]
    more = len(shortage["pods"]) - len(pods)
    pods_text = ", ".join("%s (%d)" % (a["pod"], a["asks"]) for a in pods) + (" and %d more" % more if more > 0 else "")
    return ("pods to evict ask for %d %s in all, but after the change the cluster has room for %d: "
            "%s would stay Pending (they need a config that keeps %s, or new requests)" % (
                shortage["wanted"], shortage["resource"], shortage["room"], pods_text, shortage["resource"]))


def eviction_warnings(plans, nodes, pods):
    """shortages() as text lines (the first three pods of each)."""
    return [shortage_text(s) for s in shortages(plans, nodes, pods)]
