"""The API server (or its etcd) restarted mid-rollout, on this directory's own cluster.

While the canary is ``pending`` (MIG Manager in its hardware step), kube-apiserver or etcd is stopped for 8 s and
started again (Cluster.component_stopped: down ~15 s in all; kube-controller-manager and kube-scheduler, which exit
when they cannot renew their leader Lease, are started again as the kubelet would). The rollout's watches re-list and resume, its other calls
retry (urllib3 Retry for reads, retry_write for writes), the Lease renewer keeps trying and renews as the same
holder: every node ends reconfigured and verified, the Lease is released, only GPU pods were evicted. All of it
under the least-privilege ServiceAccount of rbac/mig-reconfigure.yaml: a restarted kube-apiserver answers it 403
until its RBAC informers have synced (while /readyz answers 500), which the client retries while /readyz says so.

Down longer than the apply deadline: the rollout stops; the canary's row records that the API server was
unreachable, at which step (apply) and that the node is left cordoned; the next node is not started. A re-run
after the API server is back finishes both nodes (un-wedging the canary, whose simulated MIG Manager gave up
its step when its own call met the outage). A broken watch must not raise out of the rollout module: that
would fail the playbook, lose the rows and leave the canary cordoned with its step unknown."""

import datetime
import json
import time

import pytest

from tests.integration.reconfigure.conftest import (
    PLAYBOOK,
    PRIOR_ANNOTATION,
    PlaybookResult,
    deploy,
    node_view,
    running_pods,
    wait_running,
)
from tests.integration.reconfigure.test_rollout import (
    STATE,
    gpu_allocatable,
    rollout_vars,
    rows_of,
    wait_advertised,
)
from tests.testbed.cluster import COMPONENTS
from tests.testbed.pytest_cluster import unique_name


def workloads(testbed, namespace, nodes):
    for node in nodes:
        deploy(testbed, namespace, "gpu-" + node[-6:], node, resources={"nvidia.com/gpu": "1"})
        deploy(testbed, namespace, "cpu-" + node[-6:], node, resources={"cpu": "100m"})
    for node in nodes:
        wait_running(testbed, node, 2, namespace)
    return dict((node, running_pods(testbed, node, namespace)) for node in nodes)


def assert_only_gpu_pods_gone(testbed, namespace, before):
    for node, pods in before.items():
        gone = sorted(set(pods) - set(running_pods(testbed, node, namespace)))
        assert gone == sorted(k for k in pods if "/gpu-" in k), "node %s: pods gone %s" % (node, gone)


def wait_pending(testbed, node, agents, timeout=240):
    """Until ``node`` is pending and MIG Manager is in its hardware step (the "slow" fault holds the driver's first MIG
    change there 30 s): the outage then falls where MIG Manager makes no API call of its own."""
    testbed.wait_for(lambda: node_view(testbed, node)["labels"].get(STATE) == "pending", timeout,
                     "node %s to be pending" % node)
    testbed.wait_for(lambda: "Applying the MIG mode change from the selected config" in agents.mig_manager_log(node),
                     timeout, "MIG Manager of %s in its hardware step" % node)


def lease(testbed, name):
    proc = testbed.kubectl("get", "lease", "-n", "gpu-operator", name, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def lease_free(testbed, name):
    """The Lease is gone, or its holder's time (renewTime + leaseDurationSeconds) is over by the server's clock
    (the testbed's, on this machine)."""
    found = lease(testbed, name)
    if found is None:
        return True
    spec = found.get("spec") or {}
    stamp = spec.get("renewTime") or spec["acquireTime"]
    renewed = datetime.datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    expires = renewed + datetime.timedelta(seconds=int(spec["leaseDurationSeconds"]) + 1)  # renewTime's fraction cut
    return datetime.datetime.now(datetime.timezone.utc) >= expires


def two_nodes(testbed, add_gpu_node):
    canary = add_gpu_node("cp-a", "H100-80GB-HBM3", 1, faults=["slow"])  # a few seconds in pending
    other = add_gpu_node("cp-b", "H100-80GB-HBM3", 1)
    for name in (canary, other):
        wait_advertised(testbed, name)
    return canary, other


def assert_reconfigured(testbed, rows, names):
    for name in names:
        view = node_view(testbed, name)
        assert rows[name]["result"] == "reconfigured", rows[name]
        assert view["labels"][STATE] == "success" and gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}
        assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"]


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_restart_mid_rollout_continues_and_ends_verified(testbed, gpu_cluster, add_gpu_node, runner,
                                                         testbed_namespace, component):
    canary, other = two_nodes(testbed, add_gpu_node)
    before = workloads(testbed, testbed_namespace, [canary, other])
    lock = unique_name("lock")
    variables = dict(rollout_vars(lock, mig_reconfigure_lock_duration=30, mig_reconfigure_apply_timeout=300),
                     profile="all-1g.10gb",
                     mig_reconfigure_nodes=[canary, other])
    proc = runner.playbook(PLAYBOOK, [canary, other], variables, popen=True)
    try:
        wait_pending(testbed, canary, gpu_cluster)
        with testbed.cluster.component_stopped(component) as outage:
            time.sleep(8)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = PlaybookResult(proc.returncode, stdout, stderr)
    assert result.rc == 0, "components restarted after the outage: %s\n%s" % (outage["revived"], result.explain())
    rows = rows_of(result)
    assert sorted(rows) == sorted([canary, other])  # no row lost
    assert_reconfigured(testbed, rows, [canary, other])
    assert_only_gpu_pods_gone(testbed, testbed_namespace, before)
    assert lease(testbed, lock) is None  # kept through the outage and released at the end
    assert "lock_error" not in json.dumps(result.data), result.explain()


def test_down_past_the_deadline_stops_with_every_node_recorded_then_a_rerun_finishes(
        testbed, gpu_cluster, add_gpu_node, runner, testbed_namespace):
    canary, other = two_nodes(testbed, add_gpu_node)
    workloads(testbed, testbed_namespace, [canary, other])
    lock = unique_name("lock")
    variables = dict(rollout_vars(lock, mig_reconfigure_apply_timeout=20), profile="all-1g.10gb",
                     mig_reconfigure_nodes=[canary, other])
    runner_env = runner.env

    def short_retries():
        env = runner_env()
        env["GPUFLEET_API_RETRY_SECONDS"] = "5"
        return env

    runner.env = short_retries
    proc = runner.playbook(PLAYBOOK, [canary, other], variables, popen=True)
    try:
        wait_pending(testbed, canary, gpu_cluster)
        launched = dict((c, testbed.cluster.launch_info(c)) for c in COMPONENTS if c != "kube-apiserver")
        stopped = testbed.cluster.stop_component("kube-apiserver")
        try:
            stdout, stderr = proc.communicate(timeout=240)  # the run ends while the API server is still down
        finally:
            testbed.cluster.start_component(stopped)
            testbed.cluster.settle(launched)
    finally:
        if proc.poll() is None:
            proc.kill()
    failed = PlaybookResult(proc.returncode, stdout, stderr)
    assert failed.rc != 0, failed.explain()
    rows = rows_of(failed)
    assert canary in rows, failed.explain()  # the other node's batch never started: the canary halted the play
    row = rows[canary]
    assert row["result"] == "failed" and row["stage"] == "api" and row["api_stage"] == "apply", row
    assert "unreachable" in row["message"] and row["left_cordoned"] is True, row
    # What the row says is what the cluster holds: the canary cordoned by us, at the target; the other untouched.
    view = node_view(testbed, canary)
    assert view["unschedulable"] is True and view["annotations"].get(PRIOR_ANNOTATION) == "false"
    assert node_view(testbed, other)["unschedulable"] is False

    # The failed run could not release its Lease while the API server was down: the re-run takes it once expired.
    testbed.wait_for(lambda: lease_free(testbed, lock), 60, "the failed run's Lease %s to expire" % lock)
    runner.env = runner_env
    # The simulated MIG Manager gave up its step when its own call met the outage (as mig-parted's script exits):
    # the re-run un-wedges a node still pending at its apply deadline, the documented recovery.
    variables.update(mig_reconfigure_unwedge_on_timeout=True, mig_reconfigure_apply_timeout=45)
    resumed = runner.playbook(PLAYBOOK, [canary, other], variables)
    assert resumed.rc == 0, resumed.explain()
    assert_reconfigured(testbed, rows_of(resumed), [canary, other])


def test_component_stop_and_start_restore_the_cluster(testbed):
    """The testbed's own fault: after stop/start both components are healthy and the API answers."""
    launched = dict((c, testbed.cluster.launch_info(c)) for c in COMPONENTS)
    for component in ("kube-apiserver", "etcd"):
        stopped = testbed.cluster.stop_component(component)
        assert not testbed.cluster.component_health(component)[0]
        testbed.cluster.start_component(stopped)
        # The others recover (the API server's etcd check, controllers that exited are started again).
        testbed.cluster.settle(dict((c, launched[c]) for c in launched if c != component), seconds=5)
        testbed.wait_for(lambda: all(v["healthy"] for v in testbed.cluster.status().values()), 60,
                         "every component healthy after restarting %s" % component)
    assert testbed.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
