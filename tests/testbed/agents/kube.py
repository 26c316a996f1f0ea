"""Kubernetes plumbing for the agents: client, list+watch loops into a shared cache, small helpers."""

import json
import logging
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from urllib3.util.retry import Retry

LOG = logging.getLogger("gpufleet.agents")

POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, POLICY_NAME = "nvidia.com", "v1", "clusterpolicies", "cluster-policy"


def api_client(kubeconfig):
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 16  # the reconcile threads share this client
    # A kept-alive connection the API server has closed fails the next request (RemoteDisconnected). urllib3 retries
    # that only for idempotent methods by default; the agents' PATCHes (labels, status) are idempotent too, and an
    # unretried one left a simulated MIG Manager waiting forever in the 1000-node benchmark.
    configuration.retries = Retry(total=5, connect=5, read=3, status=0, backoff_factor=0.2, allowed_methods=None)
    return client.ApiClient(configuration)


class DirtySet(set):
    """Names of nodes to reconcile, with when each was first marked since its last reconcile (`since`)."""

    def __init__(self, names=()):
        super().__init__(names)
        self.since = {}

    def add(self, name):
        if name not in self:
            self.since.setdefault(name, time.monotonic())
        super().add(name)

    def __ior__(self, names):
        for name in names:
            self.add(name)
        return self

    def take(self):
        """(names, {name: first marked}) and empty the set."""
        names, since = set(self), self.since
        self.clear()
        self.since = {}
        return names, since


class Cache:
    """Nodes, pods (all namespaces) and the ClusterPolicy, kept current by watches.

    Every change wakes `cond` waiters and records the affected node names in `dirty`, and when each first became
    dirty in `dirty_since` (the agents' lag is measured from there). Pods are also indexed by node: with 1000
    nodes a scan of every pod per question is what made the agents fall behind.
    """

    def __init__(self, api):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.cond = threading.Condition()
        self.nodes = {}
        self.pods = {}
        self.pods_by_node = {}  # node name -> {uid: pod}
        self.policy = None
        self.dirty = DirtySet()
        self.policy_changed = False
        self.synced = {"nodes": False, "pods": False, "policy": False}
        self.stopping = threading.Event()
        self.threads = []

    # -- watches -------------------------------------------------------------------------
    def start(self):
        for name, fn, handler in (
            ("nodes", self.core.list_node, self._on_node),
            ("pods", self.core.list_pod_for_all_namespaces, self._on_pod),
            ("policy", self._list_policies, self._on_policy),
        ):
            thread = threading.Thread(target=self._watch_forever, args=(name, fn, handler), daemon=True,
                                      name="watch-" + name)
            thread.start()
            self.threads.append(thread)

    def _list_policies(self, **kwargs):
        return self.custom.list_cluster_custom_object(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, **kwargs)

    def _watch_forever(self, name, list_fn, handler):
        """List once, then watch from the last resourceVersion seen; list again only when the watch cannot resume.

        Plain JSON, not the client's models: building pydantic models for every pod event was the agents' largest
        cost at 1000 nodes. A watch that ends (timeout_seconds) resumes where it was: a re-list of every pod
        marks every node dirty, which made each node reconcile again and again at 1000 nodes.
        """
        version = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    listed = json.loads(list_fn(_preload_content=False).data)
                    with self.cond:
                        handler("SYNC", listed["items"])
                        self.synced[name] = True
                        self.cond.notify_all()
                    version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch()
                for event in stream.stream(list_fn, resource_version=version, timeout_seconds=300,
                                           allow_watch_bookmarks=True, deserialize=False):
                    if self.stopping.is_set():
                        stream.stop()
                        return
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":  # 410 Gone etc. (kubernetes 37 raises on these itself when not deserializing: below)
                        LOG.info("watch %s: %s", name, obj.get("message"))
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    with self.cond:
                        handler(kind, obj)
                        self.cond.notify_all()
            except ApiException as err:
                version = None
                if err.status == 404 and name == "policy":
                    with self.cond:  # no ClusterPolicy CRD (chart not installed): nothing to play yet
                        if self.policy is not None or not self.synced[name]:
                            handler("SYNC", [])
                            self.synced[name] = True
                            self.cond.notify_all()
                elif err.status != 410:
                    LOG.warning("watch %s: %s", name, err.reason)
                self.stopping.wait(1)  # CRD not installed yet, or history expired: list again
            except Exception as err:  # pylint: disable=broad-except  # keep watching through API restarts
                version = None
                LOG.warning("watch %s: %s", name, err)
                self.stopping.wait(1)

    def _on_node(self, kind, obj):
        if kind == "SYNC":
            gone = set(self.nodes) - {n["metadata"]["name"] for n in obj}
            self.nodes = {n["metadata"]["name"]: n for n in obj}
            self.dirty |= set(self.nodes) | gone
            return
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.nodes.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.nodes[name] = obj
        self.dirty.add(name)

    def _on_pod(self, kind, obj):
        if kind == "SYNC":
            old = self.pods
            self.pods = {p["metadata"]["uid"]: p for p in obj}
            self.pods_by_node = {}
            for pod in obj:
                self.pods_by_node.setdefault(pod.get("spec", {}).get("nodeName"), {})[pod["metadata"]["uid"]] = pod
            self.dirty |= {p.get("spec", {}).get("nodeName") for p in list(old.values()) + obj} - {None}
            return
        uid = obj["metadata"]["uid"]
        previous = self.pods.pop(uid, None)
        if previous is not None:
            self.pods_by_node.get(previous.get("spec", {}).get("nodeName"), {}).pop(uid, None)
        if kind in ("ADDED", "MODIFIED"):
            self.pods[uid] = obj
            self.pods_by_node.setdefault(obj.get("spec", {}).get("nodeName"), {})[uid] = obj
        node = obj.get("spec", {}).get("nodeName")
        if node:
            self.dirty.add(node)
        old_node = previous.get("spec", {}).get("nodeName") if previous else None
        if old_node and old_node != node:
            self.dirty.add(old_node)

    def _on_policy(self, kind, obj):
        if kind == "SYNC":
            found = [p for p in obj if p["metadata"]["name"] == POLICY_NAME]
            self.policy = found[0] if found else None
        elif obj.get("metadata", {}).get("name") == POLICY_NAME:
            self.policy = None if kind == "DELETED" else obj
        else:
            return
        self.policy_changed = True
        self.dirty |= set(self.nodes)

    def stop(self):
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()

    # -- queries (call with cond held or accept a racy snapshot) ---------------------------
    def pods_on(self, node):
        return list(self.pods_by_node.get(node, {}).values())

    def running_pod(self, node, namespace, app):
        for pod in self.pods_on(node):
            meta = pod["metadata"]
            if (meta.get("namespace") == namespace and (meta.get("labels") or {}).get("app") == app
                    and not meta.get("deletionTimestamp") and pod.get("status", {}).get("phase") == "Running"):
                return pod
        return None

    def policy_spec(self):
        return (self.policy or {}).get("spec") or {}


def ignore_missing(fn, *args, **kwargs):
    """Call an API function; a 404 is not an error (the object is already gone)."""
    try:
        return fn(*args, **kwargs)
    except ApiException as err:
        if err.status != 404:
            raise
        return None
