"""Operator readiness from the ClusterPolicy, GPU nodes and operand pods (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess, enabled_operands


APPS = {"driver": "nvidia-driver-daemonset", "container-toolkit": "nvidia-container-toolkit-daemonset",
        "device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery": "gpu-feature-discovery",
        "dcgm-exporter": "nvidia-dcgm-exporter", "operator-validator": "nvidia-operator-validator",
        "mig-manager": "nvidia-mig-manager"}


def policy(state="ready", **spec):
    return {"spec": spec, "status": {"state": state}}


def node(name, labels=None, allocatable=None):
    base = {"nvidia.com/gpu.present": "true"}
    base.update(dict(("nvidia.com/gpu.deploy." + op, "true") for op in APPS))
    base.update(labels or {})
    return {"metadata": {"name": name, "labels": base},
            "status": {"allocatable": allocatable or {}, "capacity": allocatable or {},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(node_name, app, phase="Running", ready=True):
    return {"metadata": {"name": "%s-%s" % (app, node_name), "labels": {"app": app}}, "spec": {"nodeName": node_name},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "ready": ready, "state": {}}]}}


def all_pods(node_name, skip=()):
    return [pod(node_name, app) for op, app in APPS.items() if op not in skip]


def test_enabled_operands_follow_the_policy():
    assert enabled_operands(policy(driver={"enabled": False}, migManager={"enabled": False})) == [
        "container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter", "operator-validator"]


def test_ready_when_every_operand_runs_on_every_gpu_node():
    nodes = [node("a"), node("b"), {"metadata": {"name": "cpu", "labels": {}}}]
    result = assess(policy(), nodes, all_pods("a") + all_pods("b"))
    assert result["ready"], result["not_ready"]
    assert sorted(result["nodes"]) == ["a", "b"]


def test_not_ready_report_names_node_and_operand():
    nodes = [node("a"), node("b", labels={"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"})]
    pods = all_pods("a", skip=("dcgm-exporter",)) + all_pods("b") + [pod("a", APPS["dcgm-exporter"], "Pending")]
    pods = [p for p in pods if not (p["spec"]["nodeName"] == "a" and p["metadata"]["labels"]["app"] == APPS["mig-manager"])]
    result = assess(policy(state="notReady"), nodes, pods, wanted_nodes=["a", "b", "ghost"])
    assert not result["ready"]
    assert "ClusterPolicy cluster-policy: state notReady" in result["not_ready"]
    assert "a: dcgm-exporter (pod nvidia-dcgm-exporter-a: Pending)" in result["not_ready"]
    assert "a: mig-manager (no nvidia-mig-manager pod on the node)" in result["not_ready"]
    assert "b: device-plugin (paused-for-mig-change)" in result["not_ready"]
    assert "ghost: node (not found in the cluster)" in result["not_ready"]


def test_missing_cluster_policy():
    result = assess(None, [node("a")], [])
    assert not result["ready"] and result["state"] == "ClusterPolicy cluster-policy not found"
