"""What the plan reads, read once: the requests read_fleet and read_node make, and a Snapshot answering planning's
reads from memory (the real reads are covered by the integration tests)."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import options, snapshot


def gpu_pod(name, node, namespace="w"):
    return {"metadata": {"name": name, "namespace": namespace, "ownerReferences": [{"kind": "ReplicaSet"}]},
            "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


class Ctx(object):
    namespace = "gpu-operator"
    options = options.node_options({})

    def __init__(self, policy=None):
        self.policy = policy


class CountingOps(object):
    """Records each KubeOps read."""

    def __init__(self, forbid_configmap_list=False, missing=()):
        self.calls = []
        self.forbid = forbid_configmap_list
        self.missing = missing

    def list_nodes(self, label_selector=None, managed_fields=True):
        self.calls.append("list_nodes")
        return {"items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}

    def get_node(self, name):
        self.calls.append("get_node %s" % name)
        if name in self.missing:
            raise ApiException(status=404, reason="Not Found")
        return {"metadata": {"name": name}}

    def list_pods(self):
        self.calls.append("list_pods")
        return {"items": [gpu_pod("p1", "n1"), gpu_pod("p2", "n2", "v"), {"metadata": {"name": "p3", "namespace": "w"},
                                                                          "spec": {}}]}

    def list_pods_on_node(self, node, label_selector=None):
        self.calls.append("list_pods_on_node %s" % node)
        return {"items": [gpu_pod("p1", node)], "metadata": {"resourceVersion": "7"}}

    def list_configmaps(self, namespace):
        self.calls.append("list_configmaps")
        if self.forbid:
            raise ApiException(status=403, reason="Forbidden")
        return {"items": [{"metadata": {"name": "n1-mig-config"}, "data": {"config.yaml": "x"}}]}

    def get_configmap(self, namespace, name):
        self.calls.append("get_configmap %s/%s" % (namespace, name))
        return None

    def list_pdbs(self, namespace):
        self.calls.append("list_pdbs %s" % namespace)
        return {"items": []}


def test_the_fleet_is_read_in_a_few_lists_and_planning_reads_only_the_snapshot():
    ops = CountingOps()
    snap = snapshot.read_fleet(ops, Ctx(), ["n1", "n2"])
    assert ops.calls == ["list_nodes", "list_pods", "list_configmaps", "list_pdbs v", "list_pdbs w"]
    assert snap.get_node("n2")["metadata"]["name"] == "n2"
    assert [p["metadata"]["name"] for p in snap.list_pods_on_node("n1")["items"]] == ["p1"]
    assert snap.get_configmap("gpu-operator", "n1-mig-config")["data"] == {"config.yaml": "x"}
    assert snap.get_configmap("gpu-operator", "n2-mig-config") is None
    assert snap.list_pdbs("w") == {"items": []}
    with pytest.raises(ApiException) as missing:
        snap.get_node("gone")
    assert missing.value.status == 404
    with pytest.raises(snapshot.NotRead):
        snap.list_pdbs("elsewhere")  # never read behind planning's back
    assert len(ops.calls) == 5


def test_configmaps_are_read_by_name_when_they_cannot_be_listed():
    ops = CountingOps(forbid_configmap_list=True)
    snap = snapshot.read_fleet(ops, Ctx(), ["n1"])
    assert snap.get_configmap("gpu-operator", "n1-mig-config") is None
    assert "get_configmap gpu-operator/n1-mig-config" in ops.calls


def test_a_custom_config_is_the_only_configmap_read():
    policy = {"spec": {"migManager": {"config": {"name": "custom-mig"}}}}
    ops = CountingOps(forbid_configmap_list=True)
    snapshot.read_fleet(ops, Ctx(policy), ["n1", "n2"])
    assert [c for c in ops.calls if c.startswith("get_configmap")] == ["get_configmap gpu-operator/custom-mig"]


def test_one_node_is_read_as_it_is_now():
    ops = CountingOps()
    snap = snapshot.read_node(ops, Ctx(), "n1")
    assert ops.calls == ["get_node n1", "get_configmap gpu-operator/n1-mig-config", "list_pods_on_node n1",
                         "list_pdbs w"]
    assert snap.list_pods_on_node("n1")["metadata"] == {"resourceVersion": "7"}  # the drain's watch starts there


def test_a_node_that_cannot_be_read_is_answered_with_its_error():
    ops = CountingOps(missing=("n9",))
    snap = snapshot.read_node(ops, Ctx(), "n9")
    assert ops.calls == ["get_node n9"]
    with pytest.raises(ApiException) as missing:
        snap.get_node("n9")
    assert missing.value.status == 404


def test_pods_read_are_the_listing_or_none_when_not_read_or_failed():
    snap = snapshot.Snapshot("gpu-operator")
    snap.pods["n1"] = {"items": [gpu_pod("a", "n1")], "metadata": {}}
    snap.pods["n2"] = ApiException(status=500, reason="Internal Server Error")
    snap.pods["n3"] = {"items": None}
    assert [p["metadata"]["name"] for p in snap.pods_read("n1")] == ["a"]
    assert snap.pods_read("n2") is None and snap.pods_read("never-read") is None
    assert snap.pods_read("n3") == []
