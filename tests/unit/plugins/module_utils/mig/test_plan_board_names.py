"""The expected GFD product is the GPU's own NVML name, not the catalog's main name of its family: GFD writes
the NVML name with whitespace as '-' (NVIDIA/k8s-device-plugin v0.20.0 internal/lm/resource.go), and a board
such as the H100 PCIe shares its profile table with the H100 SXM but not its name."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts, plan, resolve

# (GFD product of the board as NVIDIA's GFD writes it, its PCI device id, a single-strategy config and profile)
BOARDS = [
    ("NVIDIA-H100-PCIe", "0x233110DE", "all-1g.10gb", "1g.10gb"),
    ("NVIDIA-H200-NVL", "0x233B10DE", "all-1g.18gb", "1g.18gb"),
    ("NVIDIA-A100-80GB-PCIe", "0x20B510DE", "all-1g.10gb", "1g.10gb"),
    ("NVIDIA-A800-SXM4-80GB", "0x20F310DE", "all-3g.40gb", "3g.40gb"),
    ("NVIDIA-H800", "0x232410DE", "all-7g.80gb", "7g.80gb"),
]


def _labels(product, count=2):
    return {gpu_labels.LABEL_PRODUCT: product, gpu_labels.LABEL_COUNT: str(count)}


@pytest.mark.parametrize("product, pci_id, config, profile", BOARDS)
def test_all_disabled_expects_the_boards_own_product(product, pci_id, config, profile):
    hardware = facts.hardware_from_gfd_labels(_labels(product), node_name="n1")
    assert hardware["gpus"][0]["pci_device_id"] == pci_id
    planned = plan.plan_node(hardware, config_name="all-disabled")
    assert plan.expected_gfd_labels(planned, "none")[gpu_labels.LABEL_PRODUCT] == product
    assert plan.expected_gfd_labels(planned, "single")[gpu_labels.LABEL_PRODUCT] == product


@pytest.mark.parametrize("product, pci_id, config, profile", BOARDS)
def test_single_strategy_expects_the_boards_own_product(product, pci_id, config, profile):
    planned = plan.plan_node(facts.hardware_from_gfd_labels(_labels(product)), config_name=config)
    assert planned["feasible"], planned["reason"]
    assert plan.expected_gfd_labels(planned, "single")[gpu_labels.LABEL_PRODUCT] == "%s-MIG-%s" % (product, profile)


def test_gpu_info_without_profiles_keeps_the_nvml_name():
    gpus = [{"index": i, "name": "NVIDIA H100 PCIe", "pci_device_id": "0x233110DE",
             "mig": {"current": True, "pending": True}} for i in range(2)]
    planned = plan.plan_node({"gpus": gpus}, config_name="all-disabled")
    assert [g["model"] for g in planned["gpus"]] == ["NVIDIA H100 PCIe"] * 2
    assert plan.expected_gfd_labels(planned, "mixed")[gpu_labels.LABEL_PRODUCT] == "NVIDIA-H100-PCIe"


def test_gpu_known_only_by_pci_id_is_named_by_its_board():
    gpus = [{"index": 0, "pci_device_id": "0x233B10DE", "mig": {"current": False, "pending": False}}]
    planned = plan.plan_node({"gpus": gpus}, config_name="all-disabled")
    assert plan.expected_gfd_labels(planned, "none")[gpu_labels.LABEL_PRODUCT] == "NVIDIA-H200-NVL"


def test_a_config_without_an_entry_for_the_board_leaves_it_unselected():
    """NVIDIA's all-1g.35gb lists the H200 SXM (0x233510DE) and not the H200 NVL (0x233B10DE): MIG Manager
    leaves an H200 NVL as it is, so the plan must not take the node for an H200 SXM."""
    planned = plan.plan_node(facts.hardware_from_gfd_labels(_labels("NVIDIA-H200-NVL", 1)), config_name="all-1g.35gb",
                             config=resolve.builtin_config())
    assert not planned["feasible"] and "no entry for GPU 0" in planned["reason"]
