"""mig-reconfigure.yml end to end on simulated GPU nodes (agents play MIG Manager, GFD and the device plugin),
run by ansible-playbook under the least-privilege ServiceAccount. Every test also checks that nothing was
lost: only planned (GPU) pods were evicted, and every cordon we set was restored or reported."""

import datetime
import json
import os
import signal
import time

import pytest

from tests.integration.reconfigure.conftest import (
    PLAYBOOK,
    PRIOR_ANNOTATION,
    deploy,
    node_view,
    running_pods,
    wait_running,
)
from tests.testbed.pytest_cluster import unique_name

CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
# all-balanced per model (reference nvidia-gpu-operator-and-mig.md §4.2/§4.3): per GPU 2x1g + 1x2g + 1x3g.
BALANCED = {
    "A100-SXM4-40GB": ("1g.5gb", "2g.10gb", "3g.20gb"),
    "H100-80GB-HBM3": ("1g.10gb", "2g.20gb", "3g.40gb"),
    "H200": ("1g.18gb", "2g.35gb", "3g.71gb"),
}


def balanced_allocatable(model, gpus):
    one, two, three = BALANCED[model]
    return {"nvidia.com/mig-" + one: str(2 * gpus), "nvidia.com/mig-" + two: str(gpus),
            "nvidia.com/mig-" + three: str(gpus)}


def gpu_allocatable(view):
    return dict((k, v) for k, v in view["allocatable"].items()
                if k.startswith(("nvidia.com/gpu", "nvidia.com/mig-")) and v != "0")


def wait_advertised(testbed, node):
    """Until the node has settled: GPUs advertised, and NVIDIA's controller has set its default MIG config label
    and MIG Manager has reported on it (both arrive a moment after the node; a test that snapshots the node
    before then sees them change under it)."""
    def settled():
        view = node_view(testbed, node)
        return gpu_allocatable(view) and view["labels"].get(CONFIG) and view["labels"].get(STATE) == "success"
    testbed.wait_for(settled, 90, "GPUs advertised and the MIG config settled on %s" % node)


def rollout_vars(lock, **extra):
    """Fast timeouts, and the stranding override: these tests' whole-GPU workloads are pinned to their node and
    most target layouts advertise no whole GPU, so the default would refuse them (test_strand.py covers that;
    test_custom_config_under_single_strategy runs with the default, its pods fitting). Those pinned pods often
    cannot come back either, so each step follows them for 5 s, not the role's 60."""
    base = {"mig_reconfigure_lock_name": lock, "mig_reconfigure_lock_duration": 10,
            "mig_reconfigure_eviction_retry_delay": 1, "mig_reconfigure_drain_timeout": 60,
            "mig_reconfigure_apply_timeout": 90, "mig_reconfigure_verify_timeout": 60,
            "mig_reconfigure_allow_unschedulable": True, "mig_reconfigure_follow_timeout": 5}
    base.update(extra)
    return base


def kill_tree(pid):
    """SIGKILL a process and every descendant (Ansible's workers call setsid, so a process group is not enough)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    for victim in tree:
        try:
            os.kill(victim, signal.SIGKILL)
        except OSError:
            pass


def rows_of(result):
    rows = []
    for task in result.tasks():
        if task["task"]["name"].split(" : ", 1)[-1].startswith("Record step"):
            for host in (task.get("hosts") or {}).values():
                facts = host.get("ansible_facts") or {}
                if "mig_reconfigure_rows" in facts:
                    rows = facts["mig_reconfigure_rows"]
    return dict((r["node"], r) for r in rows)


def summary_lines(result):
    return result.task("Show the fleet summary")["msg"]


@pytest.fixture
def gpu_workloads(testbed, testbed_namespace):
    """Deploy one GPU and one CPU workload per node; returns a function giving {node: running pods}
    (pods of the test's namespace only: operand pods come and go with MIG Manager's pause protocol)."""
    def make(nodes):
        for node in nodes:
            deploy(testbed, testbed_namespace, "gpu-" + node[-6:], node, resources={"nvidia.com/gpu": "1"})
            deploy(testbed, testbed_namespace, "cpu-" + node[-6:], node, resources={"cpu": "100m"})
        for node in nodes:
            wait_running(testbed, node, 2, testbed_namespace)
        return dict((node, running_pods(testbed, node, testbed_namespace)) for node in nodes)
    return make


def workload_pods(testbed, node, before):
    """Pods now on ``node`` in the namespace of ``before``'s pods."""
    namespace = list(before)[0].split("/")[0]
    return running_pods(testbed, node, namespace)


def gpu_pods(pods):
    return sorted(k for k in pods if "/gpu-" in k)


def assert_only_gpu_pods_gone(testbed, before, reported=None):
    for node, pods in before.items():
        after = workload_pods(testbed, node, pods)
        gone = sorted(set(pods) - set(after))
        assert gone == [k for k in gpu_pods(pods) if "/gpu-" in k and k in gone] and gone == gpu_pods(pods), (
            "node %s: pods gone %s, planned GPU pods %s" % (node, gone, gpu_pods(pods)))
        if reported is not None:
            assert sorted(reported[node]) == gone, "node %s: evicted %s reported, %s gone" % (node, reported[node], gone)


def free_whole_gpus_outside(testbed, names):
    """Per schedulable node other than ``names``: nvidia.com/gpu allocatable less what its pods hold, at
    least 0 (a node cannot lend another its room); summed."""
    room = {}
    for node in testbed.core.list_node().items:
        if node.metadata.name not in names and not node.spec.unschedulable:
            room[node.metadata.name] = int((node.status.allocatable or {}).get("nvidia.com/gpu", 0))
    for pod in testbed.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name in room and pod.status.phase not in ("Succeeded", "Failed"):
            room[pod.spec.node_name] -= sum(int(((c.resources and c.resources.limits) or {}).get("nvidia.com/gpu", 0))
                                            for c in pod.spec.containers)
    return sum(max(0, free) for free in room.values())


def test_mixed_models_all_balanced_resolves_per_model(testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    nodes = {add_gpu_node("rc-a100", "A100-SXM4-40GB", 2): "A100-SXM4-40GB",
             add_gpu_node("rc-h100", "H100-80GB-HBM3", 2): "H100-80GB-HBM3",
             add_gpu_node("rc-h200", "H200", 1): "H200"}
    names = sorted(nodes)
    for name in names:
        wait_advertised(testbed, name)
    before = gpu_workloads(names)

    room_before = free_whole_gpus_outside(testbed, names)
    plan = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-balanced"),
                           check=True)
    assert plan.rc == 0, plan.explain()
    planned = dict((p["node"], p) for p in plan.task("Plan every node")["plan"])
    for name, model in nodes.items():
        assert planned[name]["pods_to_evict"] == gpu_pods(before[name])
        assert planned[name]["expected_resources"] == dict(
            (k, int(v)) for k, v in balanced_allocatable(model, 2 if model != "H200" else 1).items())
    assert not plan.ran("Reconfigure step"), "check mode went past the plan"
    # --check counts every node the plan would change as changed in the recap, under its own name.
    assert all(plan.data["stats"][name]["changed"] >= 1 for name in names), plan.data["stats"]
    # The three whole-GPU workloads lose their GPUs (MIG devices are advertised as nvidia.com/mig-*): the plan
    # warns unless whole GPUs are free elsewhere in this shared cluster, counted here independently.
    # Counted before and after the plan: other tests' nodes in this cluster may still be settling.
    rooms = sorted({room_before, free_whole_gpus_outside(testbed, names)})
    warnings = [w for w in plan.task("Plan every node")["capacity_warnings"] if " nvidia.com/gpu " in w]
    if rooms[-1] < 3:
        assert len(warnings) == 1 and "ask for 3 nvidia.com/gpu" in warnings[0], warnings
        assert any("room for %d:" % room in warnings[0] for room in rooms), (rooms, warnings)
        assert any("WARNING: pods to evict" in line for line in plan.task("Show the plan")["msg"])
    elif rooms[0] >= 3:
        assert warnings == [], (rooms, warnings)
    for name in names:
        assert node_view(testbed, name)["labels"].get(CONFIG) != "all-balanced"

    lock = unique_name("lock")
    result = runner.playbook(PLAYBOOK, names, dict(rollout_vars(lock, mig_reconfigure_max_unavailable="50%"),
                                                   profile="all-balanced"))
    assert result.rc == 0, result.explain()
    # The plan cut the canary and the batches (50% of 3 nodes rounds up to 2); mig_rollout_lock took the Lease
    # before the canary and gave it back at the end.
    planned = result.task("Plan every node")
    assert planned["batches"] == [names[:1], names[1:]] and planned["window"] == 2, planned["batches"]
    assert result.task("Take the rollout lock")["lease"]["holder"].startswith("mig-reconfigure-")
    assert result.task("Release the rollout lock")["outcome"] == "released"
    assert testbed.kubectl("get", "lease", "-n", "gpu-operator", lock, check=False).returncode != 0
    rows = rows_of(result)
    for name, model in nodes.items():
        view = node_view(testbed, name)
        assert view["labels"][CONFIG] == "all-balanced" and view["labels"][STATE] == "success"
        assert gpu_allocatable(view) == balanced_allocatable(model, 2 if model != "H200" else 1)
        assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"]
        assert rows[name]["result"] == "reconfigured" and rows[name]["uncordon"] == "uncordoned"
    assert_only_gpu_pods_gone(testbed, before, dict((n, rows[n]["evicted"]) for n in names))
    assert all(result.data["stats"][name]["changed"] >= 1 for name in names), result.data["stats"]
    lines = summary_lines(result)
    assert lines[0].split() == ["node", "model", "before", "after", "evicted", "back", "duration", "result"]
    assert all(any(line.startswith(n) and "reconfigured" in line for line in lines) for n in names)

    # Resumable/idempotent: a re-run finds every node at the target and touches nothing.
    again = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-balanced"))
    assert again.rc == 0, again.explain()
    assert all(p["at_target"] for p in again.task("Plan every node")["plan"])
    assert not again.ran("Reconfigure step")


def test_hardware_is_planned_against_and_checked_before_uncordon(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    """Hosts that answer gpu_info (here: the simulated NVML of each node) are planned from their own GPUs and
    go in batches held cordoned until the hardware read after the change matches the target. Node b's host
    reads a GPU that MIG Manager never touched (a spare node's state), as when NVML and the agents disagree."""
    from tests.testbed.agents.pytest_agents import nvml_lib_dir

    names = sorted([add_gpu_node("rc-hw-a", "H100-80GB-HBM3", 1), add_gpu_node("rc-hw-b", "H100-80GB-HBM3", 1),
                    add_gpu_node("rc-hw-c", "H100-80GB-HBM3", 1)])
    spare = add_gpu_node("rc-hw-spare", "H100-80GB-HBM3", 1)
    canary, odd, last = names
    for name in names:
        wait_advertised(testbed, name)
    before = gpu_workloads(names)
    lib = str(nvml_lib_dir())
    host_vars = dict((n, {"mig_reconfigure_host_environment": {
        "LD_LIBRARY_PATH": lib, "GPUFLEET_SIM_NVML_STATE": str(gpu_cluster.state_path(spare if n == odd else n))}})
        for n in names)

    # Two hosts reading the same GPUs (as a local connection reads the controller's): refused before any change.
    same = dict((n, {"mig_reconfigure_host_environment": {"LD_LIBRARY_PATH": lib, "GPUFLEET_SIM_NVML_STATE": str(
        gpu_cluster.state_path(spare))}}) for n in names)
    refused = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb"),
                              host_vars=same)
    assert refused.rc != 0 and "same GPU UUID" in refused.task("Refuse hardware facts")["msg"], refused.explain()
    assert not refused.ran("Plan every node") and not refused.ran("Reconfigure step")
    assert all(node_view(testbed, n)["labels"].get(CONFIG) != "all-1g.10gb" for n in names)

    result = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock"), mig_reconfigure_max_unavailable=2),
                                                   profile="all-1g.10gb"), host_vars=host_vars)
    assert result.rc != 0, result.explain()
    read = [t for t in result.tasks() if result._name(t).startswith("Read each GPU host's GPUs")][0]["hosts"]
    assert all(read[n].get("gpus") for n in names), "gpu_info did not answer on every host: %r" % read
    assert all(p["hardware_source"] == "nvml" for p in result.task("Plan every node")["plan"])
    assert result.ran("Read the GPUs on the hosts after the change, step 0") and result.ran(
        "Read the GPUs on the hosts after the change, step 1")
    rows = rows_of(result)
    assert rows[canary]["result"] == "reconfigured" and rows[canary]["hardware_verified"] is True
    assert "hardware verified" in rows[canary]["message"]
    assert rows[last]["result"] == "reconfigured" and rows[last]["hardware_verified"] is True
    assert rows[odd]["result"] == "failed" and rows[odd]["stage"] == "verify"
    assert "the hardware does not" in rows[odd]["message"] and "GPU 0" in rows[odd]["message"]
    assert rows[odd]["left_cordoned"] is True and node_view(testbed, odd)["unschedulable"] is True
    for name in (canary, last):
        assert node_view(testbed, name)["unschedulable"] is False
    assert "halted" in result.task("Fail when the rollout halted")["msg"]
    assert_only_gpu_pods_gone(testbed, before, dict((n, rows[n]["evicted"]) for n in names))
    runner.module("gpu_drain", {"name": odd, "state": "uncordoned"})


def wait_mig_manager_pods_run(testbed, names, applied, what, timeout=120):
    """Until NVIDIA's controller has made a ClusterPolicy change in the mig-manager DaemonSet (``applied``: a test on
    its pod template) and the mig-manager pod of every node in ``names`` runs that template. MIG Manager takes its
    settings when it starts (env such as WITH_REBOOT, a config file mounted from the ConfigMap), so until the
    DaemonSet's rolling update (one node at a time) has replaced a node's pod, that node's MIG Manager acts on the old
    ones. The wait a user makes with `kubectl rollout status daemonset/nvidia-mig-manager`."""
    from kubernetes import client

    apps = client.AppsV1Api(testbed.api_client())

    def rolled_out():
        ds = apps.read_namespaced_daemon_set("nvidia-mig-manager", "gpu-operator")
        if not applied(ds.spec.template):
            return False
        pods = testbed.core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-mig-manager").items
        current = {p.spec.node_name for p in pods if not p.metadata.deletion_timestamp and p.status.phase == "Running"
                   and (p.metadata.labels or {}).get("pod-template-generation") == str(ds.metadata.generation)}
        return set(names) <= current
    testbed.wait_for(rolled_out, timeout, "mig-manager pods on %s with %s" % (", ".join(names), what))


def wait_daemonset_template(testbed, applied, what, timeout=120):
    """Until NVIDIA's controller has made a ClusterPolicy change in the mig-manager DaemonSet's pod template; its
    pods are then still being replaced, one node at a time."""
    from kubernetes import client

    apps = client.AppsV1Api(testbed.api_client())
    testbed.wait_for(lambda: applied(apps.read_namespaced_daemon_set("nvidia-mig-manager", "gpu-operator").spec.template),
                     timeout, "the mig-manager DaemonSet with %s" % what)


def mounts_config_map(name):
    return lambda template: name in [v.config_map.name for v in template.spec.volumes or [] if v.config_map]


def has_env(name, value):
    return lambda template: any(e.name == name and e.value == value for c in template.spec.containers for e in c.env or [])


def test_custom_config_under_single_strategy(testbed, testbed_namespace, gpu_cluster, add_gpu_node, runner,
                                             gpu_workloads):
    """A name only the ClusterPolicy's custom ConfigMap knows, under mig.strategy=single: the plan reads that
    ConfigMap, single advertises the MIG devices as nvidia.com/gpu, and the whole-GPU workloads come back."""
    from kubernetes import client

    custom = ("version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"
              "  fleet-halves:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {3g.40gb: 2}\n")
    cm_name = unique_name("rc-custom")
    testbed.core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=cm_name), data={"config.yaml": custom}))
    strategy = gpu_cluster.policy()["spec"]["mig"]["strategy"]
    names = sorted([add_gpu_node("rc-single-a", "H100-80GB-HBM3", 1), add_gpu_node("rc-single-b", "H100-80GB-HBM3", 1)])
    try:
        for name in names:
            wait_advertised(testbed, name)
        gpu_cluster.patch_policy({"mig": {"strategy": "single"}, "migManager": {"config": {"name": cm_name}}})
        wait_mig_manager_pods_run(testbed, names, mounts_config_map(cm_name), "ConfigMap %s mounted" % cm_name)
        before = gpu_workloads(names)
        extra = dict(rollout_vars(unique_name("lock"), mig_reconfigure_max_unavailable=2,
                                  mig_reconfigure_allow_unschedulable=False), profile="fleet-halves")
        plan = runner.playbook(PLAYBOOK, names, extra, check=True)
        assert plan.rc == 0, plan.explain()
        for entry in plan.task("Plan every node")["plan"]:
            assert cm_name in entry["config_source"] and entry["strategy"] == "single"
            assert entry["expected_resources"] == {"nvidia.com/gpu": 2}
        assert plan.task("Plan every node")["capacity_warnings"] == []

        result = runner.playbook(PLAYBOOK, names, extra)
        assert result.rc == 0, result.explain()
        rows = rows_of(result)
        for name in names:
            view = node_view(testbed, name)
            assert rows[name]["result"] == "reconfigured" and view["labels"][CONFIG] == "fleet-halves"
            assert gpu_allocatable(view) == {"nvidia.com/gpu": "2"}
            assert view["labels"]["nvidia.com/mig.strategy"] == "single" and view["unschedulable"] is False
            wait_running(testbed, name, 2, testbed_namespace)  # the whole-GPU pod fits a MIG slice under single
        assert_only_gpu_pods_gone(testbed, before, dict((n, rows[n]["evicted"]) for n in names))
    finally:
        gpu_cluster.patch_policy({"mig": {"strategy": strategy}, "migManager": {"config": {"name": ""}}})
        testbed.core.delete_namespaced_config_map(cm_name, "gpu-operator")


def test_unknown_and_invalid_profiles_are_rejected_before_any_change(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    names = sorted([add_gpu_node("rc-bad-a", "H100-80GB-HBM3", 2), add_gpu_node("rc-bad-b", "A100-SXM4-40GB", 1)])
    for name in names:
        wait_advertised(testbed, name)
    before = gpu_workloads(names)
    views = dict((n, node_view(testbed, n)) for n in names)

    unknown = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-1g.99gb"))
    assert unknown.rc != 0
    assert "all-1g.99gb" in unknown.task("Stop before any change")["msg"]
    # A profile of another model: names the node and the model's own profiles.
    wrong = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-1g.5gb"))
    assert wrong.rc != 0
    assert "1g.5gb is not a profile of" in wrong.task("Stop before any change")["msg"]
    # all-balanced cannot be advertised under mig-strategy=single (one profile per node, reference §6.2).
    single = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock"), mig_reconfigure_strategy="single"),
                                                   profile="all-balanced"))
    assert single.rc != 0
    assert "mig-strategy=single needs one MIG profile per node" in single.task("Stop before any change")["msg"]
    for result in (unknown, wrong, single):
        assert not result.ran("Reconfigure step")
    for name in names:
        assert node_view(testbed, name) == views[name], "node %s changed" % name
        assert workload_pods(testbed, name, before[name]) == before[name]


def test_gpu_held_fails_the_canary_and_halts_with_diagnostics(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    names = sorted([add_gpu_node("rc-held-a", "H100-80GB-HBM3", 1, faults=["gpu-held"]),
                    add_gpu_node("rc-held-b", "H100-80GB-HBM3", 1), add_gpu_node("rc-held-c", "H100-80GB-HBM3", 1)])
    canary = [n for n in names if "held-a" in n][0]
    others = [n for n in names if n != canary]
    order = [canary] + others
    for name in names:
        wait_advertised(testbed, name)
    before = gpu_workloads(names)
    views = dict((n, node_view(testbed, n)) for n in others)

    result = runner.playbook(PLAYBOOK, order, dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb",
                                                   mig_reconfigure_nodes=order))
    assert result.rc != 0, result.explain()
    rows = rows_of(result)
    assert rows[canary]["result"] == "failed" and rows[canary]["stage"] == "apply"
    assert "MIG Manager reported failed" in rows[canary]["message"]
    diagnostics = rows[canary]["diagnostics"]
    assert diagnostics["state"] == "failed" and diagnostics["unschedulable"] is True
    assert diagnostics["hints"]
    # The MIG Manager pod's own log, read through the API (pods/log, served by kwok from the agent's log file).
    logs = "\n".join(diagnostics["mig_manager_logs"].values())
    assert "In use by another client" in logs, diagnostics["mig_manager_logs"]
    assert node_view(testbed, canary)["unschedulable"] is True, "the failed node must stay cordoned"
    assert rows[canary]["left_cordoned"] is True
    assert "halted" in result.task("Fail when the rollout halted")["msg"]
    assert any(canary in line and "failed" in line for line in summary_lines(result))
    for name in others:
        assert name not in rows, "a node after the failed canary was started"
        assert node_view(testbed, name) == views[name]
        assert workload_pods(testbed, name, before[name]) == before[name]
    gone = sorted(set(before[canary]) - set(workload_pods(testbed, canary, before[canary])))
    assert gone == sorted(rows[canary]["evicted"]) == gpu_pods(before[canary])
    runner.module("gpu_drain", {"name": canary, "state": "uncordoned"})


def test_rollback_on_failure_restores_and_verifies_the_previous_config(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    """A transient MIG Manager failure with mig_reconfigure_rollback_on_failure: the node goes back to its
    previous config, verified against that config's plan, and stays cordoned for inspection."""
    node = add_gpu_node("rc-rollback", "H100-80GB-HBM3", 1, faults=["fail-once"])
    wait_advertised(testbed, node)
    previous = node_view(testbed, node)["labels"][CONFIG]
    advertised = gpu_allocatable(node_view(testbed, node))
    before = gpu_workloads([node])
    result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb",
                                                    mig_reconfigure_rollback_on_failure=True))
    assert result.rc != 0
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["stage"] == "apply" and "MIG Manager reported failed" in row["message"]
    assert row["rollback"]["config"] == previous != "all-1g.10gb"
    assert row["message"].endswith("rollback: back at %s, verified" % previous), row["message"]
    assert (row["rollback"]["result"], row["rollback"]["verified"], row["rollback"]["mismatches"]) == (
        "success", True, []), row["rollback"]
    view = node_view(testbed, node)
    assert view["labels"][CONFIG] == previous and view["labels"][STATE] == "success"
    assert gpu_allocatable(view) == advertised == {"nvidia.com/gpu": "1"}
    assert view["unschedulable"] is True and row["left_cordoned"] is True
    # The simulated driver refused the GPU instances once (fault fail-once): MIG Manager's log names NVML's error.
    assert "ERROR_UNKNOWN" in "\n".join(row["diagnostics"]["mig_manager_logs"].values())
    assert_only_gpu_pods_gone(testbed, before, {node: row["evicted"]})
    runner.module("gpu_drain", {"name": node, "state": "uncordoned"})
    assert node_view(testbed, node)["unschedulable"] is False


def test_wedged_pending_times_out_with_diagnostics_then_unwedges(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_agents):
    node = add_gpu_node("rc-wedge", "H200", 1, faults=["wedge-pending"])
    wait_advertised(testbed, node)
    result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock"), mig_reconfigure_apply_timeout=8),
                                                    profile="all-1g.18gb"))
    assert result.rc != 0
    row = rows_of(result)[node]
    assert row["result"] == "failed" and "no success within 8s (state pending)" in row["message"]
    paused = row["diagnostics"]["paused_deploy_labels"]
    assert "nvidia.com/gpu.deploy.device-plugin" in paused
    assert any("un-wedge" in hint for hint in row["diagnostics"]["hints"])
    assert node_view(testbed, node)["unschedulable"] is True

    gpu_agents.set_faults(node, [])  # the cause is gone (e.g. the stuck client was stopped)
    wedged = node_view(testbed, node)["labels"]
    unknown = runner.module("node_mig_config", {"name": node, "action": "unwedge", "config": "all-1g.99gb"})
    assert unknown.get("failed") and not unknown["changed"], unknown
    assert node in unknown["msg"] and "1g.99gb is not a profile" in unknown["msg"]
    assert node_view(testbed, node)["labels"] == wedged  # refused before any change
    unwedged = runner.module("node_mig_config", {"name": node, "action": "unwedge", "timeout": 60})
    assert not unwedged.get("failed"), unwedged
    assert sorted(unwedged["unwedged"]["restored_labels"]) == sorted(paused)
    assert unwedged["final_state"] == "success" and unwedged["mismatches"] == []
    view = node_view(testbed, node)
    assert not [k for k, v in view["labels"].items() if v == "paused-for-mig-change"]
    # success alone comes before the device plugin re-advertises: unwedge returns once it has
    assert gpu_allocatable(view) == {"nvidia.com/mig-1g.18gb": "7"}
    # Re-running the playbook finishes the half-done node: verifies and gives the cordon back.
    again = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile="all-1g.18gb"))
    assert again.rc == 0, again.explain()
    assert rows_of(again)[node]["result"] == "reconfigured"
    assert node_view(testbed, node)["unschedulable"] is False

    # Roll back to the config recorded before the change: check mode changes nothing, then it verifies.
    previous = node_view(testbed, node)["annotations"]["gpufleet.io/mig-previous-config"]
    assert previous and previous != "all-1g.18gb"
    dry = runner.module("node_mig_config", {"name": node, "action": "rollback"}, check=True)
    assert dry["changed"] and dry["diff"]["after"] == {CONFIG: previous} and dry["plan"]["errors"] == []
    assert node_view(testbed, node)["labels"][CONFIG] == "all-1g.18gb"
    rolled = runner.module("node_mig_config", {"name": node, "action": "rollback", "timeout": 60})
    assert not rolled.get("failed") and rolled["final_state"] == "success", rolled
    view = node_view(testbed, node)
    assert view["labels"][CONFIG] == previous
    expected = dict((k, str(v)) for k, v in rolled["plan"]["expected_resources"].items())
    assert expected and gpu_allocatable(view) == expected and rolled["mismatches"] == []


def test_unwedge_on_timeout_finishes_a_transiently_wedged_node(
        testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    """mig_reconfigure_unwedge_on_timeout: a node wedged in pending past the deadline is un-wedged once (deploy
    labels restored, MIG Manager restarted) and, the wedge having been transient, ends verified and uncordoned. The
    deadline covers the restarted MIG Manager's whole run: its new pod, its start, the pause of the operands and the
    change (NVIDIA's process took 7 to 10 s of it on a loaded 2-core machine)."""
    node = add_gpu_node("rc-autounwedge", "H200", 1, faults=["wedge-once"])
    wait_advertised(testbed, node)
    before = gpu_workloads([node])
    result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock"), mig_reconfigure_apply_timeout=20,
                                                                 mig_reconfigure_unwedge_on_timeout=True),
                                                    profile="all-1g.18gb"))
    assert result.rc == 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "reconfigured", row
    assert "nvidia.com/gpu.deploy.device-plugin" in row["unwedged"]["restored_labels"]
    assert len(row["unwedged"]["restarted_pods"]) == 1 and row["states"].count("success") == 1
    view = node_view(testbed, node)
    assert gpu_allocatable(view) == {"nvidia.com/mig-1g.18gb": "7"} and view["unschedulable"] is False
    assert not [k for k, v in view["labels"].items() if v == "paused-for-mig-change"]
    assert_only_gpu_pods_gone(testbed, before, {node: row["evicted"]})


def test_with_reboot_path(testbed, gpu_cluster, add_gpu_node, runner, gpu_workloads):
    node = add_gpu_node("rc-reboot", "A100-SXM4-40GB", 1, faults=["reset-unsupported"])
    wait_advertised(testbed, node)
    before = gpu_workloads([node])
    env = (gpu_cluster.policy()["spec"].get("migManager") or {}).get("env") or []
    gpu_cluster.patch_policy({"migManager": {"env": env + [{"name": "WITH_REBOOT", "value": "true"}]}})
    try:
        # Right after the change, as a user who does not wait for `kubectl rollout status`: the DaemonSet has the new
        # template, the node's pod may still be the old one (without WITH_REBOOT, whose apply fails on this node);
        # the rollout waits for the node's new pod before it drains the node.
        wait_daemonset_template(testbed, has_env("WITH_REBOOT", "true"), "WITH_REBOOT=true")
        plan = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile="all-3g.20gb"),
                               check=True)
        assert plan.task("Plan every node")["plan"][0]["reset_or_reboot"] == "reboot"
        result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(unique_name("lock")), profile="all-3g.20gb"))
        assert result.rc == 0, result.explain()
        row = rows_of(result)[node]
        assert row["rebooted"] is True and row["states"][-1] == "success", (row, gpu_cluster.mig_manager_log(node))
        assert any(e.reason == "Rebooted" for e in testbed.core.list_namespaced_event(
            "default", field_selector="involvedObject.name=%s" % node).items), row
        view = node_view(testbed, node)
        assert gpu_allocatable(view) == {"nvidia.com/mig-3g.20gb": "2"}
        assert view["unschedulable"] is False
        assert_only_gpu_pods_gone(testbed, before, {node: row["evicted"]})
    finally:
        gpu_cluster.patch_policy({"migManager": {"env": env or None}})


def test_concurrent_rollout_is_refused(testbed, gpu_cluster, add_gpu_node, runner):
    node = add_gpu_node("rc-lock", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    lock = unique_name("lock")
    held = runner.module("mig_rollout_lock", {"name": lock, "holder": "other-rollout", "duration": 300,
                                              "description": "all-1g.10gb elsewhere"})
    assert not held.get("failed"), held
    view = node_view(testbed, node)
    try:
        result = runner.playbook(PLAYBOOK, [node], dict(rollout_vars(lock), profile="all-1g.10gb"))
        assert result.rc != 0
        # The Lease is taken before any node starts; refused, nothing is touched and it says who holds it.
        msg = result.task("Take the rollout lock")["msg"]
        assert "another MIG rollout holds lock" in msg and "other-rollout" in msg
        assert not result.ran("Reconfigure step")
        assert not result.ran("Fail when the rollout halted")
        assert node_view(testbed, node) == view
        # The refused run did not release the other rollout's Lease.
        lease = json.loads(testbed.kubectl("get", "lease", "-n", "gpu-operator", lock, "-o", "json").stdout)
        assert lease["spec"]["holderIdentity"] == "other-rollout"
    finally:
        runner.module("mig_rollout_lock", {"name": lock, "holder": "other-rollout", "state": "absent"})


# Where the controller dies, and how each point is reached deterministically: a GPU pod that cannot
# go holds the drain; MIG Manager slow to act holds "label set, nothing started"; slow apply holds pending; a device
# plugin that does not re-advertise holds verification; a held hardware read (hold_cordon) holds "verified, still
# cordoned" before the uncordon.
KILL_POINTS = {
    "drain": {"faults": []},
    "after-label": {"faults": ["slow-start"]},
    "pending": {"faults": ["slow"]},
    "verify": {"faults": ["stale-plugin"]},
    "before-uncordon": {"faults": []},
}
HOLD_FINALIZER = "gpufleet.test/hold"


def interpreter_that_holds(workdir):
    """A python for the GPU host that blocks its second module run (the hardware read after the change) while
    ``hold`` exists, touching ``reached`` first; the first run (the plan's read) goes through."""
    import sys

    workdir.mkdir(parents=True, exist_ok=True)
    wrapper, hold, reached, count = (workdir / n for n in ("python", "hold", "reached", "count"))
    wrapper.write_text("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s\n"
                       "if [ $n -ge 2 ] && [ -e %s ]; then touch %s; while [ -e %s ]; do sleep 1; done; fi\n"
                       "exec %s \"$@\"\n" % (count, count, hold, reached, hold, sys.executable))
    wrapper.chmod(0o755)
    hold.touch()
    return wrapper, hold, reached


def wait_lease_expired(testbed, lock, duration):
    lease = testbed.kubectl("get", "lease", "-n", "gpu-operator", lock, "-o", "json", check=False).stdout
    if not lease:
        return
    renewed = json.loads(lease)["spec"]["renewTime"]
    expires = datetime.datetime.strptime(renewed[:19], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=duration + 1)
    time.sleep(max(0.0, (expires - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_controller_killed_then_rerun_converges(testbed, gpu_cluster, add_gpu_node, gpu_agents, runner, gpu_workloads,
                                                tmp_path, point):
    """SIGKILL of ansible-playbook (module processes included) at ``point`` of the canary; then a re-run: every node
    at the target, uncordoned exactly what the rollout cordoned (an admin's cordon stays), nothing evicted twice."""
    from tests.testbed.agents.pytest_agents import nvml_lib_dir

    canary = add_gpu_node("rc-kill-a", "H100-80GB-HBM3", 1)
    admin = add_gpu_node("rc-kill-b", "H100-80GB-HBM3", 1)
    order = [canary, admin]
    for name in order:
        wait_advertised(testbed, name)
    gpu_agents.set_faults(canary, KILL_POINTS[point]["faults"])  # once settled: stale-plugin freezes allocatable
    before = gpu_workloads(order)
    testbed.core.patch_node(admin, {"spec": {"unschedulable": True}})  # cordoned by an admin before the rollout
    lock = unique_name("lock")
    variables = dict(rollout_vars(lock), profile="all-1g.10gb", mig_reconfigure_nodes=order)
    host_vars, hold = None, None
    if point == "before-uncordon":
        wrapper, hold, reached = interpreter_that_holds(tmp_path / "host-python")
        lib = str(nvml_lib_dir())
        host_vars = dict((n, {"mig_reconfigure_host_environment": {
            "LD_LIBRARY_PATH": lib, "GPUFLEET_SIM_NVML_STATE": str(gpu_cluster.state_path(n))}}) for n in order)
        host_vars[canary]["ansible_python_interpreter"] = str(wrapper)
    held_pod = None
    if point == "drain":
        held_pod = gpu_pods(before[canary])[0].split("/")
        testbed.core.patch_namespaced_pod(held_pod[1], held_pod[0], {"metadata": {"finalizers": [HOLD_FINALIZER]}})

    def at_point():
        view = node_view(testbed, canary)
        labels = view["labels"]
        if point == "drain":
            pod = testbed.core.read_namespaced_pod(held_pod[1], held_pod[0])
            return view["unschedulable"] and pod.metadata.deletion_timestamp and labels.get(CONFIG) != "all-1g.10gb"
        if point == "after-label":
            return labels.get(CONFIG) == "all-1g.10gb" and labels.get(STATE) is None
        if point == "pending":
            return labels.get(STATE) == "pending"
        if point == "verify":
            return labels.get(STATE) == "success" and labels.get(CONFIG) == "all-1g.10gb" and \
                gpu_allocatable(view) == {"nvidia.com/gpu": "1"}
        return reached.exists() and view["unschedulable"] and labels.get(STATE) == "success" and \
            gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}

    proc = runner.playbook(PLAYBOOK, order, variables, popen=True, host_vars=host_vars)
    try:
        testbed.wait_for(at_point, 120, "the canary at point %s" % point)
        assert at_point(), "point %s passed before the kill" % point
    finally:
        kill_tree(proc.pid)  # the controller dies, module processes included
        proc.communicate(timeout=30)
    half = node_view(testbed, canary)
    assert half["unschedulable"] and half["annotations"].get(PRIOR_ANNOTATION) == "false", half
    assert node_view(testbed, admin)["annotations"].get(PRIOR_ANNOTATION) is None  # not started
    # What the dead run was waiting for goes away (the pod, the stale plugin, the held read).
    if held_pod:
        testbed.core.patch_namespaced_pod(held_pod[1], held_pod[0], {"metadata": {"finalizers": None}})
    if point == "verify":
        gpu_agents.set_faults(canary, [])
    if hold:
        hold.unlink()
    testbed.wait_for(lambda: gpu_pods(workload_pods(testbed, canary, before[canary])) == [], 60, "the GPU pod gone")
    on_canary = workload_pods(testbed, canary, before[canary])

    wait_lease_expired(testbed, lock, variables["mig_reconfigure_lock_duration"])
    resumed = runner.playbook(PLAYBOOK, order, variables, host_vars=host_vars)
    assert resumed.rc == 0, resumed.explain()
    plan = dict((p["node"], p) for p in resumed.task("Plan every node")["plan"])
    assert plan[canary]["half_done"] is True
    rows = rows_of(resumed)
    assert rows[canary]["evicted"] == [], "evicted again: %s" % rows[canary]["evicted"]
    assert workload_pods(testbed, canary, before[canary]) == on_canary
    assert rows[admin]["evicted"] == gpu_pods(before[admin])
    for name in order:
        view = node_view(testbed, name)
        assert rows[name]["result"] == "reconfigured", rows[name]
        assert view["labels"][STATE] == "success" and gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}
        assert PRIOR_ANNOTATION not in view["annotations"]
        assert "gpufleet.io/mig-target-config" not in view["annotations"]
    assert node_view(testbed, canary)["unschedulable"] is False
    assert node_view(testbed, admin)["unschedulable"] is True and rows[admin]["uncordon"] == "left-cordoned"
    assert_only_gpu_pods_gone(testbed, before)
    testbed.core.patch_node(admin, {"spec": {"unschedulable": False}})


def test_a_held_node_whose_allocatable_moved_since_verification_fails_its_release(
        testbed, gpu_cluster, add_gpu_node, runner):
    """phase=release finds the nodes a rollout held cordoned (our cordon, the in-progress marker) from the cluster. A
    held node whose allocatable no longer agrees with the plan (here a device plugin that stopped re-advertising:
    all-1g.10gb applied, whole GPUs still advertised) is waited for as the verification waits, then fails, named and
    left cordoned: it is never left out of the release unreported."""
    node = add_gpu_node("rc-held", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    gpu_cluster.set_faults(node, ["stale-plugin"])
    testbed.core.patch_node(node, {"spec": {"unschedulable": True}, "metadata": {
        "annotations": {PRIOR_ANNOTATION: "false", "gpufleet.io/mig-target-config": "all-1g.10gb"},
        "labels": {CONFIG: "all-1g.10gb", STATE: None}}})
    gpu_cluster.wait_labels(node, {STATE: "success"}, timeout=120)
    released = runner.module("mig_rollout", {"phase": "release", "nodes": [node], "config": "all-1g.10gb",
                                             "verify_timeout": 3})
    assert released["failed_nodes"] == [node], released
    row = released["rows"][0]
    assert row["result"] == "failed" and row["stage"] == "verify", row
    assert "no longer agree with the plan since its verification" in row["message"], row
    assert "nvidia.com/mig-1g.10gb is 0, plan says 7" in row["message"], row
    assert node_view(testbed, node)["unschedulable"] is True
