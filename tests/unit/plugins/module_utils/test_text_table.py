"""The text tables every stage prints and the short resource counts in them."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import NO_BREAK_SPACE, resource_counts, table_lines


def test_columns_are_as_wide_as_their_widest_cell_with_a_rule_when_asked():
    lines = table_lines(["NODE", "FB USED"], [["gpu-node-01", "1 MiB"], ["n", ""]], rule=True)
    assert lines == ["NODE         FB%sUSED" % NO_BREAK_SPACE,
                     "-----------  -------",
                     "gpu-node-01  1%sMiB" % NO_BREAK_SPACE,
                     "n"]


def test_no_rule_and_no_rows_give_the_header_alone():
    assert table_lines(["node", "result"], []) == ["node  result"]


def test_resource_counts_are_short_sorted_and_leave_out_zero():
    assert resource_counts({"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 0, "nvidia.com/mig-2g.20gb": "1"}) == \
        "mig-1g.10gb=7, mig-2g.20gb=1"
    assert resource_counts({"nvidia.com/gpu": 0}) == "-"
    assert resource_counts(None) == "-"
