"""Single strategy with +me profiles: GFD writes the product as <model>-MIG-<profile with + as .>
(NVIDIA/k8s-device-plugin internal/resource/nvml-mig-device.go GetName)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate import node as validate_node


def _plan(profile, count, gpus=2, model="NVIDIA H100 80GB HBM3"):
    entry = {"model": model, "mig_enabled": True, "current_mig_enabled": True, "target": {profile: count},
             "current": {}}
    return {"gpus": [dict(entry, index=i) for i in range(gpus)]}


def test_single_strategy_me_profile_product_keeps_me_as_dot_me():
    labels = plan.expected_gfd_labels(_plan("1g.10gb+me", 1), "single")
    assert labels[gpu_labels.LABEL_PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
    assert labels[gpu_labels.LABEL_COUNT] == "2"


def test_single_strategy_plain_profile_unchanged():
    labels = plan.expected_gfd_labels(_plan("1g.10gb", 7), "single")
    assert labels[gpu_labels.LABEL_PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels[gpu_labels.LABEL_COUNT] == "14"


def test_the_me_product_parses_back_to_its_profile():
    parsed = gpu_labels.parse_product(gpu_labels.single_mig_product_label("NVIDIA H100 80GB HBM3", "1g.10gb+me"))
    assert parsed["model"] == "NVIDIA-H100-80GB-HBM3" and parsed["mig_profile"] == "1g.10gb.me"


def _single_node(product):
    return {"metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "2", "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.present": "true"}},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}, "capacity": {"nvidia.com/gpu": "2"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def test_validation_expects_the_dot_me_product_under_single():
    hardware = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "mig_enabled": True,
                          "mig_devices": ["1g.10gb+me"]} for _index in range(2)]}
    good = validate_node.validate_node(_single_node("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"), "single", hardware)
    assert not [p for p in good["problems"] if "gpu.product" in p]
    bad = validate_node.validate_node(_single_node("NVIDIA-H100-80GB-HBM3-MIG-1g.10gbme"), "single", hardware)
    assert [p for p in bad["problems"] if "gives NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me" in p]
