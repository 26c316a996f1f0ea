"""gpu_operator_status argument handling and the connection error (no cluster needed). Readiness on a cluster is
covered by tests/integration/operator/test_operator.py::test_install_validates_and_a_second_run_changes_nothing (see
docs/testing.md); the readiness logic is unit-tested in module_utils/operator/test_status.py."""

from .module_runner import run_module


def test_nodes_is_a_list_of_names_and_timeout_a_number(tmp_path):
    result = run_module(tmp_path, "gpu_operator_status", nodes={"a": 1})
    assert result["failed"] and "nodes" in result["msg"] and "list" in result["msg"]
    result = run_module(tmp_path, "gpu_operator_status", timeout="soon")
    assert result["failed"] and "timeout" in result["msg"]


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path):
    result = run_module(tmp_path, "gpu_operator_status", kubeconfig=str(tmp_path / "missing-kubeconfig"))
    assert result["failed"] and "kubeconfig %s does not exist" % (tmp_path / "missing-kubeconfig") in result["msg"]
