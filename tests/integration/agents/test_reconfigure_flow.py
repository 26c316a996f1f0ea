"""The simulated MIG Manager against mig-parted v0.15's reconfigure flow (pkg/mig/reconfigure/reconfigure.go, read
from NVIDIA/mig-parted; reference nvidia-real-behaviour.md items 6-9): the states the real one reaches and the
ones it never does. Same session fixtures as test_protocol.py (NVIDIA's chart and controller, the agents)."""

import time

import pytest
from kubernetes import client

from tests.integration.agents.test_protocol import CONFIG, DP, PAUSABLE, PAUSED, STATE, in_order, mig_modes, node_history, ready_node
from tests.testbed.agents.migmanager import HOST_DRIVER_ANNOTATION, KUBELET_STOPPED_ANNOTATION
from tests.testbed.agents.pytest_agents import GPU_CLUSTER_VALUES
from tests.testbed.gpusim import hoststate
from tests.testbed.pytest_cluster import unique_name

CLIENT = "nvidia.com/gpu.deploy.client"
HOLD = "gpufleet.test/hold"


@pytest.fixture(scope="module", autouse=True)
def chart_values(gpu_cluster):
    gpu_cluster.install_chart(GPU_CLUSTER_VALUES)


def ready_of(node):
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)


def ready_history(testbed, node):
    """Every (mig.config.state, Ready) pair the node goes through."""
    return node_history(testbed, node, lambda obj: ((obj.metadata.labels or {}).get(STATE), ready_of(obj)))


def test_already_applied_sets_every_pausable_deploy_label_true(gpu_cluster, add_gpu_node):
    """setState(success) on an already-applied config writes maybeSetTrue for every pausable label, also one the
    node never had (gpu.deploy.nvsm: the operator does not set it)."""
    name = ready_node(gpu_cluster, add_gpu_node, "applied-true")
    labels = gpu_cluster.labels(name)
    assert "MIG configuration already applied" in gpu_cluster.mig_manager_log(name)
    assert dict((k, labels.get("nvidia.com/gpu.deploy." + k)) for k in PAUSABLE) == dict((k, "true") for k in PAUSABLE)


def test_operand_wait_timeout_wedges_pending_and_waits_for_client_daemonset_pods(
        gpu_cluster, add_gpu_node, testbed_namespace):
    """A pod of a DaemonSet selecting nvidia.com/gpu.deploy.client that does not go away: MIG Manager waits for it,
    and at its timeout returns without a state - pending, operands paused (the real wedge), not failed."""
    testbed = gpu_cluster.testbed
    name = ready_node(gpu_cluster, add_gpu_node, "client-ds")
    gpu_cluster.label(name, CLIENT, "true")
    ds = unique_name("gpu-client")
    client.AppsV1Api(testbed.api_client()).create_namespaced_daemon_set(testbed_namespace, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ds},
        "spec": {"selector": {"matchLabels": {"app": ds}}, "template": {
            "metadata": {"labels": {"app": ds}},
            "spec": {"nodeSelector": {CLIENT: "true"}, "containers": [{"name": "c", "image": "client"}]}}}})

    def client_pod():
        pods = testbed.core.list_namespaced_pod(testbed_namespace, label_selector="app=%s" % ds,
                                                field_selector="spec.nodeName=%s" % name).items
        return pods[0] if pods and pods[0].status.phase == "Running" else None
    pod = testbed.wait_for(client_pod, 60, "the client DaemonSet's pod on %s" % name)
    testbed.core.patch_namespaced_pod(pod.metadata.name, testbed_namespace, {"metadata": {"finalizers": [HOLD]}})
    try:
        gpu_cluster.label(name, CONFIG, "all-1g.18gb")
        gpu_cluster.wait_labels(name, {STATE: "pending", DP: PAUSED, CLIENT: PAUSED}, timeout=60)
        testbed.wait_for(lambda: "failed to wait for pods to be deleted" in gpu_cluster.mig_manager_log(name), 60,
                         "MIG Manager's pod wait to time out")
        log = gpu_cluster.mig_manager_log(name)
        assert "%s/%s" % (testbed_namespace, pod.metadata.name) in log
        time.sleep(2)
        labels = gpu_cluster.labels(name)
        assert (labels[STATE], labels[DP], labels[CLIENT]) == ("pending", PAUSED, PAUSED)
        assert "Updating label %s=failed" % STATE not in log
        assert mig_modes(gpu_cluster, name) == [(0, 0), (0, 0)]  # the GPUs were never touched
    finally:
        testbed.core.patch_namespaced_pod(pod.metadata.name, testbed_namespace, {"metadata": {"finalizers": None}})
        client.AppsV1Api(testbed.api_client()).delete_namespaced_daemon_set(ds, testbed_namespace)


def test_mig_off_without_reboot_when_the_mode_change_does_not_take_fails(gpu_cluster, add_gpu_node):
    """No WITH_REBOOT and no GPU reset: `apply` then refuses to leave MIG on when the config says off."""
    name = ready_node(gpu_cluster, add_gpu_node, "off-noreset", "A100-SXM4-40GB", 1)
    gpu_cluster.label(name, CONFIG, "all-1g.5gb")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-1g.5gb.count": "7"}, timeout=90)
    gpu_cluster.set_faults(name, ["reset-unsupported"])
    state = gpu_cluster.state_path(name)
    gpu_cluster.testbed.wait_for(lambda: any(f["name"] == "reset_unsupported" and f["value"]
                                             for f in hoststate.summary(state)["faults"]), 30, "NVML refusing resets")
    gpu_cluster.label(name, CONFIG, "all-disabled")
    gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=90)
    assert "MIG mode is currently enabled, but the configuration specifies it should be disabled" in \
        gpu_cluster.mig_manager_log(name)
    assert mig_modes(gpu_cluster, name) == [(1, 0)]  # disable pending a reset that cannot happen


def test_missing_custom_configmap_keeps_mig_manager_from_starting(gpu_cluster, add_gpu_node):
    """spec.migManager.config.name naming a missing ConfigMap: the pod cannot mount it, MIG Manager never runs and
    no state is ever set; kubelet retries the mount, so it starts once the ConfigMap exists."""
    testbed = gpu_cluster.testbed
    missing = unique_name("absent-mig-config")
    gpu_cluster.patch_policy({"migManager": {"config": {"name": missing}}})
    try:
        name = add_gpu_node("no-cm", "H200", 1)
        gpu_cluster.wait_labels(name, {CONFIG: "all-disabled"}, timeout=90)
        testbed.wait_for(lambda: "nvidia-mig-manager" in gpu_cluster.operand_pods(name), 90, "the MIG Manager pod")

        def failed_mount():
            events = testbed.core.list_namespaced_event("gpu-operator", field_selector="reason=FailedMount").items
            return [e for e in events if e.source.host == name and missing in e.message]
        events = testbed.wait_for(failed_mount, 30, "FailedMount event of the MIG Manager pod")
        assert 'configmap "%s" not found' % missing in events[0].message
        time.sleep(3)
        assert STATE not in gpu_cluster.labels(name)
        assert gpu_cluster.mig_manager_log(name) == ""
        testbed.core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=missing), data={"config.yaml": (
                "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n")}))
        gpu_cluster.wait_labels(name, {STATE: "success"}, timeout=60)
    finally:
        gpu_cluster.patch_policy({"migManager": {"config": {"name": ""}}})
        testbed.core.delete_namespaced_config_map(missing, "gpu-operator")


def test_host_driver_mode_change_stops_kubelet_then_restarts_it(gpu_cluster, add_gpu_node):
    """WITH_SHUTDOWN_HOST_GPU_CLIENTS (driver on the host): a MIG mode change stops kubelet too - the node is
    NotReady while pending - and restarts it before success; a layout-only change keeps kubelet running."""
    testbed = gpu_cluster.testbed
    name = ready_node(gpu_cluster, add_gpu_node, "host-driver", "H200", 1)
    testbed.core.patch_node(name, {"metadata": {"annotations": {HOST_DRIVER_ANNOTATION: "true"}}})
    with ready_history(testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-1g.18gb")
        gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-1g.18gb.count": "7"}, timeout=90)
    assert in_order(seen, [("pending", "True"), ("pending", "False"), ("pending", "True"), ("success", "True")]), seen
    assert ("success", "False") not in seen, seen
    log = gpu_cluster.mig_manager_log(name)
    assert "Stopping kubelet.service" in log and "Restarting all GPU clients previously shutdown on the host" in log
    node = testbed.core.read_node(name)
    assert ready_of(node) == "True" and KUBELET_STOPPED_ANNOTATION not in (node.metadata.annotations or {})
    with ready_history(testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-7g.141gb")
        gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-7g.141gb.count": "1"}, timeout=90)
    assert all(ready == "True" for _state, ready in seen), seen
    assert gpu_cluster.mig_manager_log(name).count("Stopping kubelet.service") == 1
