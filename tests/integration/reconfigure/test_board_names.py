"""mig-reconfigure.yml on GPUs whose NVML name is not their catalog family's main name (an H100 PCIe shares the
H100 80GB HBM3's profile table): NVIDIA's GFD labels the node with the GPU's own name, and the rollout's
verification expects that name, with MIG on and off."""

from tests.integration.reconfigure.conftest import PLAYBOOK, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rows_of, rollout_vars, wait_advertised
from tests.testbed.pytest_cluster import unique_name

PRODUCT = "nvidia.com/gpu.product"


def test_h100_pcie_node_is_verified_with_its_own_product_name(testbed, gpu_cluster, add_gpu_node, runner):
    node = add_gpu_node("rc-h100pcie", "H100-PCIe", 1)
    wait_advertised(testbed, node)
    assert node_view(testbed, node)["labels"][PRODUCT] == "NVIDIA-H100-PCIe"  # NVIDIA's GFD on the simulated NVML
    planned = []
    for target, allocatable in (("all-1g.10gb", {"nvidia.com/mig-1g.10gb": "7"}), ("all-disabled", {"nvidia.com/gpu": "1"})):
        plan = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile=target), check=True)
        assert plan.rc == 0, plan.explain()
        result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile=target))
        assert result.rc == 0, result.explain()
        assert rows_of(result)[node]["result"] == "reconfigured", rows_of(result)[node]
        view = node_view(testbed, node)
        assert view["labels"][CONFIG] == target and view["labels"][STATE] == "success"
        assert gpu_allocatable(view) == allocatable
        assert view["labels"][PRODUCT] == "NVIDIA-H100-PCIe"
        planned.extend(plan.task("Plan every node")["plan"])
    assert [entry["model"] for entry in planned] == ["NVIDIA H100 PCIe"] * 2
