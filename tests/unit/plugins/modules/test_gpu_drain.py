"""gpu_drain option checks, which fail before any API call. Draining on a cluster is covered by
tests/integration/reconfigure/test_gpu_drain.py (see docs/testing.md)."""

from .module_runner import run_module


def test_timeout_must_be_positive(tmp_path):
    result = run_module(tmp_path, "gpu_drain", name="n1", timeout=0)
    assert result["failed"] and result["msg"] == "timeout must be a positive number of seconds, got 0"


def test_negative_grace_period_is_refused(tmp_path):
    result = run_module(tmp_path, "gpu_drain", name="n1", grace_period=-5)
    assert result["failed"] and result["msg"] == "grace_period must be >= 0, got -5"


def test_node_name_is_required_and_state_is_a_choice(tmp_path):
    missing = run_module(tmp_path, "gpu_drain")
    assert missing["failed"] and "name" in missing["msg"]
    wrong = run_module(tmp_path, "gpu_drain", name="n1", state="evicted")
    assert wrong["failed"] and "state" in wrong["msg"] and "drained" in wrong["msg"]
