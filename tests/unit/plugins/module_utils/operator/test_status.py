"""Operator readiness from the ClusterPolicy, GPU nodes and operand pods (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess, enabled_operands
from tests.support.kube import OPERAND_APPS as APPS
from tests.support.kube import gpu_node as node
from tests.support.kube import operand_pod as pod


def policy(state="ready", **spec):
    return {"spec": spec, "status": {"state": state}}


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


def test_driver_pods_of_nvidiadriver_crs_count_as_the_driver():
    """driver.nvidiaDriverCRD.enabled: one DaemonSet per NVIDIADriver CR and node pool, its pods labelled as
    NVIDIA/gpu-operator v26.7.0 manifests/state-driver/0500_daemonset.yaml labels them."""
    def cr_driver_pod(node_name, app, component="nvidia-driver", ready=True):
        made = pod(node_name, app, ready=ready)
        made["metadata"]["labels"].update({"app.kubernetes.io/component": component, "nvidia.com/precompiled": "false"})
        return made
    nodes = [node("pool-a"), node("pool-b"), node("pool-c")]
    pods = (all_pods("pool-a", skip=("driver",)) + [cr_driver_pod("pool-a", "nvidia-gpu-driver-ubuntu22.04-646cdfdb96")]
            + all_pods("pool-b", skip=("driver",)) + [cr_driver_pod("pool-b", "nvidia-gpu-driver-ubuntu24.04-7c6d7bd86b", ready=False)]
            + all_pods("pool-c", skip=("driver",)))
    result = assess(policy(driver={"enabled": True, "useNvidiaDriverCRD": True}), nodes, pods)
    assert result["nodes"]["pool-a"]["driver"] == "ready"
    assert result["nodes"]["pool-b"]["driver"] == ("pod nvidia-gpu-driver-ubuntu24.04-7c6d7bd86b-pool-b: "
                                                   "Running, container c not ready")
    assert result["nodes"]["pool-c"]["driver"] == ("no nvidia-driver-daemonset pod on the node (nor one of an "
                                                   "NVIDIADriver CR, app.kubernetes.io/component=nvidia-driver)")
