"""gpu_node_validate argument handling and the connection error (no cluster needed). Validating nodes is covered by
tests/integration/operator/test_operator.py::test_validation_catches_broken_nodes_and_passes_healthy_ones (see
docs/testing.md); the checks themselves are unit-tested in module_utils/validate/test_node.py."""

from .module_runner import run_module


def test_each_node_entry_needs_a_name(tmp_path):
    result = run_module(tmp_path, "gpu_node_validate", nodes=[{"hardware": {"gpus": []}}])
    assert result["failed"] and "name" in result["msg"]


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path):
    result = run_module(tmp_path, "gpu_node_validate", nodes=[{"name": "a"}],
                        kubeconfig=str(tmp_path / "missing-kubeconfig"))
    assert result["failed"] and "cannot load kubeconfig" in result["msg"]
