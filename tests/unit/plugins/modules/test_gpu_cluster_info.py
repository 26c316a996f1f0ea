"""gpu_cluster_info option checks, which fail before any API call. Reading a cluster is covered by
tests/integration/report/test_fleet_report.py (see docs/testing.md)."""

import pytest

from .module_runner import run_module


@pytest.mark.parametrize("option, value", [("window", 0), ("stuck_after", -1), ("idle_below", 1.5)])
def test_out_of_range_options_are_named_with_their_values(tmp_path, option, value):
    result = run_module(tmp_path, "gpu_cluster_info", **{option: value})
    assert result["failed"]
    assert result["msg"].startswith("window must be > 0, stuck_after >= 0 and idle_below within 0..1")
    assert str(value) in result["msg"]


def test_prometheus_and_direct_endpoints_are_exclusive(tmp_path):
    result = run_module(tmp_path, "gpu_cluster_info", prometheus_url="http://127.0.0.1:9090",
                        dcgm_endpoints=[{"url": "http://127.0.0.1:9400/metrics"}])
    assert result["failed"] and "mutually exclusive" in result["msg"]
    assert "prometheus_url" in result["msg"] and "dcgm_endpoints" in result["msg"]


def test_unknown_format_is_refused(tmp_path):
    result = run_module(tmp_path, "gpu_cluster_info", formats=["pdf"])
    assert result["failed"] and "formats" in result["msg"] and "pdf" in result["msg"]
