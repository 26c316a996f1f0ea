"""Smoke pod manifest and the checks of its nvidia-smi output (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.smoke import (
    busy_reason,
    check_output,
    pod_manifest,
    pod_name,
)


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


def _pod(gpus, phase="Running", resource="nvidia.com/gpu", init=0):
    spec = {"containers": [{"name": "main", "resources": {"limits": {resource: str(gpus)}}}]}
    if init:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": {resource: str(init)}}}]
    return {"metadata": {"name": "p", "namespace": "w"}, "spec": spec, "status": {"phase": phase}}


def test_a_resource_whose_every_unit_is_held_is_busy():
    node = {"status": {"allocatable": {"nvidia.com/gpu": "4", "nvidia.com/mig-1g.18gb": "0"}}}
    held = [_pod(2), _pod(2)]
    assert busy_reason(node, held, "nvidia.com/gpu") == "not run: all 4 nvidia.com/gpu of the node are held by its pods"
    # One unit free: the smoke pod can run. Finished pods hold nothing; a pending pod bound there does.
    assert busy_reason(node, [_pod(2), _pod(1)], "nvidia.com/gpu") is None
    assert busy_reason(node, [_pod(2), _pod(2, phase="Succeeded")], "nvidia.com/gpu") is None
    assert busy_reason(node, [_pod(2), _pod(2, phase="Pending")], "nvidia.com/gpu") is not None
    # An init container's need counts as Kubernetes counts it (the larger of init and app containers).
    assert busy_reason(node, [_pod(1, init=4)], "nvidia.com/gpu") is not None
    # Nothing advertised is not "busy": the smoke pod's failure is the finding.
    assert busy_reason(node, held, "nvidia.com/mig-1g.18gb") is None
    assert busy_reason(node, [], "nvidia.com/mig-3g.71gb") is None
