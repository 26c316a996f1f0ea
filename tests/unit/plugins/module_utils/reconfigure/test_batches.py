"""reconfigure.batches: max_unavailable as a count or a percentage, and the canary/batch cut."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.batches import (
    BatchError,
    batch_size,
    cut,
)


@pytest.mark.parametrize("value,total,size", [
    (1, 10, 1), (3, 2, 3), ("2", 10, 2), (" 4 ", 10, 4),
    ("25%", 8, 2), ("25%", 10, 3), ("50%", 3, 2), ("10%", 30, 3), ("1%", 10, 1), ("100%", 7, 7),
    ("33.4%", 3, 2), ("50 %", 5, 3),
])
def test_counts_and_percentages_round_up_to_at_least_one(value, total, size):
    assert batch_size(value, total) == size


@pytest.mark.parametrize("value,words", [
    ("0%", "from 1% to 100%"), ("150%", "from 1% to 100%"), ("100.5%", "from 1% to 100%"),
    (0, "at least 1"), ("0", "at least 1"), (-2, "a count (2) or a percentage"),
    ("abc", "a count (2) or a percentage"), ("25", None), ("%", "a count"), ("2.5", "a count"),
    (None, "a count"), (True, "a count"), ("25%%", "a count"),
])
def test_bad_values_name_the_option(value, words):
    if words is None:
        assert batch_size(value, 4) == 25
        return
    with pytest.raises(BatchError) as err:
        batch_size(value, 4, option="mig_reconfigure_max_unavailable")
    assert str(err.value).startswith("mig_reconfigure_max_unavailable ") and words in str(err.value)


def test_canary_then_one_sliding_window_step():
    assert cut(["a", "b", "c", "d"], 2) == [["a"], ["b", "c", "d"]]
    assert cut(["a", "b", "c"], 2, canary=False) == [["a", "b", "c"]]


def test_held_batches_are_cut_by_size():
    assert cut(["a", "b", "c", "d", "e", "f"], 2, hold=True) == [["a"], ["b", "c"], ["d", "e"], ["f"]]
    assert cut(["a", "b", "c"], 5, canary=False, hold=True) == [["a", "b", "c"]]


def test_nothing_or_only_the_canary():
    assert cut([], 3) == [] and cut([], 3, hold=True) == []
    assert cut(["a"], 3) == [["a"]] and cut(["a"], 3, hold=True) == [["a"]]
