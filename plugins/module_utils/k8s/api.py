# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Dict-in, dict-out Kubernetes calls for the reconfiguration modules, with a request counter.

The official client's typed models are slow to build for large lists and watches; the modules only read a
few fields, so responses are decoded as plain JSON. Core (v1) requests go through the client's ApiClient
(its kubeconfig, auth, TLS and proxy handling) without CoreV1Api: in kubernetes >= 37 importing that class
builds a few hundred pydantic models, about 1 s of every module run on a small controller, for typed
results these modules never use. Watches go through the client's own ``kubernetes.watch.Watch``. Every
call is counted so the benchmark can report API requests per node.

Also the GPU Operator's own objects as the API holds them (ClusterPolicy, operand pods), read for the
modules that report on the operator (``operator.status`` stays pure).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc
import json
import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import CONNECTION_ERRORS, RETRY_STATUSES, backoff

try:
    from kubernetes import client as k8s_client
    from kubernetes import watch as k8s_watch
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover - k8s.client.require_kubernetes reports the missing library
    k8s_client = None
    k8s_watch = None
    ApiException = Exception

# A watch is re-opened at most this often (seconds), so a flapping connection cannot become a poll loop.
WATCH_MIN_REOPEN_INTERVAL = 1.0
# Each watch request asks the server to end it after at most WATCH_SERVER_TIMEOUT seconds (timeoutSeconds) and
# reads with a timeout WATCH_READ_MARGIN longer, so a connection that went silent (half-open: the server or a
# middlebox gone without a FIN/RST) is noticed within WATCH_SERVER_TIMEOUT + WATCH_READ_MARGIN seconds.
WATCH_SERVER_TIMEOUT = 60
WATCH_READ_MARGIN = 10
WATCH_CONNECT_TIMEOUT = 10
# Cluster-wide pod lists are read in pages of this many (kubectl's --chunk-size default) and each page is slimmed
# before the next is read: one 1000-node cluster's pods are ~60 MB of JSON, decoded whole they held a module
# at ~480 MB. https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks
LIST_PAGE_SIZE = 500


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
    if not data:
        return {}
    # The cyclic garbage collector would run over and over while json builds a list of thousands of objects (it
    # cannot make cycles): paused, decoding 1000 nodes' pods takes a third of the time.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return json.loads(data)
    finally:
        if paused:
            gc.enable()


def annotations_of(obj):
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


# Python keyword arguments of the typed list calls (as kubernetes.watch.Watch passes them) -> query names.
_QUERY_NAMES = {"watch": "watch", "resource_version": "resourceVersion", "timeout_seconds": "timeoutSeconds",
                "allow_watch_bookmarks": "allowWatchBookmarks", "field_selector": "fieldSelector",
                "label_selector": "labelSelector", "tail_lines": "tailLines",
                "grace_period_seconds": "gracePeriodSeconds"}


def query_params(params):
    out = []
    for key, value in params.items():
        if value is None:
            continue
        out.append((_QUERY_NAMES.get(key, key), ("true" if value else "false") if isinstance(value, bool) else value))
    return out


class KubeOps(object):
    """The calls the reconfiguration needs, on one ApiClient; safe to share between threads."""

    def __init__(self, api_client, counter=None, watch_timeout=None, read_margin=None):
        self.api_client = api_client
        self.watch_timeout = watch_timeout or WATCH_SERVER_TIMEOUT
        self.read_margin = WATCH_READ_MARGIN if read_margin is None else read_margin
        self.watch_errors = []  # transient errors watches recovered from (one line each), newest last
        self.policy = k8s_client.PolicyV1Api(api_client)
        self.custom = k8s_client.CustomObjectsApi(api_client)
        self.counter = counter or RequestCounter()

    def request(self, method, path, query=None, body=None, content_type=None, timeout=None):
        """One request; returns the unread urllib3 response, raises ApiException for a non-2xx status.
        ``timeout``: (connect, read) seconds, or None for none."""
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        api = self.api_client
        params = query_params(query or {})
        if hasattr(api, "param_serialize"):  # kubernetes >= 37 (pydantic generator)
            method, url, headers, body, _post = api.param_serialize(
                method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
            if not 200 <= resp.status <= 299:
                resp.read()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            return resp.response
        # kubernetes < 37: the legacy call_api raises for a non-2xx status itself.
        return api.call_api(path, method, query_params=params, header_params=headers, body=body,
                            auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                            _request_timeout=timeout)

    def lister(self, path):
        """A list function over ``path`` shaped like the typed client's, for watch() and kubernetes.watch.Watch."""
        def list_func(_preload_content=False, _request_timeout=None, **params):
            return self.request("GET", path, query=params, timeout=_request_timeout)
        return list_func

    # -- reads ---------------------------------------------------------------------------------------
    def get_node(self, name):
        self.counter.add("get")
        return _decode(self.request("GET", "/api/v1/nodes/%s" % name))

    def list_nodes(self, label_selector=None, managed_fields=True):
        """Every node (matching ``label_selector``), read in pages of LIST_PAGE_SIZE; without each node's
        metadata.managedFields unless ``managed_fields`` (the fleet report reads when a label was written from it)."""
        return self.list_paged("/api/v1/nodes", {"label_selector": label_selector}, keep_managed_fields=managed_fields)

    def list_pods_on_node(self, node, label_selector=None):
        self.counter.add("list")
        return _decode(self.request("GET", "/api/v1/pods", query={
            "field_selector": "spec.nodeName=%s" % node, "label_selector": label_selector}))

    def list_pods(self):
        """Every pod of the cluster (for cluster-wide counts), in pages, each pod without its metadata.managedFields
        (40 % of a pod's JSON; nothing here reads a pod's field owners)."""
        return self.list_paged("/api/v1/pods")

    def list_pods_in_namespace(self, namespace, label_selector=None):
        """The pods of ``namespace`` (the operator's: one per operand and node, thousands at 1000 nodes), in pages,
        without managedFields."""
        return self.list_paged("/api/v1/namespaces/%s/pods" % namespace, {"label_selector": label_selector})

    def list_paged(self, path, query=None, keep_managed_fields=False):
        """A list read in pages of LIST_PAGE_SIZE (kubectl's chunk size), one counted request each, so that one page
        is decoded at a time; managedFields dropped from each item unless ``keep_managed_fields``. The result has the
        first page's resourceVersion: every page of a chunked list is the same snapshot, so a watch from it misses
        nothing."""
        listing, items, token = None, [], None
        while True:
            self.counter.add("list")
            page_query = dict(query or {}, limit=LIST_PAGE_SIZE)
            if token:
                page_query["continue"] = token
            page = _decode(self.request("GET", path, query=page_query))
            for item in page.get("items") or []:
                if not keep_managed_fields:
                    (item.get("metadata") or {}).pop("managedFields", None)
                items.append(item)
            page["items"] = None
            listing = listing or page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
        listing["items"] = items
        for key in ("continue", "remainingItemCount"):
            (listing.get("metadata") or {}).pop(key, None)
        return listing

    def get_optional(self, path):
        """GET ``path`` as a dict, or None when it does not exist (404)."""
        self.counter.add("get")
        try:
            return _decode(self.request("GET", path))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_pod(self, namespace, name):
        """The pod as a dict, or None when it does not exist."""
        return self.get_optional("/api/v1/namespaces/%s/pods/%s" % (namespace, name))

    def list_pdbs(self, namespace):
        self.counter.add("list")
        return _decode(self.policy.list_namespaced_pod_disruption_budget(namespace, _preload_content=False))

    def list_configmaps(self, namespace):
        self.counter.add("list")
        return _decode(self.request("GET", "/api/v1/namespaces/%s/configmaps" % namespace))

    def get_configmap(self, namespace, name):
        """The ConfigMap as a dict, or None when it does not exist."""
        return self.get_optional("/api/v1/namespaces/%s/configmaps/%s" % (namespace, name))

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

    def list_nvidia_drivers(self):
        """NVIDIADrivers (nvidia.com/v1alpha1, cluster-scoped), or [] when the CRD is not installed."""
        try:
            return self.list_paged("/apis/nvidia.com/v1alpha1/nvidiadrivers").get("items") or []
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise

    def list_daemonsets_in_namespace(self, namespace):
        """The DaemonSets of ``namespace``, without managedFields."""
        return self.list_paged("/apis/apps/v1/namespaces/%s/daemonsets" % namespace).get("items") or []

    def get_daemonset(self, namespace, name):
        """The DaemonSet as a dict, or None when it does not exist."""
        return self.get_optional("/apis/apps/v1/namespaces/%s/daemonsets/%s" % (namespace, name))

    def list_controller_revisions(self, namespace, label_selector=None):
        """The ControllerRevisions of ``namespace`` (DaemonSet and StatefulSet template history)."""
        return self.list_paged("/apis/apps/v1/namespaces/%s/controllerrevisions" % namespace,
                               {"label_selector": label_selector}).get("items") or []

    def pod_log(self, namespace, name, tail_lines=200, container=None):
        self.counter.add("get")
        resp = self.request("GET", "/api/v1/namespaces/%s/pods/%s/log" % (namespace, name),
                            query={"tail_lines": tail_lines, "container": container})
        data = resp.data
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else data

    # -- writes --------------------------------------------------------------------------------------
    def patch_node(self, name, body):
        """Merge-patch a node (labels/annotations/spec); ``None`` values delete keys."""
        self.counter.add("patch")
        return _decode(self.request("PATCH", "/api/v1/nodes/%s" % name, body=body,
                                    content_type="application/merge-patch+json"))

    def create_pod(self, namespace, body):
        self.counter.add("create")
        return _decode(self.request("POST", "/api/v1/namespaces/%s/pods" % namespace, body=body,
                                    content_type="application/json"))

    def create_event(self, namespace, body):
        """Post a core/v1 Event (what ``kubectl describe`` lists for the object it names)."""
        self.counter.add("create")
        return _decode(self.request("POST", "/api/v1/namespaces/%s/events" % namespace, body=body,
                                    content_type="application/json"))

    def evict(self, namespace, name, grace_period_seconds=None):
        self.counter.add("create")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        _decode(self.request("POST", "/api/v1/namespaces/%s/pods/%s/eviction" % (namespace, name), body=body,
                             content_type="application/json"))

    def delete_pod(self, namespace, name, grace_period_seconds=None):
        self.counter.add("delete")
        _decode(self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, name),
                             query={"grace_period_seconds": grace_period_seconds}))

    # -- watches -------------------------------------------------------------------------------------
    def watch(self, list_func, deadline, done, initial, relisted=None, **kwargs):
        """Follow ``list_func`` (a ``list_*`` method) from ``initial``'s resourceVersion until
        ``done(event_type, obj)`` returns True; returns that object. Raises DeadlineExceeded at
        ``deadline`` (time.monotonic()) with the last object seen.

        The watch is re-opened when the server ends it (timeoutSeconds). After a broken, stalled (read timeout)
        or refused connection, a transient error status (RETRY_STATUSES) or 410 Gone it re-lists (each item is
        passed to ``done`` as ADDED, the whole list to ``relisted(items)`` when given, which returns True when the
        wait is over) and resumes from the list's resourceVersion, backing off while the server is unreachable.
        At the deadline after such errors, the last error is raised instead of DeadlineExceeded: the wait ended
        because the API was unavailable, not because the object never changed."""
        resource_version = (initial.get("metadata") or {}).get("resourceVersion")
        last = None
        relist = False
        failures = 0
        error = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if error is not None:
                    raise error
                raise DeadlineExceeded("deadline reached", last)
            opened = time.monotonic()
            # The server ends the watch after server_timeout; the client stops reading read_margin later (and
            # urllib3 never sends a request again after a read timeout): no watch outlives the deadline by more.
            server_timeout = max(1, min(self.watch_timeout, int(remaining + 0.999)))
            timeout = (WATCH_CONNECT_TIMEOUT, server_timeout + self.read_margin)
            watcher = k8s_watch.Watch(return_type="object")  # plain dicts: no model is built
            try:
                if relist:
                    self.counter.add("list")
                    listing = _decode(list_func(_preload_content=False, _request_timeout=timeout, **kwargs))
                    items = listing.get("items") or []
                    for item in items:
                        last = item
                        if done("ADDED", item):
                            return item
                    if relisted is not None and relisted(items):
                        return last
                    resource_version = (listing.get("metadata") or {}).get("resourceVersion")
                    relist = False
                self.counter.add("watch")
                for event in watcher.stream(list_func, resource_version=resource_version,
                                            timeout_seconds=server_timeout,
                                            allow_watch_bookmarks=True, _request_timeout=timeout, **kwargs):
                    if not isinstance(event, dict):
                        continue
                    obj = event.get("raw_object") or {}
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") == "BOOKMARK":
                        continue
                    last = obj
                    if done(event.get("type"), obj):
                        watcher.stop()
                        return obj
                failures, error = 0, None  # the server ended the watch as asked
            except ApiException as exc:
                if exc.status != 410 and exc.status not in RETRY_STATUSES:
                    raise
                # 410 Gone: our resourceVersion is too old; 5xx/429: the API server or its etcd is unwell.
                relist = True
                if exc.status != 410:
                    failures, error = failures + 1, exc
                    self._note(exc)
            except CONNECTION_ERRORS as exc:  # pylint: disable=catching-non-exception  # a tuple of exception classes
                relist = True
                failures, error = failures + 1, exc
                self._note(exc)
            finally:
                watcher.stop()
            pause = WATCH_MIN_REOPEN_INTERVAL - (time.monotonic() - opened)
            if failures:
                pause = max(pause, backoff(failures))
            if pause > 0:
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))

    def _note(self, exc):
        text = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        self.watch_errors = (self.watch_errors + [text])[-20:]

    def watch_node(self, name, deadline, done, initial):
        """Watch one node until ``done(node)``; ``initial`` is a node just read (for its resourceVersion)."""
        if done(initial):
            return initial
        return self.watch(self.lister("/api/v1/nodes"), deadline, lambda _t, obj: done(obj), initial,
                          field_selector="metadata.name=%s" % name)


def active_cluster_policy(policies):
    """The ClusterPolicy the operator acts on (duplicates are marked ``ignored``), or None."""
    for policy in policies:
        if ((policy.get("status") or {}).get("state")) != "ignored":
            return policy
    return None


def read_cluster_policy(api_client):
    """The ClusterPolicy (nvidia.com/v1) the operator acts on, whatever its name, as a dict; None when there is none
    (or the CRD is not installed). Validation, status, the upgrade check and the rollout all read this one."""
    return active_cluster_policy(KubeOps(api_client).list_cluster_policies())


def read_driver_owners(api_client, namespace, cluster_policy):
    """(DaemonSets of ``namespace``, NVIDIADrivers) when the ClusterPolicy leaves the driver to NVIDIADriver resources
    (spec.driver.useNvidiaDriverCRD), else (None, None): what tells which NVIDIADriver each driver pod comes from."""
    if not (((cluster_policy or {}).get("spec") or {}).get("driver") or {}).get("useNvidiaDriverCRD"):
        return None, None
    ops = KubeOps(api_client)
    return ops.list_daemonsets_in_namespace(namespace), ops.list_nvidia_drivers()


def list_operand_pods(api_client, namespace):
    """Every pod of the operator's namespace (its operands), as dicts."""
    return KubeOps(api_client).list_pods_in_namespace(namespace).get("items") or []
