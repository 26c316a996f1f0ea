"""Node faults during mig-reconfigure.yml: the node deleted, NotReady during
and after the apply, MIG Manager never started, its label changed by someone else. Each ends in a clear outcome;
no other node is touched and nothing is left cordoned without being reported."""

import time

from kubernetes import client

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, deploy, node_view, wait_running
from tests.integration.reconfigure.test_rollout import (
    CONFIG,
    STATE,
    gpu_allocatable,
    mounts_config_map,
    rollout_vars,
    rows_of,
    wait_advertised,
    wait_mig_manager_pods_run,
)
from tests.testbed.pytest_cluster import unique_name

HOLD = "gpufleet.test/hold"


def start(runner, order, variables):
    return runner.playbook(PLAYBOOK, order, variables, popen=True)


def finish(proc, timeout=300):
    from tests.integration.reconfigure.conftest import PlaybookResult

    out, err = proc.communicate(timeout=timeout)
    return PlaybookResult(proc.returncode, out, err)


def two_nodes(add_gpu_node, testbed, hint, faults, host_driver=False):
    first = add_gpu_node(hint + "-a", "H100-80GB-HBM3", 1, faults=faults, host_driver=host_driver)
    other = add_gpu_node(hint + "-b", "H100-80GB-HBM3", 1)
    for name in (first, other):
        wait_advertised(testbed, name)
    return first, other


def test_node_deleted_mid_rollout_ends_reported_and_touches_no_other_node(testbed, gpu_cluster, add_gpu_node, runner):
    node, other = two_nodes(add_gpu_node, testbed, "rf-deleted", ["slow"])
    untouched = node_view(testbed, other)
    variables = dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb", mig_reconfigure_nodes=[node, other])
    proc = start(runner, [node, other], variables)
    try:
        testbed.wait_for(lambda: node_view(testbed, node)["labels"].get(STATE) == "pending", 120, "pending")
        testbed.delete_node(node)
    finally:
        result = finish(proc)
    assert result.rc != 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["stage"] == "apply", row
    assert "node %s was deleted during the rollout (at step apply)" % node in row["message"]
    assert row["left_cordoned"] is False and row["diagnostics"]["deleted"] is True
    assert other not in rows_of(result)
    assert node_view(testbed, other) == untouched


def test_not_ready_during_the_apply_is_ridden_through(testbed, gpu_cluster, add_gpu_node, runner):
    """Driver on the host: the mode change stops kubelet (node NotReady while pending); the rollout carries on,
    verifies once the node is Ready and gives the cordon back."""
    node = add_gpu_node("rf-hostdrv", "H100-80GB-HBM3", 1, host_driver=True)
    wait_advertised(testbed, node)
    result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb"))
    assert result.rc == 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "reconfigured" and row["not_ready_during_apply"] is True, row
    assert "Shutting down all GPU clients on the host by stopping their systemd services" in gpu_cluster.mig_manager_log(node)
    systemd = gpu_cluster.host_systemd_log(node)
    assert systemd.index("StopUnit kubelet.service: inactive") < systemd.index("StartUnit kubelet.service: active")
    view = node_view(testbed, node)
    assert gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"} and view["unschedulable"] is False
    assert PRIOR_ANNOTATION not in view["annotations"]


def test_not_ready_after_the_apply_fails_verification_then_a_rerun_converges(
        testbed, gpu_cluster, add_gpu_node, gpu_agents, runner):
    """kubelet comes back but the node stays NotReady after MIG Manager's success: not verified (a NotReady node's
    allocatable is stale), left cordoned and reported, the next node not started; once Ready, a re-run finishes."""
    node, other = two_nodes(add_gpu_node, testbed, "rf-notready", ["kubelet-not-ready"], host_driver=True)
    untouched = node_view(testbed, other)
    variables = dict(rollout_vars(unique_name("lock"), mig_reconfigure_verify_timeout=10), profile="all-1g.10gb",
                     mig_reconfigure_nodes=[node])
    result = runner.playbook(PLAYBOOK, [node, other], dict(variables, mig_reconfigure_nodes=[node, other]))
    assert result.rc != 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["stage"] == "verify", row
    assert "node %s is NotReady (Ready=False" % node in row["message"] and row["left_cordoned"] is True
    assert any("is NotReady" in hint for hint in row["diagnostics"]["hints"])
    assert node_view(testbed, node)["labels"][STATE] == "success" and node_view(testbed, node)["unschedulable"]
    assert other not in rows_of(result) and node_view(testbed, other) == untouched

    gpu_agents.set_faults(node, [])  # kubelet gets Ready
    again = runner.playbook(PLAYBOOK, [node], variables)
    assert again.rc == 0, again.explain()
    assert rows_of(again)[node]["result"] == "reconfigured"
    view = node_view(testbed, node)
    assert gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"} and view["unschedulable"] is False


def test_admin_changing_the_label_mid_rollout_is_kept_and_reported(testbed, gpu_cluster, add_gpu_node, runner):
    node, other = two_nodes(add_gpu_node, testbed, "rf-admin", ["slow"])
    untouched = node_view(testbed, other)
    variables = dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb", mig_reconfigure_nodes=[node, other])
    proc = start(runner, [node, other], variables)
    try:
        testbed.wait_for(lambda: node_view(testbed, node)["labels"].get(STATE) == "pending", 120, "pending")
        testbed.core.patch_node(node, {"metadata": {"labels": {CONFIG: "all-balanced"}}})
    finally:
        result = finish(proc)
    assert result.rc != 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["changed_by_other"] == "all-balanced", row
    assert "someone else set nvidia.com/mig.config=all-balanced meanwhile; their change is kept" in row["message"]
    assert row["left_cordoned"] is True and "rollback" not in row
    view = node_view(testbed, node)
    assert view["labels"][CONFIG] == "all-balanced" and view["unschedulable"] is True
    assert other not in rows_of(result) and node_view(testbed, other) == untouched


def test_mig_manager_never_started_times_out_naming_the_missing_configmap(
        testbed, gpu_cluster, add_gpu_node, runner, testbed_namespace):
    """The custom MIG ConfigMap disappears after the plan and the node's MIG Manager pod restarts: it can never
    mount its config, so no state comes. The deadline says MIG Manager is not running there and why; the node stays
    cordoned and reported. With the ConfigMap back, a re-run converges."""
    custom = unique_name("custom-mig")
    text = ("version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"
            "  all-1g.10gb:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: 7}\n")
    core = testbed.core

    def create_configmap():
        core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=custom), data={"config.yaml": text}))
    create_configmap()
    gpu_cluster.patch_policy({"migManager": {"config": {"name": custom}}})
    try:
        node = add_gpu_node("rf-nocm", "H100-80GB-HBM3", 1)
        # Its MIG Manager pod mounts the custom ConfigMap (else the rollout waits, before the drain this test holds,
        # for the DaemonSet's rolling update to replace it).
        wait_mig_manager_pods_run(testbed, [node], mounts_config_map(custom), "ConfigMap %s mounted" % custom)
        wait_advertised(testbed, node)
        deploy(testbed, testbed_namespace, "gpu-held", node, resources={"nvidia.com/gpu": "1"})
        pod = wait_running(testbed, node, 1, testbed_namespace)[0]
        core.patch_namespaced_pod(pod.metadata.name, testbed_namespace, {"metadata": {"finalizers": [HOLD]}})
        variables = dict(rollout_vars(unique_name("lock"), mig_reconfigure_apply_timeout=10), profile="all-1g.10gb")
        proc = start(runner, [node], variables)
        try:
            # Held in the drain (the evicted pod cannot go): the ConfigMap goes and MIG Manager's pod restarts.
            testbed.wait_for(lambda: core.read_namespaced_pod(pod.metadata.name, testbed_namespace).metadata
                             .deletion_timestamp, 120, "the GPU pod evicted")
            core.delete_namespaced_config_map(custom, "gpu-operator")
            for old in core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-mig-manager",
                                                field_selector="spec.nodeName=%s" % node).items:
                core.delete_namespaced_pod(old.metadata.name, "gpu-operator")
            testbed.wait_for(lambda: "nvidia-mig-manager" in gpu_cluster.operand_pods(node), 60, "a new MIG Manager pod")
            time.sleep(2)
        finally:
            core.patch_namespaced_pod(pod.metadata.name, testbed_namespace, {"metadata": {"finalizers": None}})
            result = finish(proc)
        assert result.rc != 0, result.explain()
        row = rows_of(result)[node]
        assert row["result"] == "failed" and row["stage"] == "apply", row
        assert "no success within 10s (state unset): MIG Manager is not running on node %s" % node in row["message"]
        assert "ConfigMap gpu-operator/%s, which does not exist" % custom in row["message"]
        assert row["left_cordoned"] is True and node_view(testbed, node)["unschedulable"] is True
        assert STATE not in node_view(testbed, node)["labels"]

        create_configmap()  # kubelet's next mount try succeeds; MIG Manager starts and acts on the label
        again = runner.playbook(PLAYBOOK, [node], variables)
        assert again.rc == 0, again.explain()
        view = node_view(testbed, node)
        assert gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"} and view["unschedulable"] is False
    finally:
        gpu_cluster.patch_policy({"migManager": {"config": {"name": ""}}})
        try:
            core.delete_namespaced_config_map(custom, "gpu-operator")
        except client.rest.ApiException:
            pass
