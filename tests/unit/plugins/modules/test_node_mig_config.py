"""node_mig_config argument handling (no cluster needed). Its actions are covered by
tests/integration/reconfigure/test_rollout.py (preflight, apply, diagnose, unwedge, rollback; see docs/testing.md);
the step's pure parts are unit-tested in module_utils/reconfigure/test_node_step.py."""

import pytest

from .module_runner import run_module


@pytest.mark.parametrize("action", ["apply", "preflight"])
def test_apply_and_preflight_need_a_config(tmp_path, action):
    result = run_module(tmp_path, "node_mig_config", name="n1", action=action)
    assert result["failed"] and "config" in result["msg"] and action in result["msg"]


def test_unknown_action_is_refused_listing_the_actions(tmp_path):
    result = run_module(tmp_path, "node_mig_config", name="n1", action="reset")
    assert result["failed"] and "action" in result["msg"] and "rollback" in result["msg"]
