"""mig_rollout option checks, which fail before any API call. Rollouts are covered by
tests/integration/reconfigure/test_rollout.py (see docs/testing.md); the window and tables are unit-tested in
module_utils/reconfigure/test_rollout.py."""

import pytest

from .module_runner import run_module


def test_empty_config_and_empty_node_list_are_refused(tmp_path):
    result = run_module(tmp_path, "mig_rollout", nodes=["n1"], config="  ")
    assert result["failed"] and result["msg"].startswith("config is empty")
    result = run_module(tmp_path, "mig_rollout", nodes=["", ""], config="all-balanced")
    assert result["failed"] and result["msg"].startswith("nodes is empty")


def test_a_node_listed_twice_is_named(tmp_path):
    result = run_module(tmp_path, "mig_rollout", nodes=["n2", "n1", "n2", "n3", "n1"], config="all-balanced")
    assert result["failed"] and result["msg"] == "nodes lists a node more than once: n1, n2"


def test_release_needs_the_rows_of_the_apply(tmp_path):
    result = run_module(tmp_path, "mig_rollout", nodes=["n1"], config="all-balanced", phase="release")
    assert result["failed"] and result["msg"].startswith("phase=release needs rows")


@pytest.mark.parametrize("option", ["drain_timeout", "apply_timeout", "verify_timeout"])
def test_timeouts_must_be_positive(tmp_path, option):
    result = run_module(tmp_path, "mig_rollout", nodes=["n1"], config="all-balanced", **{option: 0})
    assert result["failed"] and result["msg"] == "%s must be a positive number of seconds, got 0" % option
