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


@pytest.mark.parametrize("value, text", [("0", "must be at least 1"), ("150%", "from 1% to 100%"),
                                         ("a few", "must be a count")])
def test_a_bad_max_unavailable_is_refused_naming_the_option(tmp_path, value, text):
    result = run_module(tmp_path, "mig_rollout", nodes=["n1"], config="all-balanced", max_unavailable=value)
    assert result["failed"] and result["msg"].startswith("max_unavailable ") and text in result["msg"]


@pytest.mark.parametrize("option", ["drain_timeout", "apply_timeout", "verify_timeout"])
def test_timeouts_must_be_positive(tmp_path, option):
    result = run_module(tmp_path, "mig_rollout", nodes=["n1"], config="all-balanced", **{option: 0})
    assert result["failed"] and result["msg"] == "%s must be a positive number of seconds, got 0" % option
