"""mig-reconfigure.yml with mig_reconfigure_profiles: two node pools rolled to two MIG configs in one run (one plan,
one Lease, one window, one summary), a node no entry matches left as it is, and a node two entries match refused
before any change. Under the least-privilege ServiceAccount, on simulated GPU nodes."""

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, node_view
from tests.integration.reconfigure.test_rollout import (
    CONFIG,
    STATE,
    balanced_allocatable,
    gpu_allocatable,
    rollout_vars,
    rows_of,
    summary_lines,
    wait_advertised,
)
from tests.testbed.pytest_cluster import unique_name

POOL = "gpufleet.test/pool"


def test_two_pools_roll_to_two_configs_in_one_run(testbed, gpu_cluster, add_gpu_node, runner):
    pool = unique_name("a100")
    h100 = sorted([add_gpu_node("pf-h100-a", "H100-80GB-HBM3", 1), add_gpu_node("pf-h100-b", "H100-80GB-HBM3", 1)])
    a100 = add_gpu_node("pf-a100", "A100-SXM4-40GB", 1, labels={POOL: pool})
    other = add_gpu_node("pf-other", "H200", 1)
    names = h100 + [a100, other]
    for name in names:
        wait_advertised(testbed, name)
    other_before = node_view(testbed, other)
    profiles = [{"group": "h100_pool", "profile": "all-1g.10gb"},
                {"node_selector": "%s=%s" % (POOL, pool), "profile": "all-balanced"}]
    extra = dict(rollout_vars(unique_name("lock"), mig_reconfigure_max_unavailable=2), mig_reconfigure_profiles=profiles)

    result = runner.playbook(PLAYBOOK, names, extra, groups={"h100_pool": h100})
    assert result.rc == 0, result.explain()
    planned = result.task("Plan every node")
    wanted = {h100[0]: "all-1g.10gb", h100[1]: "all-1g.10gb", a100: "all-balanced"}
    assert planned["node_configs"] == wanted and planned["unmatched_nodes"] == [other]
    assert dict((p["node"], p["target_config"]) for p in planned["plan"]) == wanted
    assert sorted(n for batch in planned["batches"] for n in batch) == sorted(wanted)
    shown = result.task("Show the plan")["msg"]
    assert "target all-1g.10gb: %s" % ", ".join(h100) in shown and "target all-balanced: %s" % a100 in shown, shown
    assert any(line.startswith("left as they are") and other in line for line in shown), shown
    # One Lease for both configs, taken once and given back.
    lease = result.task("Take the rollout lock")["lease"]
    configs, _on, count = lease["rollout"].partition(" on ")
    assert sorted(configs.split(", ")) == ["all-1g.10gb", "all-balanced"] and count == "3 node(s)", lease
    assert result.task("Release the rollout lock")["outcome"] == "released"

    rows = rows_of(result)
    assert sorted(rows) == sorted(wanted)
    for name, config in wanted.items():
        view = node_view(testbed, name)
        assert view["labels"][CONFIG] == config and view["labels"][STATE] == "success", view["labels"]
        assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"]
        assert rows[name]["result"] == "reconfigured" and rows[name]["target"] == config, rows[name]
        assert rows[name]["after"] == config
    for name in h100:
        assert gpu_allocatable(node_view(testbed, name)) == {"nvidia.com/mig-1g.10gb": "7"}
    assert gpu_allocatable(node_view(testbed, a100)) == balanced_allocatable("A100-SXM4-40GB", 1)
    assert node_view(testbed, other) == other_before, "a node no entry matches was changed"
    lines = summary_lines(result)
    assert all(any(line.startswith(n) and "reconfigured" in line for line in lines) for n in wanted)

    # The plan of a re-run finds both pools at their targets: nothing to do.
    again = runner.playbook(PLAYBOOK, names, dict(extra, mig_reconfigure_lock_name=unique_name("lock")),
                            groups={"h100_pool": h100}, check=True, diff=True)
    assert again.rc == 0, again.explain()
    assert all(p["at_target"] for p in again.task("Plan every node")["plan"])


def test_a_node_two_entries_match_is_refused_before_any_change(testbed, gpu_cluster, add_gpu_node, runner):
    pool = unique_name("pool")
    names = sorted([add_gpu_node("pf-dup-a", "H100-80GB-HBM3", 1, labels={POOL: pool}),
                    add_gpu_node("pf-dup-b", "H100-80GB-HBM3", 1)])
    for name in names:
        wait_advertised(testbed, name)
    views = dict((n, node_view(testbed, n)) for n in names)
    groups = {"h100_pool": names}

    def run(profiles, **extra):
        return runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock"), **extra),
                                                     mig_reconfigure_profiles=profiles), groups=groups)

    doubled = run([{"group": "h100_pool", "profile": "all-1g.10gb"},
                   {"node_selector": {POOL: pool}, "profile": "all-balanced"}], mig_reconfigure_profile="all-disabled")
    assert doubled.rc != 0
    msg = doubled.task("Plan every node")["msg"]
    assert "node %s is matched by profiles[0] (group h100_pool) and by profiles[1] (node_selector %s=%s)" % (
        names[0], POOL, pool) in msg, msg
    # Bad entries, each named by its index and field.
    both = run([{"group": "h100_pool", "node_selector": "a=b", "profile": "all-1g.10gb"}])
    assert "profiles[0] must have exactly one of group or node_selector, got group and node_selector" in \
        both.task("Plan every node")["msg"]
    unknown = run([{"group": "h100_pool", "profile": "all-1g.10gb"}, {"group": "no_such_group", "profile": "x"}])
    assert "profiles[1].group: no inventory group named no_such_group" in unknown.task("Plan every node")["msg"]
    empty = run([{"group": "h100_pool", "profile": ""}])
    assert "profiles[0].profile is empty" in empty.task("Plan every node")["msg"]
    for result in (doubled, both, unknown, empty):
        assert result.rc != 0
        assert not result.ran("Take the rollout lock") and not result.ran("Reconfigure step")
    for name in names:
        assert node_view(testbed, name) == views[name], "node %s changed" % name
