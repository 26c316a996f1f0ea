"""ClusterView: one list and one watch per kind for a rollout; the room check reads it instead of listing."""

import threading

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import capacity
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.cluster_view import ClusterView
from tests.support import kube


def node(name, gpus, labels=None):
    return kube.node(name, labels=labels or {}, annotations={"big": "x" * 100},
                     allocatable={"nvidia.com/gpu": str(gpus), "cpu": "8"}, status={"images": ["a"] * 5})


def pod(name, on, gpus=0):
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    big = kube.pod(name, node_name=on, limits=limits, uid="u-" + name)
    big["spec"]["containers"][0]["image"] = "i"
    return big


class ScriptedOps(object):
    """KubeOps stand-in: list_* return the given items; watch() feeds its script, then blocks until released
    (or raises ``fail``), as a long-running watch does."""

    def __init__(self, items, script=(), relist=None, fail=None):
        self.items, self.script, self.relist, self.fail = items, script, relist, fail
        self.release = threading.Event()
        self.fed = threading.Event()
        self.lists = 0

    def list_nodes(self):
        self.lists += 1
        return {"items": self.items, "metadata": {"resourceVersion": "1"}}

    list_pods = list_nodes

    def lister(self, path):
        return path

    def watch(self, list_func, deadline, done, initial, relisted=None):
        for event_type, obj in self.script:
            done(event_type, obj)
        if self.relist is not None:
            relisted(self.relist)
            for obj in self.relist:
                done("ADDED", obj)
        self.fed.set()
        if self.fail is not None:
            raise self.fail
        self.release.wait(10)


def view_of(node_ops, pod_ops):
    made = iter([node_ops, pod_ops])
    return ClusterView(lambda: next(made)).start()


def test_the_view_follows_the_watches_and_keeps_only_gpu_pods_and_the_counted_fields():
    node_ops = ScriptedOps([node("n1", 1)], script=[("ADDED", node("n2", 2)), ("MODIFIED", node("n1", 1, {"nvidia.com/gpu.present": "true"}))])
    pod_ops = ScriptedOps([pod("cpu-only", "n1"), pod("g1", "n1", 1)],
                          script=[("ADDED", pod("g2", "n2", 2)), ("DELETED", pod("g1", "n1", 1))])
    view = view_of(node_ops, pod_ops)
    node_ops.fed.wait(5)
    pod_ops.fed.wait(5)
    nodes, pods = view.snapshot()
    assert sorted((n["metadata"]["name"], n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) == [("n1", "1"), ("n2", "2")]
    assert "annotations" not in nodes[0]["metadata"] and "images" not in nodes[0]["status"]
    assert [p["metadata"]["name"] for p in pods] == ["g2"]
    assert node_ops.lists == 1 and pod_ops.lists == 1
    # The count reads the view as it would read full lists.
    plans = [{"node": "n2", "errors": [], "expected_resources": {"nvidia.com/mig-1g.10gb": 7}, "pods_to_evict": ["w/g2"]}]
    assert capacity.shortages(plans, nodes, pods)[0]["room"] == 1
    node_ops.release.set()
    pod_ops.release.set()


def test_a_relist_replaces_what_was_seen():
    node_ops = ScriptedOps([node("n1", 1), node("gone", 1)], relist=[node("n1", 1)])
    pod_ops = ScriptedOps([pod("g1", "gone", 1)], relist=[])
    view = view_of(node_ops, pod_ops)
    node_ops.fed.wait(5)
    pod_ops.fed.wait(5)
    nodes, pods = view.snapshot()
    assert [n["metadata"]["name"] for n in nodes] == ["n1"] and pods == []
    node_ops.release.set()
    pod_ops.release.set()


def test_a_watch_that_ended_on_an_error_makes_the_caller_list_again():
    node_ops = ScriptedOps([node("n1", 1)], fail=ConnectionResetError("reset"))
    pod_ops = ScriptedOps([])
    view = view_of(node_ops, pod_ops)
    node_ops.fed.wait(5)
    for _attempt in range(100):
        if view.snapshot() is None:
            break
        threading.Event().wait(0.05)
    assert view.snapshot() is None
    assert isinstance(view.nodes.error, ConnectionResetError)
    pod_ops.release.set()
