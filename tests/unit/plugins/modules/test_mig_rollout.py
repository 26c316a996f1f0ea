"""mig_rollout option checks, which fail before any API call. Rollouts are covered by
tests/integration/reconfigure/test_rollout.py (see docs/testing.md); the window, snapshot and tables are unit-tested in
module_utils/reconfigure/test_window.py, test_snapshot.py and test_tables.py."""

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


def test_the_refusal_names_pods_requests_room_and_the_override():
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import preflight

    text = preflight.refusal("all-balanced", ["n1", "n2"], [
        {"resource": "nvidia.com/gpu", "wanted": 5, "room": 1,
         "pods": [{"pod": "w/p%d" % i, "asks": 1} for i in range(5)]}])
    assert text.startswith("MIG config all-balanced not rolled out on n1, n2, nothing was changed: pods to evict ask "
                           "for 5 nvidia.com/gpu in all, but after the change the cluster has room for 1: ")
    assert "w/p0 (1), w/p1 (1), w/p2 (1), w/p3 (1), w/p4 (1) would stay Pending" in text  # every pod, not 3
    assert "allow_unschedulable=true" in text and "mig_reconfigure_allow_unschedulable" in text
