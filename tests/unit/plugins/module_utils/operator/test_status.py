"""Operator readiness, node checks, smoke output checks and the validation table (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_validation_table import gpu_validation_table
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess, enabled_operands
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.smoke import check_output, pod_manifest, pod_name

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


MIXED_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2",
                "nvidia.com/gpu.memory": "81559", "nvidia.com/mig.strategy": "mixed",
                "nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-3g.40gb.count": "1"}
MIXED_ALLOC = {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1"}
HARDWARE = {"gpus": [
    {"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "mig": {"current": True},
     "instances": [{"profile": "1g.10gb", "compute_instances": [{"slices": 1}]}, {"profile": "1g.10gb"},
                   {"profile": "3g.40gb", "compute_instances": [{"slices": 3}]},
                   {"profile": "3g.40gb", "compute_instances": []}]},
    {"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "mig": {"current": False}, "instances": []},
]}


def test_healthy_mixed_node_passes_and_lists_smoke_resources():
    result = validate_node(node("a", MIXED_LABELS, MIXED_ALLOC), "mixed", HARDWARE, {"device-plugin": "ready"})
    assert result["problems"] == []
    assert result["smoke_resources"] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]


def test_resources_left_at_zero_are_not_problems():
    alloc = dict(MIXED_ALLOC, **{"nvidia.com/mig-7g.80gb": "0"})
    assert validate_node(node("a", MIXED_LABELS, alloc), "mixed", HARDWARE)["problems"] == []
    alloc["nvidia.com/mig-7g.80gb"] = "1"
    assert validate_node(node("a", MIXED_LABELS, alloc), "mixed")["problems"] == [
        "allocatable nvidia.com/mig-7g.80gb=1 has no nvidia.com/mig-7g.80gb.count label"]


def test_device_plugin_advertising_nothing_is_caught():
    zero = dict((k, "0") for k in MIXED_ALLOC)
    result = validate_node(node("a", MIXED_LABELS, zero), "mixed", HARDWARE, {"device-plugin": "ready"})
    assert "device plugin advertises 0 GPU resources (allocatable has no nvidia.com/gpu or nvidia.com/mig-*)" in result["problems"]
    assert "label nvidia.com/mig-1g.10gb.count=2 but allocatable nvidia.com/mig-1g.10gb=0" in result["problems"]


def test_labels_that_disagree_with_hardware_are_caught():
    labels = dict(MIXED_LABELS, **{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig-3g.40gb.count": "2"})
    alloc = dict(MIXED_ALLOC, **{"nvidia.com/mig-3g.40gb": "2"})
    result = validate_node(node("a", labels, alloc), "mixed", HARDWARE, {"mig-manager": "no nvidia-mig-manager pod on the node"})
    assert "operand mig-manager: no nvidia-mig-manager pod on the node" in result["problems"]
    assert "label nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB but the hardware is NVIDIA H100 80GB HBM3" in result["problems"]
    assert "label nvidia.com/mig-3g.40gb.count=2 but the hardware has 1 3g.40gb MIG devices" in result["problems"]


def test_single_strategy_invalid_layout():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID", "nvidia.com/gpu.count": "0",
              "nvidia.com/mig.strategy": "single"}
    result = validate_node(node("a", labels, {"nvidia.com/gpu": "0"}), "single", HARDWARE)
    assert any("MIG-INVALID" in p for p in result["problems"])
    assert any("cannot be advertised under the single strategy" in p for p in result["problems"])


def test_smoke_pod_and_output_checks():
    manifest = pod_manifest("node-with-a-very-long-name-" + "x" * 60, "nvidia.com/mig-1g.10gb", "ns", "img", ["nvidia-smi", "-L"])
    assert len(manifest["metadata"]["name"]) <= 63
    assert manifest["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert pod_name("a", "nvidia.com/gpu") != pod_name("b", "nvidia.com/gpu")
    gpu = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"
    mig = gpu + "\n  MIG 1g.10gb     Device  0: (UUID: MIG-abcd)"
    product = "NVIDIA-H100-80GB-HBM3"
    assert check_output("nvidia.com/gpu", gpu, 0, product) is None
    assert check_output("nvidia.com/mig-1g.10gb", mig, 0, product) is None
    assert check_output("nvidia.com/mig-3g.40gb", mig, 0, product) == "container got MIG device 1g.10gb, asked for 3g.40gb"
    assert check_output("nvidia.com/gpu", gpu, 0, "NVIDIA-A100-SXM4-40GB") == (
        "container sees NVIDIA H100 80GB HBM3, node is labelled NVIDIA-A100-SXM4-40GB")
    assert check_output("nvidia.com/gpu", "No devices were found", 6, product) == "nvidia-smi exited 6: No devices were found"
    assert check_output("nvidia.com/gpu", gpu + "\n" + gpu.replace("GPU 0", "GPU 1"), 0) == "container sees 2 GPUs, asked for one"
    assert check_output("nvidia.com/gpu", mig, 0, product, "mixed").startswith("asked for a full GPU")
    assert check_output("nvidia.com/gpu", mig, 0, product, "single") is None


def test_validation_table():
    checks = {"nodes": {
        "b": {"problems": ["device plugin advertises 0 GPU resources"], "product": "NVIDIA-H200", "summary": {"allocatable": {}}},
        "a": {"problems": [], "product": "NVIDIA-H100-80GB-HBM3", "summary": {"allocatable": {"nvidia.com/gpu": 8}}},
        "c": {"problems": [], "product": "NVIDIA-H200", "summary": {"allocatable": {"nvidia.com/gpu": 4}}, "hardware_checked": True},
    }}
    smoke = {"results": [{"node": "a", "resource": "nvidia.com/gpu", "ok": True, "problem": None},
                         {"node": "b", "resource": "nvidia.com/gpu", "ok": False, "problem": "did not finish"}]}
    lines = gpu_validation_table(checks, smoke)
    assert lines[0].split() == ["NODE", "MODEL", "RESOURCES", "HARDWARE", "CHECKS", "SMOKE", "RESULT"]
    assert lines[1].split() == ["a", "NVIDIA-H100-80GB-HBM3", "gpu=8", "not", "read", "ok", "1/1", "ok", "PASS"]
    assert lines[2].split()[-1] == "FAIL"
    assert lines[3].split()[3] == "compared"
    assert lines[4:] == ["b: device plugin advertises 0 GPU resources", "b: smoke nvidia.com/gpu: did not finish"]
