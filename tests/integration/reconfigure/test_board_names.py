"""mig-reconfigure.yml on GPUs whose NVML name is not their catalog family's main name (an H100 PCIe shares the
H100 80GB HBM3's profile table, an H200 NVL the H200's, an A100 80GB PCIe the A100-SXM4-80GB's): NVIDIA's GFD
labels the node with the GPU's own name, and the rollout's verification expects that name, with MIG on and off."""

import pytest

from tests.integration.reconfigure.conftest import PLAYBOOK, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rows_of, rollout_vars, wait_advertised
from tests.testbed.pytest_cluster import unique_name

PRODUCT = "nvidia.com/gpu.product"


# (simulated model, its product as NVIDIA's GFD writes it, its NVML name, an all-<profile> config, that profile)
BOARDS = [
    ("H100-PCIe", "NVIDIA-H100-PCIe", "NVIDIA H100 PCIe", "all-1g.10gb", "1g.10gb"),
    ("H200-NVL", "NVIDIA-H200-NVL", "NVIDIA H200 NVL", "all-1g.18gb", "1g.18gb"),
    ("A100-80GB-PCIe", "NVIDIA-A100-80GB-PCIe", "NVIDIA A100 80GB PCIe", "all-1g.10gb", "1g.10gb"),
]


@pytest.mark.parametrize("model, product, nvml_name, config, profile", BOARDS)
def test_a_board_is_verified_with_its_own_product_name(testbed, gpu_cluster, add_gpu_node, runner, model, product,
                                                       nvml_name, config, profile):
    node = add_gpu_node("rc-board", model, 1)
    wait_advertised(testbed, node)
    assert node_view(testbed, node)["labels"][PRODUCT] == product  # NVIDIA's GFD on the simulated NVML
    planned = []
    for target, allocatable in ((config, {"nvidia.com/mig-" + profile: "7"}), ("all-disabled", {"nvidia.com/gpu": "1"})):
        plan = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile=target), check=True,
                               diff=True)
        assert plan.rc == 0, plan.explain()
        assert_check_shows_the_change(plan, node, target)
        result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile=target))
        assert result.rc == 0, result.explain()
        assert rows_of(result)[node]["result"] == "reconfigured", rows_of(result)[node]
        view = node_view(testbed, node)
        assert view["labels"][CONFIG] == target and view["labels"][STATE] == "success"
        assert gpu_allocatable(view) == allocatable
        assert view["labels"][PRODUCT] == product
        planned.extend(plan.task("Plan every node")["plan"])
        again = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile=target), check=True,
                                diff=True)
        assert again.rc == 0 and again.task("Plan every node")["changed"] is False, again.explain()
        assert sum(host["changed"] for host in again.data["stats"].values()) == 0, again.data["stats"]
    assert [entry["model"] for entry in planned] == [nvml_name] * 2


def assert_check_shows_the_change(plan, node, target):
    """--check reports changed for the node the plan changes; --diff shows its label and layout before -> after."""
    task = plan.task("Plan every node")
    assert task["changed"] is True and task["order"] == [node], task
    assert "%s: nvidia.com/mig.config=%s" % (node, target) in task["diff"]["after"], task["diff"]
    assert "%s: nvidia.com/mig.config=" % node in task["diff"]["before"], task["diff"]
    assert sum(host["changed"] for host in plan.data["stats"].values()) > 0, plan.data["stats"]
