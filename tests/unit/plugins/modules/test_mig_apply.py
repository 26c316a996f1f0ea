"""mig_apply argument handling, checked before NVML is opened. Applying a plan is covered against the simulated
NVML by tests/integration/nvml/test_nvml_modules.py (test_mig_apply_*; see docs/testing.md); the apply logic is
unit-tested in module_utils/nvml/test_apply.py."""

from .module_runner import run_module


def test_a_target_is_required(tmp_path):
    result = run_module(tmp_path, "mig_apply", force=True)
    assert result["failed"] and "config_name" in result["msg"] and "mig_devices" in result["msg"]


def test_named_config_and_explicit_layout_are_exclusive(tmp_path):
    result = run_module(tmp_path, "mig_apply", config_name="all-balanced", mig_devices={"1g.10gb": 7})
    assert result["failed"] and "mutually exclusive" in result["msg"]
    result = run_module(tmp_path, "mig_apply", mig_devices={"1g.10gb": 7}, config="version: v1\n")
    assert result["failed"] and "mutually exclusive" in result["msg"]
