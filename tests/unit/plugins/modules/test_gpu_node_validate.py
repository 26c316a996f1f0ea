"""gpu_node_validate argument handling and the connection error (no cluster needed). Validating nodes is covered by
tests/integration/operator/test_operator.py::test_validation_catches_broken_nodes_and_passes_healthy_ones (see
docs/testing.md); the checks themselves are unit-tested in module_utils/validate/test_node.py."""

from kubernetes.client.rest import ApiException

from ansible_collections.gpufleet.gpu_operator.plugins.modules import gpu_node_validate

from .module_runner import run_module


def test_each_node_entry_needs_a_name(tmp_path):
    result = run_module(tmp_path, "gpu_node_validate", nodes=[{"hardware": {"gpus": []}}])
    assert result["failed"] and "name" in result["msg"]


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path):
    result = run_module(tmp_path, "gpu_node_validate", nodes=[{"name": "a"}],
                        kubeconfig=str(tmp_path / "missing-kubeconfig"))
    assert result["failed"] and "kubeconfig %s does not exist" % (tmp_path / "missing-kubeconfig") in result["msg"]


class _Ops(object):
    """Answers the node reads from a dict and records them."""

    def __init__(self, names):
        self.nodes = dict((name, {"metadata": {"name": name}}) for name in names)
        self.calls = []

    def get_node(self, name):
        self.calls.append(("get", name))
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return self.nodes[name]

    def list_nodes(self, managed_fields=True):
        self.calls.append(("list", None))
        return {"items": list(self.nodes.values())}


def test_a_few_nodes_are_read_one_by_one_and_a_missing_one_is_left_out():
    ops = _Ops(["a", "b", "c"])
    assert sorted(gpu_node_validate.read_nodes(ops, ["a", "gone"])) == ["a"]
    assert ops.calls == [("get", "a"), ("get", "gone")]


def test_many_nodes_are_read_in_one_list():
    """1000 GETs took 35 s in the 1000-node benchmark; one list replaces them."""
    names = ["n%04d" % i for i in range(gpu_node_validate.NODE_GETS_MAX + 5)]
    ops = _Ops(names + ["other"])
    nodes = gpu_node_validate.read_nodes(ops, names[:-1] + ["gone"])
    assert ops.calls == [("list", None)]
    assert sorted(nodes) == names[:-1]
