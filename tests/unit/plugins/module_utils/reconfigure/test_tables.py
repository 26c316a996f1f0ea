"""The rollout's text: layouts, the plan and summary tables, the plan's --diff, the rollback summary."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils import text_table
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import procedure, tables


def test_tables():
    assert tables.layout_text([{"1g.10gb": 2, "2g.20gb": 1}] * 2 + [None]) == \
        "2x[1g.10gb:2 2g.20gb:1], 1xdisabled"
    lines = tables.summary_table([{"node": "n1", "model": "A100", "before": "all-disabled", "after": "all-balanced",
                                   "evicted": ["a/b"], "duration_s": 3.21, "result": "reconfigured"}])
    assert lines[0].split() == list(tables.SUMMARY_COLUMNS)
    assert lines[1].split() == ["n1", "A100", "all-disabled", "all-balanced", "1", "-", "3.2s", "reconfigured"]


def test_rollback_summary_says_how_the_rollback_ended():
    assert procedure.rollback_summary({"verified": True, "config": "all-disabled", "result": "success"}) == \
        "back at all-disabled, verified"
    assert procedure.rollback_summary({"verified": False, "result": "skipped",
                                       "message": "no previous config recorded on node n1"}) == \
        "no previous config recorded on node n1"
    assert procedure.rollback_summary({"verified": False, "config": "all-disabled", "result": "failed"}) == \
        "all-disabled ended failed"
    assert procedure.rollback_summary({"verified": False, "config": "all-disabled", "result": "success",
                                       "mismatches": ["nvidia.com/gpu: want 1, have 0"]}) == \
        "all-disabled ended success but nvidia.com/gpu: want 1, have 0"


def test_plan_diff_shows_each_node_to_change_with_its_layout_and_pods():
    plans = [
        {"node": "a", "errors": [], "at_target": False, "current_config": "all-disabled", "target_config": "all-balanced",
         "current": "2x whole", "target": "2x [1g.10gb x2, 2g.20gb, 3g.40gb]", "pods_to_evict": ["ns/p1", "ns/p2"]},
        {"node": "b", "errors": [], "at_target": True, "current_config": "all-balanced", "target_config": "all-balanced"},
        {"node": "c", "errors": ["node c: bad"], "target_config": "all-balanced"},
        {"node": "d", "errors": [], "at_target": False, "current_config": None, "target_config": "all-balanced",
         "current": "1x whole", "target": "1x [7g.80gb]", "pods_to_evict": []},
    ]
    diff = tables.plan_diff(plans)
    assert diff["before"] == ("a: nvidia.com/mig.config=all-disabled\n  layout: 2x whole\n"
                              "d: nvidia.com/mig.config=unset\n  layout: 1x whole\n")
    assert diff["after"] == ("a: nvidia.com/mig.config=all-balanced\n  layout: 2x [1g.10gb x2, 2g.20gb, 3g.40gb]\n"
                             "  evicts: ns/p1, ns/p2\n"
                             "d: nvidia.com/mig.config=all-balanced\n  layout: 1x [7g.80gb]\n  evicts: none\n")


def plan_entry(node, **extra):
    entry = {"node": node, "errors": [], "model": "NVIDIA H100 80GB HBM3", "current": "all-disabled (no MIG devices)",
             "target": "2x[1g.10gb:2 2g.20gb:1 3g.40gb:1]", "pods_to_evict": ["w/a", "w/b"],
             "blocking_budgets": ["w/pdb (allows 0, needs 1)"], "reset_or_reboot": "GPU reset"}
    entry.update(extra)
    return entry


def column_starts(line):
    """Where each column starts: after a run of two or more spaces (cells hold no plain space)."""
    import re
    return [0] + [m.end() for m in re.finditer(r"  +", line)]


def test_plan_table_is_one_aligned_line_per_row():
    entries = [plan_entry("gpu-node-1"), plan_entry("n2", at_target=True, pods_to_evict=[], blocking_budgets=[],
                                                    reset_or_reboot="none (layout only)"),
               plan_entry("a-much-longer-node-name", errors=["bad"], model=None)]
    lines = tables.plan_table(entries)
    assert len(lines) == 4 and not any("\n" in line for line in lines)
    assert lines[0] == ("node                     model                  current                        "
                        "target                             evict  budgets                    reset/reboot        status")
    starts = column_starts(lines[0])
    assert len(starts) == len(tables.PLAN_COLUMNS)
    for line in lines[1:]:
        assert column_starts(line) == starts[:len(column_starts(line))], line  # same columns, widths from content
    nbsp = text_table.NO_BREAK_SPACE
    assert lines[1].split("  ")[0] == "gpu-node-1"
    assert lines[1][starts[1]:].startswith("NVIDIA%sH100%s80GB%sHBM3" % (nbsp, nbsp, nbsp))
    assert lines[1][starts[-2]:].startswith("GPU%sreset" % nbsp) and lines[1].endswith("change")
    assert lines[2].endswith("at%starget" % nbsp) and lines[3].endswith("INVALID")
    assert lines[3][starts[1]:].startswith("?  ")
    # Spaces in cells print as spaces (no-break); splitting on whitespace still gives the words.
    assert lines[1][starts[2]:starts[3]].rstrip().replace(nbsp, " ") == "all-disabled (no MIG devices)"


def test_tables_print_one_line_per_row_in_ansible_yaml_output():
    """ansible.cfg (and AWX) print results as YAML, which folds a plain line at a single space past 80 columns."""
    import yaml

    lines = tables.plan_table([plan_entry("gpu-node-%d" % i) for i in range(3)]) + tables.summary_table([
        {"node": "gpu-node-1", "model": "NVIDIA H100 80GB HBM3", "before": "all-disabled", "after": "all-balanced",
         "evicted": ["a/b"], "duration_s": 3.21, "result": "not started"}])
    assert all(len(line) > 80 for line in lines[:4])
    dumped = yaml.dump({"msg": lines}, default_flow_style=False, allow_unicode=True, indent=4).splitlines()
    assert dumped[1:] == ["-   " + line for line in lines] or dumped[1:] == ["- " + line for line in lines], dumped
