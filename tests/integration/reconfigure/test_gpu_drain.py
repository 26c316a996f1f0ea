"""gpu_drain against the testbed API server, under the least-privilege automation ServiceAccount."""
# Pods are compared within the test namespace: other tests' pods (the operator Deployment) may land on a new node.
import json

from tests.integration.reconfigure.conftest import (
    PRIOR_ANNOTATION,
    assert_nothing_lost,
    deploy,
    ensure_runtime_class,
    node_view,
    pdb,
    running_pods,
    wait_running,
)
from tests.testbed.pytest_cluster import unique_name

GPU_NODE = {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "7"}


def test_drain_evicts_only_gpu_pods_and_uncordon_restores(testbed, testbed_namespace, runner):
    node = unique_name("drain-gpu")
    testbed.create_node(node, allocatable=GPU_NODE)
    ensure_runtime_class(testbed)
    ns = testbed_namespace
    deploy(testbed, ns, "trainer", node, replicas=2, resources={"nvidia.com/gpu": "1"})
    deploy(testbed, ns, "slicer", node, resources={"nvidia.com/mig-1g.10gb": "1"})
    deploy(testbed, ns, "runtime", node, runtime_class="nvidia")
    deploy(testbed, ns, "web", node, resources={"cpu": "100m"})
    wait_running(testbed, node, 5, ns)
    before = running_pods(testbed, node, ns)
    gpu_pods = sorted(k for k in before if k.split("/")[1].startswith(("trainer", "slicer", "runtime")))
    try:
        planned = runner.module("gpu_drain", {"name": node, "timeout": 60}, check=True)
        assert not planned.get("failed"), planned
        assert sorted("%s/%s" % (p["namespace"], p["name"]) for p in planned["would_evict"]) == gpu_pods
        assert node_view(testbed, node)["unschedulable"] is False, "check mode cordoned the node"
        assert running_pods(testbed, node, ns) == before, "check mode evicted something"

        drained = runner.module("gpu_drain", {"name": node, "timeout": 60, "retry_delay": 1})
        assert not drained.get("failed"), drained
        evicted = sorted("%s/%s" % (p["namespace"], p["name"]) for p in drained["evicted"])
        assert evicted == gpu_pods
        after = running_pods(testbed, node, ns)
        assert_nothing_lost(before, after, evicted, node)
        web = [k for k in before if "/web-" in k]
        assert web and all(k in after for k in web), "the CPU-only pod was evicted"
        view = node_view(testbed, node)
        assert view["unschedulable"] and view["annotations"][PRIOR_ANNOTATION] == "false"

        again = runner.module("gpu_drain", {"name": node, "timeout": 60})
        assert not again.get("failed") and again["changed"] is False and again["evicted"] == [], json.dumps(again)

        restored = runner.module("gpu_drain", {"name": node, "state": "uncordoned"})
        assert restored["uncordon"] == "uncordoned" and restored["changed"]
        view = node_view(testbed, node)
        assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"]
    finally:
        testbed.delete_node(node)


def test_admin_cordoned_node_stays_cordoned(testbed, testbed_namespace, runner):
    node = unique_name("drain-admin")
    testbed.create_node(node, allocatable=GPU_NODE)
    deploy(testbed, testbed_namespace, "trainer", node, resources={"nvidia.com/gpu": "1"})
    wait_running(testbed, node, 1, testbed_namespace)
    testbed.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        drained = runner.module("gpu_drain", {"name": node, "timeout": 60, "retry_delay": 1})
        assert not drained.get("failed"), drained
        assert len(drained["evicted"]) == 1
        assert node_view(testbed, node)["annotations"][PRIOR_ANNOTATION] == "true"
        restored = runner.module("gpu_drain", {"name": node, "state": "uncordoned"})
        assert restored["uncordon"] == "left-cordoned"
        view = node_view(testbed, node)
        assert view["unschedulable"] is True, "an admin's cordon was lifted"
        assert PRIOR_ANNOTATION not in view["annotations"]
    finally:
        testbed.delete_node(node)


def test_pdb_blocked_drain_stops_with_the_budget_named_and_evicts_nothing_else(testbed, testbed_namespace, runner):
    node = unique_name("drain-pdb")
    testbed.create_node(node, allocatable=GPU_NODE)
    ns = testbed_namespace
    deploy(testbed, ns, "critical", node, resources={"nvidia.com/gpu": "1"})
    pdb(testbed, ns, "critical-pdb", "critical", 1)
    wait_running(testbed, node, 1, ns)
    testbed.wait_for(lambda: testbed.kubectl("get", "pdb", "-n", ns, "critical-pdb", "-o",
                                             "jsonpath={.status.expectedPods}").stdout == "1",
                     60, "the disruption controller to count the budget's pods")
    before = running_pods(testbed, node, ns)
    try:
        planned = runner.module("gpu_drain", {"name": node}, check=True)
        assert [b["name"] for b in planned["blocking_budgets"]] == ["critical-pdb"]
        assert planned["blocking_budgets"][0]["disruptions_allowed"] == 0

        drained = runner.module("gpu_drain", {"name": node, "timeout": 6, "retry_delay": 1})
        assert drained.get("failed"), drained
        assert drained["blocked_by"] == ["%s/critical-pdb" % ns]
        assert "blocked by PDB %s/critical-pdb" % ns in drained["msg"]
        assert drained["evicted"] == [] and len(drained["not_evicted"]) == 1
        assert running_pods(testbed, node, ns) == before, "a PDB-protected pod was evicted"
        # The failure leaves the node cordoned and says so; uncordon still restores exactly.
        assert drained["cordoned"] is True and node_view(testbed, node)["unschedulable"] is True
        assert "left cordoned" in drained["msg"]
        assert runner.module("gpu_drain", {"name": node, "state": "uncordoned"})["uncordon"] == "uncordoned"
    finally:
        testbed.delete_node(node)


def test_unknown_node_is_a_clear_error(runner):
    result = runner.module("gpu_drain", {"name": "no-such-node-xyz"})
    assert result.get("failed") and "node no-such-node-xyz not found" in result["msg"]
