"""KubeOps turns the typed client's keyword arguments (as kubernetes.watch.Watch passes them) into API query names."""

import json

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import api
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import query_params


def test_watch_arguments_become_api_query_names():
    given = {"watch": True, "resource_version": "42", "timeout_seconds": 30, "allow_watch_bookmarks": True,
             "field_selector": "metadata.name=n1"}
    assert query_params(given) == [("watch", "true"), ("resourceVersion", "42"), ("timeoutSeconds", 30),
                                   ("allowWatchBookmarks", "true"), ("fieldSelector", "metadata.name=n1")]


def test_unset_values_are_left_out_and_false_is_spelled_for_the_api():
    assert query_params({"label_selector": None, "tail_lines": 100, "grace_period_seconds": 0, "watch": False}) == [
        ("tailLines", 100), ("gracePeriodSeconds", 0), ("watch", "false")]


def test_unknown_names_pass_through():
    assert query_params({"limit": 5}) == [("limit", 5)]


class _Response(object):
    def __init__(self, body):
        self.data = json.dumps(body).encode()


def _paged_ops(monkeypatch, kind, pages, page_size=1):
    """KubeOps whose requests answer ``pages`` in turn (each a fresh decode, as from the API server); the
    (path, query) of each request is recorded in the list returned with it."""
    seen = []

    def request(method, path, query=None, **kwargs):
        seen.append((path, dict(query)))
        meta, items = pages[len(seen) - 1]
        return _Response({"kind": kind, "metadata": meta, "items": items})

    ops = api.KubeOps.__new__(api.KubeOps)
    ops.counter = api.RequestCounter()
    monkeypatch.setattr(ops, "request", request)
    monkeypatch.setattr(api, "LIST_PAGE_SIZE", page_size)
    return ops, seen


def test_cluster_pod_list_is_read_in_pages_without_managed_fields(monkeypatch):
    """Three pages joined into one list with the first page's resourceVersion; the pages' continue tokens are
    passed on; managedFields is dropped from every pod; one counted list request per page."""
    pods = [{"metadata": {"name": "p%d" % i, "managedFields": [{"manager": "kubelet"}]}} for i in range(5)]
    pages = [({"resourceVersion": "7", "continue": "a", "remainingItemCount": 3}, pods[:2]),
             ({"resourceVersion": "7", "continue": "b"}, pods[2:4]), ({"resourceVersion": "7"}, pods[4:])]
    ops, seen = _paged_ops(monkeypatch, "PodList", pages, page_size=2)
    listing = ops.list_pods()
    assert [q for _p, q in seen] == [{"limit": 2}, {"limit": 2, "continue": "a"}, {"limit": 2, "continue": "b"}]
    assert listing["metadata"] == {"resourceVersion": "7"}
    assert [p["metadata"] for p in listing["items"]] == [{"name": "p%d" % i} for i in range(5)]
    assert ops.counter.by_verb == {"list": 3}


def test_node_list_is_paged_and_keeps_managed_fields_unless_asked_not_to(monkeypatch):
    """The fleet report reads label times from nodes' managedFields; the plan, the inventory and the validation
    do not, and at 1000 nodes leave them out."""
    nodes = [{"metadata": {"name": "n%d" % i, "managedFields": [{"manager": "gfd"}]}} for i in range(2)]
    pages = [({"resourceVersion": "3", "continue": "x"}, nodes[:1]), ({"resourceVersion": "3"}, nodes[1:])]
    ops, seen = _paged_ops(monkeypatch, "NodeList", pages)
    kept = ops.list_nodes(label_selector="a=b")
    assert seen == [("/api/v1/nodes", {"label_selector": "a=b", "limit": 1}),
                    ("/api/v1/nodes", {"label_selector": "a=b", "limit": 1, "continue": "x"})]
    assert [n["metadata"]["managedFields"] for n in kept["items"]] == [[{"manager": "gfd"}]] * 2
    ops, seen = _paged_ops(monkeypatch, "NodeList", pages)
    dropped = ops.list_nodes(managed_fields=False)
    assert [n["metadata"] for n in dropped["items"]] == [{"name": "n0"}, {"name": "n1"}]
    assert dropped["metadata"] == {"resourceVersion": "3"} and ops.counter.by_verb == {"list": 2}


def test_namespace_pod_list_is_paged_without_managed_fields(monkeypatch):
    pods = [{"metadata": {"name": "p%d" % i, "managedFields": [{"manager": "kubelet"}]}} for i in range(3)]
    ops, seen = _paged_ops(monkeypatch, "PodList", [({"resourceVersion": "9", "continue": "a"}, pods[:1]),
                                                    ({"resourceVersion": "9", "continue": "b"}, pods[1:2]),
                                                    ({"resourceVersion": "9"}, pods[2:])])
    listing = ops.list_pods_in_namespace("gpu-operator")
    assert [p for p, _q in seen] == ["/api/v1/namespaces/gpu-operator/pods"] * 3
    assert [q.get("continue") for _p, q in seen] == [None, "a", "b"]
    assert [p["metadata"] for p in listing["items"]] == [{"name": "p0"}, {"name": "p1"}, {"name": "p2"}]
