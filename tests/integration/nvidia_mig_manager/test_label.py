"""NVIDIA's own nvidia-mig-manager (mig-parted v0.15.0, built from NVIDIA's release source) on a simulated node.

The agents run NVIDIA's process for the node while its mig-manager pod runs (tests/testbed/agents/nvidia_mig.py,
tests/testbed/nvidia_mig_manager.py), against the testbed's API server and the simulated NVML; only the host's OS
boundary is faked (docs/testbed.md, "NVIDIA's MIG Manager"). The rest: NVIDIA's v26.7.0 controller and chart on the
package's own cluster (conftest.py), NVIDIA's GFD and device plugin, the simulated dcgm-exporter.
"""

import yaml

from tests.integration.agents.test_protocol import (CONFIG, DP, OPERANDS, PAUSED, STATE, gpu_instances, in_order,
                                                    label_history, mig_modes)

H100 = "H100-80GB-HBM3"


def nvidia_node(gpu_cluster, add_gpu_node, hint, model=H100, count=1):
    """A node whose MIG Manager is NVIDIA's process, after its first run (the operator's default all-disabled)."""
    name = add_gpu_node(hint, model, count)
    gpu_cluster.wait_labels(name, {CONFIG: "all-disabled", STATE: "success"}, timeout=180)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == OPERANDS, 90,
                                 "operand pods %s on %s" % (OPERANDS, name))
    return name


def test_nvidias_mig_manager_switches_the_node_through_the_label(nvidia_cluster, add_nvidia_node):
    gpu_cluster = nvidia_cluster
    name = nvidia_node(gpu_cluster, add_nvidia_node, "nvmig")
    log = gpu_cluster.mig_manager_log(name)
    # NVIDIA's process, not the simulator: its own log lines, its own mig-parted output
    assert "Updating to MIG config: all-disabled" in log, log[-3000:]
    assert "Selected MIG config is already applied" in log, log[-3000:]

    with label_history(gpu_cluster.testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-1g.10gb")
        labels = gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-1g.10gb.count": "7"},
                                         timeout=180)
    # pending, operands paused, operands restored, then success (mig-parted pkg/mig/reconfigure Run)
    assert in_order(seen, [("pending", "true"), ("pending", PAUSED), ("pending", "true"), ("success", "true")]), seen
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert gpu_instances(gpu_cluster, name) == ["1g.10gb"] * 7
    assert mig_modes(gpu_cluster, name) == [(1, 1)]
    log = gpu_cluster.mig_manager_log(name)
    assert "Successfully updated to MIG config: all-1g.10gb" in log, log[-3000:]
    assert "MIG configuration applied successfully" in log, log[-3000:]  # nvidia-mig-parted's own output

    def advertised():
        alloc = gpu_cluster.allocatable(name)
        return alloc if alloc.get("nvidia.com/mig-1g.10gb") == "7" else None
    gpu_cluster.testbed.wait_for(advertised, 60, "MIG resources advertised")
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == OPERANDS, 90, "operands back")

    # and back: a MIG mode change (disable), applied by NVIDIA's process through the simulated NVML
    with label_history(gpu_cluster.testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-disabled")
        gpu_cluster.testbed.wait_for(lambda: mig_modes(gpu_cluster, name) == [(0, 0)], 180, "MIG mode disabled")
        gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-1g.10gb.count": None}, timeout=180)
    assert in_order(seen, [("pending", "true"), ("pending", PAUSED), ("pending", "true"), ("success", "true")]), seen
    assert gpu_instances(gpu_cluster, name) == []


def test_nvidias_mig_manager_publishes_its_generated_config_and_a_cdi_spec(nvidia_cluster, add_nvidia_node):
    """v26.7.0 gives mig-manager no config file: it generates one from the (simulated) hardware and publishes it as
    ConfigMap <node>-mig-config owned by its pod; CDI is on, so after an apply it runs nvidia-smi and nvidia-ctk and
    writes the management CDI spec into the host's /var/run/cdi (here the simulated host root, fakehost/bin/nvidia-ctk)."""
    name = nvidia_node(nvidia_cluster, add_nvidia_node, "nvcfg")
    testbed = nvidia_cluster.testbed
    cm = testbed.wait_for(lambda: ignore_404(testbed.core.read_namespaced_config_map, "%s-mig-config" % name,
                                             nvidia_cluster.namespace), 60, "ConfigMap %s-mig-config" % name)
    config = yaml.safe_load(cm.data["config.yaml"])
    assert config["mig-configs"]["all-1g.10gb"] == [{"devices": "all", "mig-enabled": True,
                                                     "mig-devices": {"1g.10gb": 7}}], config["mig-configs"].keys()
    pod = testbed.core.list_namespaced_pod(nvidia_cluster.namespace, label_selector="app=nvidia-mig-manager",
                                           field_selector="spec.nodeName=%s" % name).items
    assert [(o.kind, o.name) for o in cm.metadata.owner_references] == [("Pod", pod[0].metadata.name)]

    nvidia_cluster.label(name, CONFIG, "all-3g.40gb")
    nvidia_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-3g.40gb.count": "2"}, timeout=180)
    assert gpu_instances(nvidia_cluster, name) == ["3g.40gb", "3g.40gb"]
    spec = nvidia_cluster.hosts_dir / ("%s.nvidia-mig-manager" % name) / "host/var/run/cdi/management.nvidia.com-gpu.yaml"
    assert "kind: management.nvidia.com/gpu" in spec.read_text()
    log = nvidia_cluster.mig_manager_log(name)
    assert "Running nvidia-smi" in log and "Creating management CDI spec" in log, log[-3000:]


def ignore_404(call, *args):
    from kubernetes.client.rest import ApiException

    try:
        return call(*args)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_a_failure_after_an_earlier_success_leaves_the_operands_paused(nvidia_cluster, add_nvidia_node):
    """NVIDIA's v0.15.0 behaviour the simulator does not have: mig-parted pkg/mig/reconfigure keeps
    NoRestartK8sDaemonsetsOnExit (and NoRestartHostSystemdServicesOnExit) in package variables that a successful run
    sets and nothing resets, so in the same process a later run that fails after pausing the operands sets `failed`
    without restoring the deploy labels (the simulator's fail() restores them). A GPU held by a process on a MIG device
    makes the apply fail (ERROR_IN_USE from the simulated NVML)."""
    from tests.testbed.gpusim import hoststate

    name = nvidia_node(nvidia_cluster, add_nvidia_node, "nvheld")
    nvidia_cluster.label(name, CONFIG, "all-1g.10gb")
    nvidia_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-1g.10gb.count": "7"}, timeout=180)
    state = nvidia_cluster.state_path(name)
    gi = hoststate.summary(state)["gpus"][0]["gpu_instances"][0]
    hoststate.add_process(state, 0, 4242, 100, gi["id"], gi["compute_instances"][0]["id"])

    with label_history(nvidia_cluster.testbed, name) as seen:
        nvidia_cluster.label(name, CONFIG, "all-3g.40gb")
        labels = nvidia_cluster.wait_labels(name, {STATE: "failed"}, timeout=180)
    assert in_order(seen, [("pending", "true"), ("pending", PAUSED), ("failed", PAUSED)]), seen
    assert all(labels["nvidia.com/gpu.deploy." + k] == PAUSED
               for k in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")), labels
    log = nvidia_cluster.mig_manager_log(name)
    assert "ERROR_IN_USE" in log and "Error: failed to apply MIG configuration" in log, log[-3000:]
    # mig-parted cleared what it could before failing ("erroneous devices may persist"): only the held MIG device is left
    left = hoststate.summary(state)["gpus"][0]["gpu_instances"]
    assert [(g["id"], g["profile"]) for g in left] == [(gi["id"], "1g.10gb")], left
