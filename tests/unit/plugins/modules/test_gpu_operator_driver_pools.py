"""gpu_operator_driver_pools argument handling and the connection error (no cluster needed). Its checks against a
cluster are covered by tests/integration/operator/test_nvidia_driver_pools.py; the plan is unit-tested in
module_utils/operator/test_nvidia_drivers.py."""

from .module_runner import run_module


def test_pools_is_a_list_of_mappings(tmp_path):
    result = run_module(tmp_path, "gpu_operator_driver_pools", pools="hopper")
    assert result["failed"] and "pools" in result["msg"], result


def test_gpu_nodes_are_node_names(tmp_path):
    result = run_module(tmp_path, "gpu_operator_driver_pools", gpu_nodes=["Gpu_Node"])
    assert result["failed"] and result["msg"].startswith("gpu_nodes[0]: 'Gpu_Node' is not a valid Kubernetes name"), result


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path):
    result = run_module(tmp_path, "gpu_operator_driver_pools", kubeconfig=str(tmp_path / "missing-kubeconfig"))
    assert result["failed"] and "kubeconfig %s does not exist" % (tmp_path / "missing-kubeconfig") in result["msg"]
