"""A custom mig-parted config checked against the inventory's GPU models (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.config_check import mig_config_findings

H100 = "NVIDIA H100 80GB HBM3"


def test_custom_mig_config_that_does_not_parse():
    problems, names, _mixed = mig_config_findings({"version": "v1", "mig-configs": {"x": [{"devices": "all"}]}}, [H100])
    assert names == []
    assert len(problems) == 1 and "mig-enabled" in problems[0]
