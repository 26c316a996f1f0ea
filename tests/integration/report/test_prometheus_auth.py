"""report.yml against a Prometheus that is not open to all: NVIDIA-format dcgm-exporter series scraped by a real
Prometheus that serves HTTPS with a private CA and wants basic auth (its own web config), and the same Prometheus
behind a bearer-token gate (tests/testbed/dcgm/prometheus.py TokenProxy, what kube-rbac-proxy does)."""

import pytest

from tests.testbed.dcgm.prometheus import Prometheus, TokenProxy

from .conftest import run_report
from .test_fleet_report import H100, gfd_labels, seven_1g

SECRET = "s3cret-Pa55"
TOKEN = "tok-0123456789abcdef"


@pytest.fixture
def guarded(testbed, report_run, dcgm_sim, tmp_path):
    node = report_run.node("auth", gfd_labels("all-1g.10gb", "success", counts={"1g.10gb": 7}),
                           {"nvidia.com/mig-1g.10gb": "7"})
    dcgm_sim.add_node(node, gpus=[{"index": 0, "model": H100, "instances": seven_1g()}])
    server = Prometheus(tmp_path / "prometheus", {node: dcgm_sim.target(node)}, users={"reporter": SECRET},
                        tls=True).start()
    proxy = None
    try:
        server.wait_for_series("DCGM_FI_DEV_FB_USED", 7)
        proxy = TokenProxy(server, TOKEN).start()
        yield {"node": node, "server": server, "proxy": proxy}
    finally:
        if proxy:
            proxy.stop()
        server.stop()


def metrics_read(report, node):
    entry = next(n for n in report["nodes"] if n["name"] == node)
    return report["metrics_source"], [s["profile"] for s in entry["gpus"][0]["slices"]]


def test_tls_with_a_private_ca_and_basic_auth(testbed, report_run, guarded, tmp_path):
    base = {"gpu_report_prometheus_url": guarded["server"].url, "gpu_report_label_selector": report_run.selector,
            "gpu_report_prometheus_ca_path": guarded["server"].ca_path, "gpu_report_prometheus_username": "reporter"}
    proc, report = run_report(testbed, tmp_path / "good", dict(base, gpu_report_prometheus_password=SECRET))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert metrics_read(report, guarded["node"]) == ("prometheus", ["1g.10gb"] * 7)
    assert SECRET not in proc.stdout + proc.stderr

    proc, report = run_report(testbed, tmp_path / "wrong", dict(base, gpu_report_prometheus_password="nope"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and report["metrics_source"] == "none"
    assert "401" in output and "refused the credentials" in output and guarded["server"].url in output, output[-3000:]

    # Without the CA the server's certificate is not trusted: named, not hidden.
    proc, report = run_report(testbed, tmp_path / "noca", dict(base, gpu_report_prometheus_password=SECRET,
                                                               gpu_report_prometheus_ca_path=""))
    assert report["metrics_source"] == "none" and "CERTIFICATE_VERIFY_FAILED" in proc.stdout + proc.stderr


def test_bearer_token(testbed, report_run, guarded, tmp_path):
    base = {"gpu_report_prometheus_url": guarded["proxy"].url, "gpu_report_label_selector": report_run.selector}
    proc, report = run_report(testbed, tmp_path / "good", dict(base, gpu_report_prometheus_token=TOKEN))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert metrics_read(report, guarded["node"]) == ("prometheus", ["1g.10gb"] * 7)
    assert TOKEN not in proc.stdout + proc.stderr
    refused_before = guarded["proxy"].refused
    proc, report = run_report(testbed, tmp_path / "none", base)
    assert report["metrics_source"] == "none" and guarded["proxy"].refused > refused_before
