"""gpu_smoke_test without a cluster: resource checks and the check-mode plan (pod names and manifests are built before
any API call). Running pods is covered by tests/integration/operator/test_operator.py::
test_validation_catches_broken_nodes_and_passes_healthy_ones (see docs/testing.md)."""

from .module_runner import run_module


def test_check_mode_lists_one_pod_per_node_and_resource(tmp_path):
    targets = [{"node": "a", "resources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]}, {"node": "b"}]
    result = run_module(tmp_path, "gpu_smoke_test", targets=targets, _ansible_check_mode=True)
    assert not result.get("failed") and result["changed"] is False and result["failed_checks"] == []
    assert [(r["node"], r["resource"]) for r in result["results"]] == [
        ("a", "nvidia.com/gpu"), ("a", "nvidia.com/mig-1g.10gb"), ("b", "nvidia.com/gpu")]
    assert all(r["ok"] is None and r["problem"] == "not run in check mode" for r in result["results"])
    assert len(set(r["pod"] for r in result["results"])) == 3


def test_a_resource_that_is_not_a_gpu_is_refused_naming_the_node(tmp_path):
    result = run_module(tmp_path, "gpu_smoke_test", targets=[{"node": "a", "resources": ["cpu"]}])
    assert result["failed"]
    assert result["msg"] == ("node a: 'cpu' is not a GPU resource (nvidia.com/gpu, nvidia.com/mig-<profile> or their "
                             ".shared forms)")
