# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Dict-in, dict-out Kubernetes calls for the reconfiguration modules, with a request counter.

The official client's typed models are slow to build for large lists and watches; the modules only read a
few fields, so responses are decoded as plain JSON (``_preload_content=False``). Watches go through the
client's own ``kubernetes.watch.Watch``. Every call is counted so the benchmark can report API requests
per node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading
import time

try:
    from kubernetes import client as k8s_client
    from kubernetes import watch as k8s_watch
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover - kube.require_kubernetes reports the missing library
    k8s_client = None
    k8s_watch = None
    ApiException = Exception

# A watch is re-opened at most this often (seconds), so a flapping connection cannot become a poll loop.
WATCH_MIN_REOPEN_INTERVAL = 1.0


class RequestCounter(object):
    """Counts API requests by verb; shared by every worker thread of one module run."""

    def __init__(self):
        self._lock = threading.Lock()
        self.by_verb = {}

    def add(self, verb):
        with self._lock:
            self.by_verb[verb] = self.by_verb.get(verb, 0) + 1

    @property
    def total(self):
        with self._lock:
            return sum(self.by_verb.values())


class DeadlineExceeded(Exception):
    """A wait ran past its deadline; ``last`` holds the last object seen."""

    def __init__(self, message, last=None):
        super(DeadlineExceeded, self).__init__(message)
        self.last = last


def _decode(resp):
    data = resp.data
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    return json.loads(data) if data else {}


def labels_of(obj):
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def annotations_of(obj):
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


class KubeOps(object):
    """The calls the reconfiguration needs, on one ApiClient; safe to share between threads."""

    def __init__(self, api_client, counter=None):
        self.api_client = api_client
        self.core = k8s_client.CoreV1Api(api_client)
        self.policy = k8s_client.PolicyV1Api(api_client)
        self.coordination = k8s_client.CoordinationV1Api(api_client)
        self.custom = k8s_client.CustomObjectsApi(api_client)
        self.counter = counter or RequestCounter()

    # -- reads ---------------------------------------------------------------------------------------
    def get_node(self, name):
        self.counter.add("get")
        return _decode(self.core.read_node(name, _preload_content=False))

    def list_nodes(self, label_selector=None):
        self.counter.add("list")
        return _decode(self.core.list_node(label_selector=label_selector, _preload_content=False))

    def list_pods_on_node(self, node, label_selector=None):
        self.counter.add("list")
        return _decode(self.core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=%s" % node, label_selector=label_selector, _preload_content=False))

    def list_pods(self):
        """Every pod of the cluster (one request; for cluster-wide counts)."""
        self.counter.add("list")
        return _decode(self.core.list_pod_for_all_namespaces(_preload_content=False))

    def list_pdbs(self, namespace):
        self.counter.add("list")
        return _decode(self.policy.list_namespaced_pod_disruption_budget(namespace, _preload_content=False))

    def get_configmap(self, namespace, name):
        """The ConfigMap as a dict, or None when it does not exist."""
        self.counter.add("get")
        try:
            return _decode(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_cluster_policies(self):
        """ClusterPolicies (nvidia.com/v1), or [] when the CRD is not installed."""
        self.counter.add("list")
        try:
            return _decode(self.custom.list_cluster_custom_object(
                "nvidia.com", "v1", "clusterpolicies", _preload_content=False)).get("items") or []
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise

    def pod_log(self, namespace, name, tail_lines=200):
        self.counter.add("get")
        resp = self.core.read_namespaced_pod_log(name, namespace, tail_lines=tail_lines, _preload_content=False)
        data = resp.data
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else data

    # -- writes --------------------------------------------------------------------------------------
    def patch_node(self, name, body):
        """Merge-patch a node (labels/annotations/spec); ``None`` values delete keys."""
        self.counter.add("patch")
        return _decode(self.core.patch_node(
            name, body, _content_type="application/merge-patch+json", _preload_content=False))

    def evict(self, namespace, name, grace_period_seconds=None):
        self.counter.add("create")
        delete_options = None
        if grace_period_seconds is not None:
            delete_options = k8s_client.V1DeleteOptions(grace_period_seconds=grace_period_seconds)
        body = k8s_client.V1Eviction(
            metadata=k8s_client.V1ObjectMeta(name=name, namespace=namespace), delete_options=delete_options)
        self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)

    def delete_pod(self, namespace, name, grace_period_seconds=None):
        self.counter.add("delete")
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace_period_seconds,
                                        _preload_content=False)

    # -- watches -------------------------------------------------------------------------------------
    def watch(self, list_func, deadline, done, initial, **kwargs):
        """Follow ``list_func`` (a ``list_*`` method) from ``initial``'s resourceVersion until
        ``done(event_type, obj)`` returns True; returns that object. Raises DeadlineExceeded at
        ``deadline`` (time.monotonic()) with the last object seen. Re-opens the watch when the server
        closes it, and re-lists once on 410 Gone."""
        resource_version = (initial.get("metadata") or {}).get("resourceVersion")
        last = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded("deadline reached", last)
            opened = time.monotonic()
            self.counter.add("watch")
            watcher = k8s_watch.Watch()
            try:
                for event in watcher.stream(list_func, resource_version=resource_version,
                                            timeout_seconds=max(1, int(remaining + 0.999)),
                                            allow_watch_bookmarks=True, deserialize=False, **kwargs):
                    if not isinstance(event, dict):
                        continue
                    obj = event.get("object") or {}
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") == "BOOKMARK":
                        continue
                    last = obj
                    if done(event.get("type"), obj):
                        watcher.stop()
                        return obj
            except ApiException as exc:
                if exc.status != 410:
                    raise
                # Our resourceVersion is too old: re-list and watch from the fresh one.
                self.counter.add("list")
                listing = _decode(list_func(_preload_content=False, **kwargs))
                for item in listing.get("items") or []:
                    last = item
                    if done("ADDED", item):
                        return item
                resource_version = (listing.get("metadata") or {}).get("resourceVersion")
            finally:
                watcher.stop()
            pause = WATCH_MIN_REOPEN_INTERVAL - (time.monotonic() - opened)
            if pause > 0 and time.monotonic() + pause < deadline:
                time.sleep(pause)

    def watch_node(self, name, deadline, done, initial):
        """Watch one node until ``done(node)``; ``initial`` is a node just read (for its resourceVersion)."""
        if done(initial):
            return initial
        return self.watch(self.core.list_node, deadline, lambda _t, obj: done(obj), initial,
                          field_selector="metadata.name=%s" % name)
