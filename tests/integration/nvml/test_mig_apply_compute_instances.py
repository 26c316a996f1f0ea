"""mig_apply on a simulated host refuses compute-instance profiles (``1c.3g.40gb``) before anything changes: MIG
Manager applies those (mig-reconfigure.yml); this module creates GPU instances with one full compute instance."""

from tests.integration.nvml.test_nvml_modules import layout, run_module


def test_mig_apply_refuses_compute_instance_profiles_and_changes_nothing(sim_host):
    host = sim_host("H100-PCIe", 1, mig_enabled=True)
    before = layout(host)
    result = run_module(host, "mig_apply", {"mig_devices": {"1c.3g.40gb": 2}})
    assert result.get("failed") and "compute-instance profiles 1c.3g.40gb are applied by MIG Manager" in result["msg"]
    assert layout(host) == before
