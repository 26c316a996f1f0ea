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


OWNER = "nvidia.com/gpu-operator.driver.owner"
CRD_POLICY = {"enabled": True, "useNvidiaDriverCRD": True}


def cr_driver_pod(node_name, daemonset, component="nvidia-driver", ready=True, image=None):
    """A driver pod of the DaemonSet ``daemonset``, labelled as NVIDIA/gpu-operator v26.7.0
    manifests/state-driver/0500_daemonset.yaml labels an NVIDIADriver's pods."""
    made = pod(node_name, daemonset, ready=ready)
    made["metadata"]["labels"].update({"app.kubernetes.io/component": component, "nvidia.com/precompiled": "false"})
    made["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": daemonset, "controller": True}]
    made["spec"]["containers"] = [{"name": "nvidia-driver-ctr", "image": image or "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"}]
    return made


def daemonset(name, nvidia_driver):
    return {"metadata": {"name": name, "ownerReferences": [
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "name": nvidia_driver, "controller": True}]}}


def nvidia_driver(name, state="ready", error=None):
    conditions = [{"type": "Error", "status": "True", "reason": error[0], "message": error[1]}] if error else []
    return {"metadata": {"name": name}, "status": {"state": state, "conditions": conditions}}


def test_driver_pods_of_nvidiadriver_crs_count_as_the_driver_without_the_daemonsets():
    """DaemonSets not read: any driver pod on a node NVIDIA's controller routed to an NVIDIADriver counts."""
    nodes = [node("pool-a", labels={OWNER: "a"}), node("pool-b", labels={OWNER: "b"}), node("pool-c", labels={OWNER: "b"})]
    pods = (all_pods("pool-a", skip=("driver",)) + [cr_driver_pod("pool-a", "nvidia-gpu-driver-ubuntu22.04-646cdfdb96")]
            + all_pods("pool-b", skip=("driver",)) + [cr_driver_pod("pool-b", "nvidia-gpu-driver-ubuntu24.04-7c6d7bd86b", ready=False)]
            + all_pods("pool-c", skip=("driver",)))
    result = assess(policy(driver=CRD_POLICY), nodes, pods)
    assert result["nodes"]["pool-a"]["driver"] == "ready"
    assert result["nodes"]["pool-b"]["driver"] == ("pod nvidia-gpu-driver-ubuntu24.04-7c6d7bd86b-pool-b: "
                                                   "Running, container c not ready")
    assert result["nodes"]["pool-c"]["driver"] == ("no nvidia-driver-daemonset pod on the node (nor one of an "
                                                   "NVIDIADriver CR, app.kubernetes.io/component=nvidia-driver)")
    assert result["drivers"]["pool-a"]["nvidia_driver"] is None  # no DaemonSets: the NVIDIADriver is not known
    assert result["drivers"]["pool-c"] is None


def test_each_node_reports_the_driver_pod_of_the_nvidiadriver_it_is_routed_to():
    nodes = [node("h1", labels={OWNER: "hopper"}), node("h2", labels={OWNER: "hopper"}), node("a1", labels={OWNER: "ampere"})]
    sets = [daemonset("nvidia-gpu-driver-ubuntu22.04-aaa", "hopper"), daemonset("nvidia-gpu-driver-ubuntu22.04-bbb", "ampere")]
    pods = (all_pods("h1", skip=("driver",)) + all_pods("h2", skip=("driver",)) + all_pods("a1", skip=("driver",))
            + [cr_driver_pod("h1", "nvidia-gpu-driver-ubuntu22.04-aaa", image="nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"),
               cr_driver_pod("h2", "nvidia-gpu-driver-ubuntu22.04-aaa", ready=False),
               cr_driver_pod("a1", "nvidia-gpu-driver-ubuntu22.04-bbb", image="nvcr.io/nvidia/driver:570.195.03-ubuntu22.04")])
    result = assess(policy(driver=CRD_POLICY), nodes, pods, daemonsets=sets,
                    nvidia_drivers=[nvidia_driver("hopper", "notReady"), nvidia_driver("ampere")])
    assert result["nodes"]["h1"]["driver"] == "ready" and result["nodes"]["a1"]["driver"] == "ready"
    assert result["drivers"]["h1"] == {"pod": "nvidia-gpu-driver-ubuntu22.04-aaa-h1", "nvidia_driver": "hopper",
                                       "source": "NVIDIADriver hopper", "state": "ready",
                                       "image": "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04"}
    assert result["drivers"]["a1"]["nvidia_driver"] == "ampere"
    assert result["drivers"]["a1"]["image"].endswith(":570.195.03-ubuntu22.04")
    assert result["nodes"]["h2"]["driver"] == ("pod nvidia-gpu-driver-ubuntu22.04-aaa-h2 of NVIDIADriver hopper: "
                                               "Running, container c not ready")
    assert "NVIDIADriver hopper: state notReady" in result["not_ready"]
    assert not any(line.startswith("NVIDIADriver ampere") for line in result["not_ready"])


def test_a_driver_pod_of_another_nvidiadriver_or_of_clusterpolicy_is_not_the_nodes_driver():
    """Moving a node between pools, or from ClusterPolicy's driver (whose pods NVIDIA's controller leaves running,
    orphaned, until the NVIDIADriver's replace them): only the pod of the NVIDIADriver the node is routed to counts."""
    nodes = [node("n1", labels={OWNER: "hopper"}), node("n2", labels={OWNER: "hopper"}), node("n3")]
    sets = [daemonset("ds-hopper", "hopper"), daemonset("ds-ampere", "ampere")]
    pods = (all_pods("n1", skip=("driver",)) + all_pods("n2") + all_pods("n3", skip=("driver",))
            + [cr_driver_pod("n1", "ds-ampere"), cr_driver_pod("n3", "ds-ampere")])
    result = assess(policy(driver=CRD_POLICY), nodes, pods, daemonsets=sets, nvidia_drivers=[])
    assert result["nodes"]["n1"]["driver"] == ("no driver pod of NVIDIADriver hopper (the node's %s) on the node (found "
                                               "ds-ampere-n1 of NVIDIADriver ampere)" % OWNER)
    assert result["nodes"]["n2"]["driver"] == ("no driver pod of NVIDIADriver hopper (the node's %s) on the node (found "
                                               "nvidia-driver-daemonset-n2 of ClusterPolicy)" % OWNER)
    assert result["nodes"]["n3"]["driver"].startswith("no NVIDIADriver selects the node")
    assert result["drivers"]["n3"]["nvidia_driver"] == "ampere"
    assert "n1: driver (%s)" % result["nodes"]["n1"]["driver"] in result["not_ready"]


def test_nvidiadriver_errors_are_reported_with_their_reason():
    conflict = ("ConflictingNodeSelector", "multiple NVIDIADrivers match the same node n1: [a b]")
    result = assess(policy(driver=CRD_POLICY), [node("n1", labels={OWNER: "a"})], all_pods("n1"), daemonsets=[],
                    nvidia_drivers=[nvidia_driver("b", "notReady", conflict), nvidia_driver("a", "notReady", conflict),
                                    {"metadata": {"name": "c"}}])
    assert result["not_ready"][:4] == [
        "NVIDIADriver a: state notReady (ConflictingNodeSelector: multiple NVIDIADrivers match the same node n1: [a b])",
        "NVIDIADriver b: state notReady (ConflictingNodeSelector: multiple NVIDIADrivers match the same node n1: [a b])",
        "NVIDIADriver c: state no status yet",
        "n1: driver (no driver pod of NVIDIADriver a (the node's %s) on the node (found nvidia-driver-daemonset-n1 of "
        "ClusterPolicy))" % OWNER]


def test_nvidiadrivers_do_not_count_while_clusterpolicy_runs_the_driver():
    result = assess(policy(), [node("n1")], all_pods("n1"), daemonsets=[], nvidia_drivers=[nvidia_driver("x", "disabled")])
    assert result["ready"], result["not_ready"]
    assert result["drivers"]["n1"]["source"] == "ClusterPolicy"
