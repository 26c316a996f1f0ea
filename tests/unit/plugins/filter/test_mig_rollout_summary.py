"""The mig_rollout_summary filter: rows of all batches plus untouched planned nodes, sorted, failures spelled out."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.mig_rollout_summary import FilterModule, mig_rollout_summary


def row(node, result, **extra):
    return dict({"node": node, "model": "H200", "before": "all-disabled", "after": "all-balanced", "evicted": [],
                 "duration_s": 1.0, "result": result}, **extra)


def test_rows_and_untouched_planned_nodes_in_one_sorted_table():
    rows = [row("n3", "reconfigured"),
            row("n1", "failed", message="timed out waiting for mig-manager",
                diagnostics={"hints": ["check the mig-manager log"]})]
    plan = [{"node": "n1", "model": "H200", "current_config": "all-disabled"},
            {"node": "n2", "model": "H200", "current_config": "all-balanced", "at_target": True},
            {"node": "n4", "model": "H200", "current_config": "all-disabled"}]
    lines = mig_rollout_summary(rows, plan)
    assert [line.split()[0] for line in lines[1:5]] == ["n1", "n2", "n3", "n4"]
    assert lines[2].split()[-1] == "unchanged" and lines[4].split()[-2:] == ["not", "started"]
    assert lines[5:] == ["n1: timed out waiting for mig-manager", "n1: hint: check the mig-manager log"]
    assert len(rows) == 2, "the rows passed in are not modified"


def test_no_rows_and_no_plan_give_the_header_only():
    assert len(mig_rollout_summary(None)) == 1
    assert FilterModule().filters()["mig_rollout_summary"] is mig_rollout_summary
