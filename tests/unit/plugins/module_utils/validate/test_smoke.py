"""Smoke pod manifest and the checks of its nvidia-smi output (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.smoke import check_output, pod_manifest, pod_name


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
