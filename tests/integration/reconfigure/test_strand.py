"""Never strand a workload (issue 20): a rollout whose evicted pods would find no GPU room afterwards is refused
before any change - by the plan (check mode and run) and by an apply step called alone - naming the pods, what
they ask for and the room there will be; mig_reconfigure_allow_unschedulable accepts it. Run by ansible-playbook
under the least-privilege ServiceAccount on simulated GPU nodes, as test_rollout.py."""

import re

from tests.integration.reconfigure.conftest import PLAYBOOK, deploy, node_view, running_pods, wait_running
from tests.integration.reconfigure.test_rollout import (
    CONFIG,
    assert_only_gpu_pods_gone,
    summary_lines,
    free_whole_gpus_outside,
    gpu_allocatable,
    rollout_vars,
    rows_of,
    wait_advertised,
)
from tests.testbed.pytest_cluster import unique_name


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
    assert_aligned_table(summary_lines(allowed), ["node", "model", "before", "after", "evicted", "duration", "result"],
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
