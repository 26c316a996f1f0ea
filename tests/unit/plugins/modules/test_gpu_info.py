"""gpu_info argument handling. Reading GPUs needs NVML: covered against the simulated NVML by
tests/integration/nvml/test_nvml_modules.py::test_gpu_info_reads_identity_mig_mode_profiles_and_processes and
::test_gpu_info_without_nvml_and_without_gpus (see docs/testing.md)."""

from .module_runner import run_module


def test_gpu_indices_must_be_integers(tmp_path):
    result = run_module(tmp_path, "gpu_info", gpus=["first"])
    assert result["failed"] and "gpus" in result["msg"] and "int" in result["msg"]
