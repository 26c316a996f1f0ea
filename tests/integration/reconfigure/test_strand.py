"""Never strand a workload: an order that strands nothing is chosen where the given one would, the evicted
pods are followed until they run again (or listed Pending with the scheduler's reason); and a rollout whose evicted
pods would find no GPU room afterwards is refused before any change - by the plan (check mode and run) and by an
apply step called alone - naming the pods, what they ask for and the room there will be;
mig_reconfigure_allow_unschedulable accepts it. Run by ansible-playbook under the least-privilege ServiceAccount on
simulated GPU nodes, as test_rollout.py."""

import re

import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK, deploy, node_view, running_pods, wait_running
from tests.integration.reconfigure.test_rollout import (
    CONFIG,
    STATE,
    assert_only_gpu_pods_gone,
    summary_lines,
    free_whole_gpus_outside,
    gpu_allocatable,
    rollout_vars,
    rows_of,
    wait_advertised,
)
from tests.testbed.pytest_cluster import unique_name

SLICE = "nvidia.com/mig-1g.10gb"


def settled_view(testbed, node):
    """node_view without the annotations the simulators and kwok add as they go (ours are gpufleet.io/...)."""
    view = node_view(testbed, node)
    view["annotations"] = dict((k, v) for k, v in view["annotations"].items() if k.startswith("gpufleet.io/"))
    return view


def column_starts(line):
    """Where each column of a table line starts (columns are separated by two or more spaces; a cell's own
    spaces are no-break spaces)."""
    return [0] + [m.end() for m in re.finditer(r"  +", line)]


def assert_aligned_table(lines, columns, names):
    """A header naming ``columns``, then one line per node of ``names`` (in that order), every column starting
    where the header's does."""
    assert lines[0].split() == list(columns), lines
    assert [line.split("  ")[0] for line in lines[1:1 + len(names)]] == list(names), lines
    for line in lines[1:1 + len(names)]:
        assert "\n" not in line and column_starts(line) == column_starts(lines[0]), (line, lines[0])


def whole_gpu_workloads(testbed, namespace, names, gpus):
    """Per node one GPU Deployment asking ``gpus`` whole GPUs (all of the node's) and one CPU Deployment."""
    for node in names:
        deploy(testbed, namespace, "gpu-" + node[-6:], node, resources={"nvidia.com/gpu": str(gpus)})
        deploy(testbed, namespace, "cpu-" + node[-6:], node, resources={"cpu": "100m"})
    for node in names:
        wait_running(testbed, node, 2, namespace)
    return dict((node, running_pods(testbed, node, namespace)) for node in names)


def test_a_rollout_that_would_strand_pods_is_refused_with_nothing_changed_then_the_override_runs(
        testbed, testbed_namespace, gpu_cluster, add_gpu_node, runner):
    names = sorted([add_gpu_node("st-a", "H100-80GB-HBM3", 2), add_gpu_node("st-b", "H100-80GB-HBM3", 2)])
    for name in names:
        wait_advertised(testbed, name)
    before = whole_gpu_workloads(testbed, testbed_namespace, names, 2)
    gpu_pods = sorted(k for pods in before.values() for k in pods if "/gpu-" in k)
    views = dict((n, settled_view(testbed, n)) for n in names)
    # all-1g.10gb advertises no whole GPU on these nodes: the 4 whole GPUs asked for need room elsewhere.
    room = free_whole_gpus_outside(testbed, names)
    assert room < 4, "this shared cluster has %d whole GPUs free outside the test's nodes" % room
    refusal_text = "pods to evict ask for 4 nvidia.com/gpu in all, but after the change the cluster has room for %d" % room
    variables = dict(rollout_vars(unique_name("lock"), mig_reconfigure_max_unavailable=2,
                                  mig_reconfigure_allow_unschedulable=False), profile="all-1g.10gb")

    # 1. Check mode: the plan is shown (with REFUSED lines), then the run stops.
    plan = runner.playbook(PLAYBOOK, names, variables, check=True)
    planned = plan.task("Plan every node")
    assert plan.rc != 0, (planned.get("msg"), planned.get("plan"), planned.get("stranded"))
    assert [s["resource"] for s in planned["stranded"]] == ["nvidia.com/gpu"]
    assert planned["stranded"][0]["wanted"] == 4 and planned["stranded"][0]["room"] == room
    assert sorted(a["pod"] for a in planned["stranded"][0]["pods"]) == gpu_pods
    assert all(a["asks"] == 2 for a in planned["stranded"][0]["pods"])
    shown = plan.task("Show the plan")["msg"]
    assert_aligned_table(shown, ["node", "model", "current", "target", "evict", "budgets", "reset/reboot", "status"],
                         names)
    assert any(line.startswith("REFUSED: " + refusal_text) for line in shown), shown
    stop = plan.task("Stop before any change when the plan refused")["msg"]
    assert refusal_text in stop and "nothing was changed" in stop and "allow_unschedulable" in stop
    assert all("%s (2)" % pod in stop for pod in gpu_pods), stop

    # 2. A real run: refused the same way, before the Lease and before any node.
    refused = runner.playbook(PLAYBOOK, names, variables)
    assert refused.rc != 0, refused.explain()
    assert refusal_text in refused.task("Stop before any change when the plan refused")["msg"]
    for result in (plan, refused):
        assert not result.ran("Take the rollout lock") and not result.ran("Reconfigure step")

    # 3. The apply step called alone (as a playbook calling the module would) counts again and refuses.
    direct = runner.module("mig_rollout", {"nodes": names, "config": "all-1g.10gb", "phase": "apply"})
    assert direct["failed"] and refusal_text in direct["msg"] and not direct["changed"], direct
    assert sorted(direct["failed_nodes"]) == names
    assert all(r["result"] == "not started" for r in direct["rows"])
    dry = runner.module("mig_rollout", {"nodes": names, "config": "all-1g.10gb", "phase": "apply"}, check=True)
    assert dry["failed"] and refusal_text in dry["msg"], dry

    # Nothing changed: labels, annotations, cordons, allocatable, and the very same pods (uids).
    for name in names:
        assert settled_view(testbed, name) == views[name], "node %s changed" % name
        assert running_pods(testbed, name, testbed_namespace) == before[name]

    # 4. The override: the rollout runs, the shortage is a warning, only the GPU pods were evicted.
    allowed = runner.playbook(PLAYBOOK, names, dict(variables, mig_reconfigure_allow_unschedulable=True))
    assert allowed.rc == 0, allowed.explain()
    assert refusal_text in allowed.task("Plan every node")["capacity_warnings"][0]
    assert any(line.startswith("WARNING: " + refusal_text) for line in allowed.task("Show the plan")["msg"])
    rows = rows_of(allowed)
    for name in names:
        view = node_view(testbed, name)
        assert rows[name]["result"] == "reconfigured" and view["labels"][CONFIG] == "all-1g.10gb"
        assert gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "14"} and view["unschedulable"] is False
    assert_only_gpu_pods_gone(testbed, before, dict((n, rows[n]["evicted"]) for n in names))
    assert_aligned_table(summary_lines(allowed), ["node", "model", "before", "after", "evicted", "back", "duration", "result"],
                         names)


def test_the_override_is_taken_from_the_playbook_extra_var(
        testbed, testbed_namespace, gpu_cluster, add_gpu_node, runner):
    """-e allow_unschedulable=true (the AWX survey's answer) reaches the role; 'false' keeps the refusal."""
    name = add_gpu_node("st-var", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, name)
    whole_gpu_workloads(testbed, testbed_namespace, [name], 1)
    assert free_whole_gpus_outside(testbed, [name]) < 1, "a whole GPU is free elsewhere in this shared cluster"
    base = rollout_vars(unique_name("lock"), profile="all-1g.10gb")
    del base["mig_reconfigure_allow_unschedulable"]  # the role default (false), overridden by -e only
    kept = runner.playbook(PLAYBOOK, [name], dict(base, allow_unschedulable="false"), check=True)
    assert kept.rc != 0 and kept.task("Plan every node")["stranded"], kept.explain()
    accepted = runner.playbook(PLAYBOOK, [name], dict(base, allow_unschedulable="true"), check=True)
    assert accepted.rc == 0, accepted.explain()
    assert accepted.task("Plan every node")["stranded"][0]["pods"][0]["asks"] == 1


def deploy_on(testbed, namespace, name, nodes, replicas, resources):
    """A Deployment whose pods may run on any of ``nodes`` (and nowhere else in this shared cluster)."""
    # One term per node (terms are ORed): a metadata.name field selector takes a single value.
    allowed = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in nodes]
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": allowed}}},
                         "containers": [{"name": "main", "image": "busybox", "resources": {"limits": resources}}]}}}}
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))


def free_outside(testbed, names, resource):
    """Per schedulable node other than ``names``: ``resource`` allocatable less what its pods hold, summed."""
    room = {}
    for node in testbed.core.list_node().items:
        if node.metadata.name not in names and not node.spec.unschedulable:
            room[node.metadata.name] = int((node.status.allocatable or {}).get(resource, 0))
    for pod in testbed.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name in room and pod.status.phase not in ("Succeeded", "Failed"):
            room[pod.spec.node_name] -= sum(int(((c.resources and c.resources.limits) or {}).get(resource, 0))
                                            for c in pod.spec.containers)
    return sum(max(0, free) for free in room.values())


def pods_by_node(testbed, namespace):
    """{app: {node: count}} of the namespace's Running pods, and the number of pods not Running."""
    placed, other = {}, 0
    for pod in testbed.core.list_namespaced_pod(namespace).items:
        if pod.metadata.deletion_timestamp:
            continue
        if pod.status.phase != "Running":
            other += 1
            continue
        app = placed.setdefault(pod.metadata.labels["app"], {})
        app[pod.spec.node_name] = app.get(pod.spec.node_name, 0) + 1
    return placed, other


def test_an_order_that_strands_nothing_is_chosen_and_every_evicted_pod_runs_again(
        testbed, testbed_namespace, gpu_cluster, add_gpu_node, runner):
    """all-1g.10gb on two nodes asked for in the order (sliced, whole): sliced (all-balanced) runs four pods on
    1g.10gb slices, whole runs two on whole GPUs, a spare node outside the rollout has two whole GPUs free.
    Sliced first would leave its four pods without a slice anywhere while it changes (whole has none yet); whole
    first sends its two pods to the spare and becomes 14 slices, where sliced's four then land. The plan takes
    that order and says so; the summary says where each node's pods run again."""
    whole, sliced, spare = (add_gpu_node("so-whole", "H100-80GB-HBM3", 2), add_gpu_node("so-sliced", "H100-80GB-HBM3", 2),
                            add_gpu_node("so-spare", "H100-80GB-HBM3", 2))
    for name in (whole, sliced, spare):
        wait_advertised(testbed, name)
    testbed.core.patch_node(sliced, {"metadata": {"labels": {CONFIG: "all-balanced"}}})

    def balanced():
        view = node_view(testbed, sliced)
        return view["labels"].get(STATE) == "success" and gpu_allocatable(view).get(SLICE) == "4"
    testbed.wait_for(balanced, 90, "all-balanced on %s" % sliced)
    # The pods start where the test wants them: the spare is cordoned until they run.
    testbed.core.patch_node(spare, {"spec": {"unschedulable": True}})
    allowed = [whole, sliced, spare]
    deploy_on(testbed, testbed_namespace, "slice", allowed, 4, {SLICE: "1"})
    deploy_on(testbed, testbed_namespace, "whole", allowed, 2, {"nvidia.com/gpu": "1"})
    wait_running(testbed, sliced, 4, testbed_namespace)
    wait_running(testbed, whole, 2, testbed_namespace)
    testbed.core.patch_node(spare, {"spec": {"unschedulable": False}})
    assert pods_by_node(testbed, testbed_namespace) == ({"slice": {sliced: 4}, "whole": {whole: 2}}, 0)
    room = free_outside(testbed, [whole, sliced], SLICE)
    assert room < 4, "this shared cluster has %d 1g.10gb slices free outside the test's nodes" % room
    variables = dict(rollout_vars(unique_name("lock"), mig_reconfigure_allow_unschedulable=False,
                                  mig_reconfigure_max_unavailable=1, mig_reconfigure_follow_timeout=60),
                     profile="all-1g.10gb", nodes="%s,%s" % (sliced, whole))

    plan = runner.playbook(PLAYBOOK, [whole, sliced], variables, check=True)
    assert plan.rc == 0, plan.explain()
    planned = plan.task("Plan every node")
    assert planned["order"] == [whole, sliced] and planned["batches"] == [[whole], [sliced]], planned["order"]
    note = "order changed to avoid stranding: %s, %s (canary %s); in the given order (%s, %s) when %s starts, " % (
        whole, sliced, whole, sliced, whole, sliced)
    assert planned["order_note"].startswith(note) and planned["order_note"].endswith("would find no room")
    assert planned["order_note"].count("(1 %s)" % SLICE) == 4, planned["order_note"]
    assert planned["stranded"] == []
    assert note in "\n".join(plan.task("Show the plan")["msg"])

    result = runner.playbook(PLAYBOOK, [whole, sliced], variables)
    assert result.rc == 0, result.explain()
    rows = rows_of(result)
    assert [r["result"] for r in (rows[whole], rows[sliced])] == ["reconfigured", "reconfigured"]
    # Nothing stranded on the way: whole's pods went to the spare, sliced's to whole's new slices.
    assert rows[whole]["follow"] == {"evicted": 2, "returned": 2, "returned_on": {spare: 2}, "pending": [],
                                     "not_back": []}
    assert rows[sliced]["follow"] == {"evicted": 4, "returned": 4, "returned_on": {whole: 4}, "pending": [],
                                      "not_back": []}
    placed, not_running = pods_by_node(testbed, testbed_namespace)
    assert placed == {"slice": {whole: 4}, "whole": {spare: 2}} and not_running == 0
    lines = summary_lines(result)
    assert_aligned_table(lines, ["node", "model", "before", "after", "evicted", "back", "duration", "result"],
                         [whole, sliced] if whole < sliced else [sliced, whole])
    assert "%s: 2 of 2 evicted pods running again: 2 on %s" % (whole, spare) in lines
    assert "%s: 4 of 4 evicted pods running again: 4 on %s" % (sliced, whole) in lines
    assert [re.split(r"  +", line)[5] for line in lines[1:3]] == (["2/2", "4/4"] if whole < sliced else ["4/4", "2/2"])


def test_pods_still_pending_are_listed_with_the_scheduler_reason_and_bare_pods_as_not_recreated(
        testbed, testbed_namespace, gpu_cluster, add_gpu_node, runner):
    """With the override, a whole-GPU pod pinned to its node finds no GPU after all-1g.10gb: its replacement is
    listed Pending with the scheduler's message; a pod without a controller (force) is not recreated."""
    name = add_gpu_node("st-pend", "H100-80GB-HBM3", 2)
    wait_advertised(testbed, name)
    deploy(testbed, testbed_namespace, "gpu-pinned", name, resources={"nvidia.com/gpu": "1"})
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": testbed_namespace},
            "spec": {"nodeName": name, "containers": [{"name": "main", "image": "busybox",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(bare))
    wait_running(testbed, name, 2, testbed_namespace)
    variables = dict(rollout_vars(unique_name("lock"), mig_reconfigure_force=True, mig_reconfigure_follow_timeout=5),
                     profile="all-1g.10gb")
    result = runner.playbook(PLAYBOOK, [name], variables)
    assert result.rc == 0, result.explain()
    followed = rows_of(result)[name]["follow"]
    assert followed["evicted"] == 2 and followed["returned"] == 0 and followed["returned_on"] == {}
    assert followed["not_back"] == [{"pod": "%s/bare" % testbed_namespace, "reason": "not recreated (no controller)"}]
    [pending] = followed["pending"]
    assert pending["replaces"].startswith("%s/gpu-pinned-" % testbed_namespace)
    replacement = testbed.core.read_namespaced_pod(pending["pod"].split("/")[1], testbed_namespace)
    assert replacement.status.phase == "Pending" and replacement.spec.node_name is None
    assert pending["reason"].startswith("0/") and "nodes are available" in pending["reason"], pending
    lines = summary_lines(result)
    assert "%s: 0 of 2 evicted pods running again" % name in lines
    assert "%s: %s (replaces %s) Pending: %s" % (name, pending["pod"], pending["replaces"], pending["reason"]) in lines
    assert "%s: %s/bare not recreated (no controller)" % (name, testbed_namespace) in lines
