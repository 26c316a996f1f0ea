"""mig-reconfigure.yml end to end with NVIDIA's nvidia-mig-manager doing the MIG change on the node and NVIDIA's
device plugin advertising its resources (conftest.py:
a cluster of its own with NVIDIA's v26.7.0 chart and controller), run by ansible-playbook under the least-privilege
ServiceAccount, as tests/integration/reconfigure/test_rollout.py runs it against the simulator."""

from tests.integration.nvidia_mig_manager.conftest import host_environment
from tests.integration.nvidia_mig_manager.test_label import gpu_instances, mig_modes, nvidia_node
from tests.integration.reconfigure.conftest import PLAYBOOK, Runner, apply_automation_rbac, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, rollout_vars, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name


def test_mig_reconfigure_rolls_a_node_through_nvidias_mig_manager(nvidia_cluster, add_nvidia_node, tmp_path):
    bed = nvidia_cluster.testbed
    runner = Runner(apply_automation_rbac(bed), tmp_path / "ansible")
    name = nvidia_node(nvidia_cluster, add_nvidia_node, "nvroll")
    wait_advertised(bed, name)

    result = runner.playbook(PLAYBOOK, [name], dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb"),
                             host_vars=host_environment(nvidia_cluster, [name]))
    assert result.rc == 0, result.explain()
    row = rows_of(result)[name]
    assert row["result"] == "reconfigured" and row["hardware_verified"] is True, row
    view = node_view(bed, name)
    assert view["labels"][CONFIG] == "all-1g.10gb" and view["labels"][STATE] == "success"
    assert view["unschedulable"] is False
    assert gpu_instances(nvidia_cluster, name) == ["1g.10gb"] * 7 and mig_modes(nvidia_cluster, name) == [(1, 1)]
    log = nvidia_cluster.mig_manager_log(name)
    assert "Successfully updated to MIG config: all-1g.10gb" in log, log[-3000:]  # NVIDIA's process did it
    # The allocatable the rollout verified is what NVIDIA's device plugin listed to the node's kubelet endpoint.
    plugin_log = nvidia_cluster.device_plugin_log(name)
    assert "Registered device plugin for 'nvidia.com/mig-1g.10gb' with Kubelet" in plugin_log, plugin_log[-3000:]
    assert {k: v for k, v in view["allocatable"].items() if k.startswith("nvidia.com/") and v != "0"} == {
        "nvidia.com/mig-1g.10gb": "7"}, view["allocatable"]


def test_a_failed_cdi_step_fails_the_node_with_mig_managers_reason(nvidia_cluster, add_nvidia_node, tmp_path):
    """CDI is on (GPU Operator v26.7.0's default): after the MIG change, NVIDIA's MIG Manager runs the toolkit's
    nvidia-ctk on the host to write the management CDI spec. Here the host's nvidia-ctk cannot generate it (fault
    cdi-generate-fails, tests/testbed/fakehost/bin/nvidia-ctk), so MIG Manager reports failed with the layout changed."""
    bed = nvidia_cluster.testbed
    runner = Runner(apply_automation_rbac(bed), tmp_path / "ansible")
    name = nvidia_node(nvidia_cluster, add_nvidia_node, "nvcdi")
    wait_advertised(bed, name)
    nvidia_cluster.set_faults(name, ["cdi-generate-fails"])

    result = runner.playbook(PLAYBOOK, [name], dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb"))

    assert result.rc != 0, result.explain()
    row = rows_of(result)[name]
    reason = "failed to handle CDI: cmd.Wait error for cdiGenerateCommand: exit status 1"
    assert row["result"] == "failed" and row["stage"] == "apply", row
    assert row["message"] == "node %s: all-disabled -> all-1g.10gb: MIG Manager reported failed: %s; node left cordoned" % (
        name, reason), row
    assert row["diagnostics"]["mig_manager_error"] == reason, row["diagnostics"]
    assert row["diagnostics"]["hints"][0].startswith(
        "MIG Manager changed the MIG layout for all-1g.10gb, then its CDI step failed"), row["diagnostics"]["hints"]
    assert row["left_cordoned"] is True and node_view(bed, name)["unschedulable"] is True
    assert gpu_instances(nvidia_cluster, name) == ["1g.10gb"] * 7  # mig-parted applied the layout before the CDI step
    # The reason is NVIDIA's MIG Manager's own log line, read through the API as kubectl logs reads it; nvidia-ctk's
    # stderr is not in it (mig-parted pkg/mig/reconfigure createCDISpec discards it).
    log = row["diagnostics"]["mig_manager_logs"]
    assert any('level=error msg="Error: %s"' % reason in text for text in log.values()), log
    assert not any("failed to generate CDI spec" in text for text in log.values()), log
