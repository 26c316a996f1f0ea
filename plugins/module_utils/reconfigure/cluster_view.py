# -*- coding: utf-8 -*-
"""The GPU part of the cluster, kept current for a whole rollout by one list and one watch of nodes and of pods.

The room check before each node (reconfigure.capacity) needs every node and every GPU pod. Listing them at each
node start costs two requests and a decode of every object of the cluster per node: N x N objects over a
1000-node rollout. This view lists once and then follows the watches (k8s.api.KubeOps.watch re-lists after drops,
stalls and 410), keeping only the fields the count reads. Like an informer, it can lag the server by the watch's
delivery time; the count it serves was already a moment's picture (docs/reconfigure.md says what the check can
miss). When a watch has ended on an error it could not ride out, snapshot() returns None and the caller lists.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import pod_gpu_requests

# Far beyond any rollout: the watches end with the module's process (daemon threads).
FOREVER_S = 30 * 24 * 3600


def node_fields(node):
    """What capacity.shortages and gpu_labels.shares_expected read of a Node."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {},
                         "resourceVersion": meta.get("resourceVersion")},
            "spec": {"unschedulable": (node.get("spec") or {}).get("unschedulable", False)},
            "status": {"allocatable": status.get("allocatable") or {}}}


def pod_fields(pod):
    """What capacity.shortages reads of a Pod, or None for a pod that asks for no GPU (it takes no room)."""
    if not pod_gpu_requests(pod):
        return None
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return {"metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")},
            "spec": {"nodeName": spec.get("nodeName"),
                     "containers": [{"resources": c.get("resources") or {}} for c in spec.get("containers") or []],
                     "initContainers": [{"resources": c.get("resources") or {}} for c in spec.get("initContainers") or []]},
            "status": {"phase": (pod.get("status") or {}).get("phase")}}


class _Followed(object):
    """One kind (nodes or pods) by uid-less key, fed by a list then a watch on its own thread."""

    def __init__(self, name, project, key):
        self.name, self.project, self.key = name, project, key
        self.items = {}
        self.lock = threading.Lock()
        self.error = None
        self.running = False

    def replace(self, items):
        fresh = {}
        for obj in items:
            kept = self.project(obj)
            if kept is not None:
                fresh[self.key(obj)] = kept
        with self.lock:
            self.items = fresh

    def apply(self, event_type, obj):
        kept = None if event_type == "DELETED" else self.project(obj)
        with self.lock:
            if kept is None:
                self.items.pop(self.key(obj), None)
            else:
                self.items[self.key(obj)] = kept
        return False  # never done: the watch runs for the whole rollout

    def values(self):
        with self.lock:
            return list(self.items.values())


def _node_key(obj):
    return (obj.get("metadata") or {}).get("name")


def _pod_key(obj):
    meta = obj.get("metadata") or {}
    return (meta.get("namespace"), meta.get("name"))


class ClusterView(object):
    """Nodes and GPU pods, current to the watches. ``ops_factory()`` gives a KubeOps per watch thread."""

    def __init__(self, ops_factory):
        self.ops_factory = ops_factory
        self.nodes = _Followed("nodes", node_fields, _node_key)
        self.pods = _Followed("pods", pod_fields, _pod_key)

    def start(self):
        """List both kinds (on this thread: an error here is the caller's), then follow each on its own thread."""
        for followed, path, lister in ((self.nodes, "/api/v1/nodes", "list_nodes"), (self.pods, "/api/v1/pods", "list_pods")):
            ops = self.ops_factory()
            listing = getattr(ops, lister)()
            followed.replace(listing.get("items") or [])
            followed.running = True
            thread = threading.Thread(target=self._follow, args=(ops, followed, path, listing),
                                      name="cluster-view-%s" % followed.name)
            thread.daemon = True
            thread.start()
        return self

    @staticmethod
    def _follow(ops, followed, path, listing):
        def relisted(items):
            followed.replace(items)
            return False
        try:
            ops.watch(ops.lister(path), time.monotonic() + FOREVER_S, followed.apply, listing, relisted=relisted)
        except Exception as exc:  # pylint: disable=broad-except  # any end of the watch: the caller lists instead
            followed.error = exc
        followed.running = False

    def snapshot(self):
        """(nodes, pods) as last seen, or None when a watch is no longer running."""
        if not (self.nodes.running and self.pods.running):
            return None
        return self.nodes.values(), self.pods.values()
