"""MPS sharing and MIG, end to end: a node the device-plugin config shares with MPS is refused a MIG layout before
any change. NVIDIA's GFD exits on a node with MPS and any GPU in MIG mode
(internal/lm/nvml.go isMPSCapable) and the device plugin refuses MIG devices under MPS (internal/plugin/mps.go), so
the change could never be verified: the node would stay cordoned with stale labels until the deadline."""

from tests.integration.reconfigure.conftest import PLAYBOOK, node_view
from tests.integration.reconfigure.test_rollout import rollout_vars, wait_advertised
from tests.testbed.pytest_cluster import unique_name

MPS_CONFIG = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"


def test_mig_layout_on_an_mps_node_is_refused_before_any_change(testbed, gpu_cluster, add_gpu_node, runner):
    """...and the same node, already at its config, is planned as at target: its shares fold back into devices."""
    from kubernetes import client

    cm_name = unique_name("rc-mps")
    testbed.core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=cm_name), data={"mps": MPS_CONFIG}))
    strategy = gpu_cluster.policy()["spec"]["mig"]["strategy"]
    # NVIDIA's device plugin: it shares GPUs through MPS once the node's MPS control daemon answers
    # (nvidia-cuda-mps-control, the testbed's stand-in for a healthy daemon: tests/testbed/nvidia_device_plugin.py).
    name = add_gpu_node("rc-mps", "H100-80GB-HBM3", 2)
    try:
        wait_advertised(testbed, name)
        # MPS is refused with the mixed strategy (the device plugin exits), so the node runs single.
        gpu_cluster.patch_policy({"mig": {"strategy": "single"}, "devicePlugin": {"config": {"name": cm_name, "default": "mps"}}})
        labels = gpu_cluster.wait_labels(name, {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/mps.capable": "true",
                                                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}, timeout=60)
        assert labels["nvidia.com/gpu.replicas"] == "2"
        # Until NVIDIA's controller has rolled this node's device-plugin pod to MIG_STRATEGY=single (the DaemonSet is
        # rolled node by node over the whole cluster), the plugin refuses MPS under mixed and restarts with back-off.
        testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "4", 240, "2 GPUs x 2 MPS replicas")
        log = gpu_cluster.device_plugin_log(name)
        assert '"MPS daemon is healthy" resource="nvidia.com/gpu"' in log, log[-3000:]  # NVIDIA's plugin, MPS path
        view = node_view(testbed, name)

        # all-1g.10gb is one profile per node: single would accept it; MPS does not.
        result = runner.playbook(PLAYBOOK, [name], dict(rollout_vars(unique_name("lock"), mig_reconfigure_strategy="single"),
                                                        profile="all-1g.10gb"))
        assert result.rc != 0
        message = result.task("Stop before any change")["msg"]
        assert "node %s" % name in message and "MPS is not supported on MIG-enabled GPUs" in message, message
        assert "nvidia.com/gpu.sharing-strategy=mps" in message
        assert not result.ran("Reconfigure step")
        assert node_view(testbed, name) == view, "node %s changed" % name

        # Already at its config, shared 2 ways (allocatable 4 for 2 GPUs): the plan says so, nothing to change.
        current = view["labels"]["nvidia.com/mig.config"]
        plan = runner.playbook(PLAYBOOK, [name], dict(rollout_vars(unique_name("lock"), mig_reconfigure_strategy="single"),
                                                      profile=current), check=True)
        assert plan.rc == 0, plan.explain()
        entry = plan.task("Plan every node")["plan"][0]
        assert entry["expected_resources"] == {"nvidia.com/gpu": 2}
        assert entry["at_target"] is True, entry
    finally:
        gpu_cluster.patch_policy({"mig": {"strategy": strategy}, "devicePlugin": {"config": None}})
        testbed.core.delete_namespaced_config_map(cm_name, "gpu-operator")
