"""Drain, capacity, the report, validation and operator status read a time-sliced GPU the same way.

The pod: ``resources.limits: {nvidia.com/gpu.shared: 1}`` (time-slicing with renameByDefault),
on a node advertising ``nvidia.com/gpu.shared: 8`` for 2 GPUs shared 4 ways. Before k8s/gpu_labels the
report counted no request for it and validation saw a node advertising nothing.
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import capacity, drain
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.smoke import check_output, pod_manifest

SHARED = "nvidia.com/gpu.shared"
OPERANDS = ("driver", "container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter",
            "operator-validator")


def sliced_node(name="ts", labels=None, present=True):
    base = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.memory": "81559", "nvidia.com/mig.strategy": "none"}
    if present:
        base["nvidia.com/gpu.present"] = "true"
    base.update(labels if labels is not None else {})
    alloc = {"cpu": "32", SHARED: "8"}
    return {"metadata": {"name": name, "labels": base}, "spec": {},
            "status": {"allocatable": alloc, "capacity": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def sliced_pod(name="shared-job", node_name="ts"):
    return {"metadata": {"namespace": "ml", "name": name, "ownerReferences": [{"kind": "ReplicaSet"}]},
            "spec": {"nodeName": node_name, "containers": [{"resources": {"limits": {SHARED: 1}}}]},
            "status": {"phase": "Running"}}


def test_the_time_sliced_pod_is_one_gpu_request_everywhere():
    pod = sliced_pod()
    want = {SHARED: 1}
    assert gpu_labels.pod_gpu_requests(pod) == want
    # drain: a GPU pod, evicted, with the same request
    assert drain.is_gpu_pod(pod)
    plan = drain.classify_pods([pod])
    assert [p["name"] for p in plan["evict"]] == ["shared-job"] and plan["evict"][0]["gpu_resources"] == want
    # capacity
    assert capacity.pod_gpu_requests(pod) == want
    # the report (it returned {} here before) counts it as requested on its node
    built = report.build_report([sliced_node()], [pod])
    assert built["nodes"][0]["requested"] == want
    assert built["totals"]["per_resource"][SHARED]["requested"] == 1
    assert built["totals"]["per_resource"][SHARED]["allocatable"] == 8


def test_capacity_warns_in_the_shared_resource_when_no_room_is_left():
    pod = sliced_pod()
    plans = [{"node": "ts", "errors": [], "expected_resources": {"nvidia.com/mig-1g.10gb": 7},
              "pods_to_evict": ["ml/shared-job"]}]
    warnings = capacity.eviction_warnings(plans, [sliced_node()], [pod])
    assert len(warnings) == 1 and "1 nvidia.com/gpu.shared" in warnings[0] and "ml/shared-job" in warnings[0]
    spare = sliced_node("spare")
    assert capacity.eviction_warnings(plans, [sliced_node(), spare], [pod]) == []


def test_validation_sees_the_time_sliced_node_as_healthy_and_smokes_the_shared_resource():
    node = sliced_node()
    hardware = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "mig": {"current": False}}] * 2}
    result = validate_node(node, "none", hardware, dict((op, "ready") for op in OPERANDS))
    assert result["problems"] == []  # was: "device plugin advertises 0 GPU resources", label count 2 vs 0
    assert result["smoke_resources"] == [SHARED]
    assert result["summary"]["allocatable"] == {SHARED: 8}
    manifest = pod_manifest("ts", SHARED, "ns", "img", ["nvidia-smi", "-L"])
    assert manifest["spec"]["containers"][0]["resources"]["limits"] == {SHARED: "1"}
    assert gpu_labels.is_gpu_pod(manifest)
    assert check_output(SHARED, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)", 0, "NVIDIA-H100-80GB-HBM3", "none") is None


def test_validation_still_catches_a_shared_count_that_disagrees_with_the_labels():
    node = sliced_node(labels={"nvidia.com/gpu.count": "3"})
    problems = validate_node(node, "none")["problems"]
    assert problems == ["label nvidia.com/gpu.count=3 but allocatable nvidia.com/gpu=2"]


def test_not_renamed_time_slicing_and_single_strategy_shared_products():
    node = sliced_node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"})
    node["status"]["allocatable"] = node["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    assert validate_node(node, "none")["problems"] == []
    summary = cluster_facts.node_summary(node)
    assert summary["model"] == "NVIDIA-H100-80GB-HBM3"
    single = cluster_facts.node_summary(sliced_node(labels={
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "nvidia.com/gpu.count": "14",
        "nvidia.com/mig.strategy": "single"}))
    assert (single["model"], single["mig_devices"]) == ("NVIDIA-A100-SXM4-40GB", {"1g.5gb": 14})


def test_one_is_gpu_node_for_inventory_report_and_operator_status():
    # A node advertising only the shared resource, not (yet) labelled by the operator or GFD.
    bare = sliced_node("bare", labels={}, present=False)
    bare["metadata"]["labels"] = {}
    assert gpu_labels.is_gpu_node(bare)
    assert [n["name"] for n in report.build_report([bare], [])["nodes"]] == ["bare"]
    # operator status does not stop at gpu.present: it reports the missing operands
    result = assess({"spec": {}, "status": {"state": "ready"}}, [bare], [])
    assert sorted(result["nodes"]) == ["bare"]
    assert "bare: driver (node not labelled nvidia.com/gpu.deploy.driver by the operator)" in result["not_ready"]
    cpu = {"metadata": {"name": "cpu", "labels": {}}, "status": {"capacity": {"cpu": "4"}}}
    assert not gpu_labels.is_gpu_node(cpu)
    assert assess({"spec": {}, "status": {"state": "ready"}}, [cpu], [], wanted_nodes=["cpu"])["nodes"] == {
        "cpu": {"node": "no GPU: not labelled nvidia.com/gpu.present=true, no GFD labels, no GPU resources"}}
