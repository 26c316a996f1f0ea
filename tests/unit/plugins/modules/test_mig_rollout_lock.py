"""mig_rollout_lock option checks (no cluster needed). Taking, refusing and releasing the Lease is covered by
tests/integration/reconfigure/test_rollout.py::test_concurrent_rollout_is_refused (see docs/testing.md); expiry is
unit-tested in module_utils/reconfigure/test_lock.py."""

from .module_runner import run_module


def test_duration_below_ten_seconds_is_refused(tmp_path):
    result = run_module(tmp_path, "mig_rollout_lock", holder="me", duration=5)
    assert result["failed"] and result["msg"] == "duration must be at least 10 seconds, got 5"


def test_holder_is_required_and_state_is_a_choice(tmp_path):
    result = run_module(tmp_path, "mig_rollout_lock")
    assert result["failed"] and "holder" in result["msg"]
    result = run_module(tmp_path, "mig_rollout_lock", holder="me", state="taken")
    assert result["failed"] and "state" in result["msg"] and "present" in result["msg"]


def test_keep_max_run_below_one_second_is_refused(tmp_path):
    result = run_module(tmp_path, "mig_rollout_lock", holder="me", keep=True, keep_max_run=0)
    assert result["failed"] and result["msg"] == "keep_max_run must be >= 1, got 0"
