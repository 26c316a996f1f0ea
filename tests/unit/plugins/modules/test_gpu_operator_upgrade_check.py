"""gpu_operator_upgrade_check argument handling and the connection error (no cluster needed). The refusal and the
allowed upgrade on a cluster are covered by tests/integration/operator/test_upgrade.py; the blocker logic is
unit-tested in module_utils/operator/test_upgrade.py."""

from .module_runner import run_module


def test_nodes_is_a_list_of_names(tmp_path):
    result = run_module(tmp_path, "gpu_operator_upgrade_check", nodes={"a": 1})
    assert result["failed"] and "nodes" in result["msg"] and "list" in result["msg"]


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path):
    result = run_module(tmp_path, "gpu_operator_upgrade_check", kubeconfig=str(tmp_path / "missing-kubeconfig"))
    assert result["failed"] and "kubeconfig %s does not exist" % (tmp_path / "missing-kubeconfig") in result["msg"]
