"""report.yml against the testbed: each finding planted (drift, stuck, idle-but-allocated, unallocatable demand)
and named by the report, metrics through a real Prometheus scraping simulated dcgm-exporter endpoints, nothing
changed in the cluster, the JSON valid against its schema, the HTML page rendered in headless Chromium."""

import json
import shutil
import struct
import subprocess
import time

import jsonschema
import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.build import REPORT_SCHEMA

from tests.testbed.operator import NFD_GPU_NODE_LABELS

from .conftest import cluster_snapshot, run_report

H100 = "NVIDIA H100 80GB HBM3"


def gfd_labels(config, state, strategy="mixed", counts=None, product="NVIDIA-H100-80GB-HBM3", gpus=1, extra=None):
    # NFD's PCI label too: without it NVIDIA's controller strips the node's gpu.deploy.* labels (no GPUs any more).
    labels = dict(NFD_GPU_NODE_LABELS)
    labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
                   "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": strategy,
                   "nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state})
    for profile, count in (counts or {}).items():
        labels["nvidia.com/mig-%s.count" % profile] = str(count)
    labels.update(extra or {})
    return labels


def seven_1g(gi_base=7):
    return [{"gi_id": gi_base + i, "profile": "1g.10gb"} for i in range(7)]


@pytest.fixture
def planted(testbed, gpu_cluster, report_run, dcgm_sim):
    """Four nodes and three pods, each planting one finding; dcgm endpoints for the MIG nodes.

    NVIDIA's controller (gpu_cluster) labels the planted GPU nodes as it labels real ones; the fixture waits for it,
    so the snapshot a test takes is of a settled cluster."""
    run = report_run
    one_g = {"nvidia.com/mig-1g.10gb": "7"}
    # drift: the label says all-1g.10gb (success) and GFD/allocatable agree, but the hardware holds 3g+2g+1g+1g.
    drift = run.node("drift", gfd_labels("all-1g.10gb", "success", counts={"1g.10gb": 7}), one_g)
    dcgm_sim.add_node(drift, gpus=[{"index": 0, "model": H100, "instances": [
        {"gi_id": 1, "profile": "3g.40gb"}, {"gi_id": 5, "profile": "2g.20gb"},
        {"gi_id": 13, "profile": "1g.10gb"}, {"gi_id": 14, "profile": "1g.10gb"}]}])
    # stuck: pending with operands paused by MIG Manager.
    stuck = run.node("stuck", gfd_labels("all-balanced", "pending", extra={
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change"}), {})
    # idle: two slices held by pods, one busy, one nearly idle.
    idle = run.node("idle", gfd_labels("all-1g.10gb", "success", counts={"1g.10gb": 7}), one_g)
    dcgm_sim.add_node(idle, gpus=[{"index": 0, "model": H100, "instances": seven_1g()}])
    idle_pod = run.pod("idle-trainer", {"nvidia.com/mig-1g.10gb": "1"}, node=idle)
    busy_pod = run.pod("busy-trainer", {"nvidia.com/mig-1g.10gb": "1"}, node=idle)
    dcgm_sim.set_load(idle, 0, 7, engine=0.01, fb_used_mib=3000, pod=idle_pod.split("/")[1],
                      namespace=run.namespace)
    dcgm_sim.set_load(idle, 0, 8, engine=0.85, fb_used_mib=9000, pod=busy_pod.split("/")[1],
                      namespace=run.namespace)
    # unallocatable: a profile no node offers (an H200's 7g.141gb).
    wanting = run.pod("wants-7g", {"nvidia.com/mig-7g.141gb": "1"})
    # unallocatable too, but an H100 profile: the report suggests a layout that hosts it.
    wanting_3g = run.pod("wants-3g", {"nvidia.com/mig-3g.40gb": "1"})
    testbed.wait_for(lambda: all(
        testbed.core.read_namespaced_pod(p.split("/")[1], run.namespace).status.phase == "Running"
        for p in (idle_pod, busy_pod)), 60, "planted pods Running on %s" % idle)
    for node in (drift, stuck, idle):
        gpu_cluster.wait_labels(node, {"nvidia.com/gpu.deploy.operator-validator": "true"})
    return {"drift": drift, "stuck": stuck, "idle": idle, "idle_pod": idle_pod, "busy_pod": busy_pod,
            "wanting": wanting, "wanting_3g": wanting_3g}


def findings_of(report, kind, node=None):
    return [f for f in report["findings"] if f["kind"] == kind and (node is None or f["node"] == node)]


def test_report_names_each_planted_finding_and_changes_nothing(testbed, report_run, planted, dcgm_sim, prometheus,
                                                               tmp_path):
    server = prometheus(dict((n, dcgm_sim.target(n)) for n in (planted["drift"], planted["idle"])))
    server.wait_for_series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 11)
    time.sleep(2)  # the stuck threshold below is 1 s
    before = cluster_snapshot(testbed, report_run.selector, report_run.namespace)

    proc, report = run_report(testbed, tmp_path, {
        "gpu_report_prometheus_url": server.url, "gpu_report_label_selector": report_run.selector,
        "gpu_report_window": 60, "gpu_report_stuck_after": 1, "gpu_report_idle_below": 0.05})
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert cluster_snapshot(testbed, report_run.selector, report_run.namespace) == before, "the report changed the cluster"
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["metrics_source"] == "prometheus"

    drift = findings_of(report, "drift", planted["drift"])
    assert any("hardware holds" in f["message"] for f in drift), report["findings"]
    assert drift[0]["details"]["hardware"] == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert not findings_of(report, "drift", planted["idle"]), "a node whose hardware matches was called drifted"

    stuck = findings_of(report, "stuck", planted["stuck"])
    assert any("pending" in f["message"] for f in stuck)
    assert any("device-plugin" in f["message"] and "gpu-feature-discovery" in f["message"] for f in stuck)

    idle = findings_of(report, "idle", planted["idle"])
    assert [f["details"]["pod"] for f in idle] == [planted["idle_pod"]], idle
    idle_node = next(n for n in report["nodes"] if n["name"] == planted["idle"])
    states = dict((s["pod"], s["state"]) for s in idle_node["gpus"][0]["slices"] if s["pod"])
    assert states == {planted["idle_pod"]: "idle", planted["busy_pod"]: "busy"}
    assert idle_node["requested"] == {"nvidia.com/mig-1g.10gb": 2}

    unallocatable = [f for f in findings_of(report, "unallocatable") if f["details"]["pod"] == planted["wanting"]]
    assert unallocatable and unallocatable[0]["details"]["resource"] == "nvidia.com/mig-7g.141gb"

    suggestions = findings_of(report, "suggestion")
    hosting = [f for f in suggestions if any(g["mig_devices"].get("3g.40gb") for g in f["details"]["gpus"])]
    assert hosting and hosting[0]["details"]["feasible"] is True, suggestions
    assert hosting[0]["node"] in (planted["drift"], planted["idle"])

    totals = report["totals"]["per_resource"]["nvidia.com/mig-1g.10gb"]
    assert totals["allocatable"] == 14 and totals["requested"] == 2 and totals["idle_allocated"] == 1
    # The table printed by the playbook names the findings too.
    assert "idle" in proc.stdout and planted["idle_pod"] in proc.stdout

    # The HTML page, rendered by a real browser.
    html = tmp_path / "out" / "report.html"
    screenshot_and_check(html, tmp_path, report, planted)


def chromium():
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("headless Chromium not installed: run `make report-deps`")


def png_size(path):
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def screenshot_and_check(html, tmp_path, report, planted):
    browser = chromium()
    shot = tmp_path / "report.png"
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1600"]
    proc = subprocess.run(args + ["--screenshot=%s" % shot, html.as_uri()], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    assert png_size(shot) == (1400, 1600) and shot.stat().st_size > 20000, "blank or tiny screenshot"
    # The DOM as the browser built it: one picture per GPU, slices coloured by state, totals and findings.
    dom = subprocess.run(args + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120,
                         check=False).stdout
    gpus = sum(len(n["gpus"]) for n in report["nodes"])
    assert dom.count('<svg class="gpu"') == gpus
    assert 'data-node="%s" data-gpu="0" data-profile="1g.10gb" data-state="idle" data-pod="%s"' % (
        planted["idle"], planted["idle_pod"]) in dom
    assert 'data-state="busy" data-pod="%s"' % planted["busy_pod"] in dom
    assert dom.count('data-node="%s" data-gpu="0"' % planted["idle"]) == 7
    assert 'data-resource="nvidia.com/mig-1g.10gb"' in dom
    for kind in ("drift", "stuck", "idle", "unallocatable"):
        assert 'data-kind="%s"' % kind in dom
    page = html.read_text()
    for external in ("<script", "<link", " src=", " href=", "url(", "@import"):
        assert external not in page, "the page must be self-contained, found %r" % external


def test_direct_dcgm_endpoints_and_check_mode(testbed, report_run, planted, dcgm_sim, tmp_path):
    """No Prometheus: the exporter endpoints are read directly; check mode still reports, writes nothing."""
    endpoints = [{"url": dcgm_sim.url(planted["idle"]), "node": planted["idle"]}]
    proc, report = run_report(testbed, tmp_path, {"gpu_report_dcgm_endpoints": endpoints,
                                                  "gpu_report_label_selector": report_run.selector}, check=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report is None, "check mode wrote report.json"
    assert planted["idle_pod"] in proc.stdout and "idle" in proc.stdout

    proc, report = run_report(testbed, tmp_path, {"gpu_report_dcgm_endpoints": endpoints,
                                                  "gpu_report_label_selector": report_run.selector,
                                                  "gpu_report_fail_on": ["idle"]})
    assert report["metrics_source"] == "dcgm-exporter"
    assert [f["details"]["pod"] for f in findings_of(report, "idle")] == [planted["idle_pod"]]
    assert proc.returncode != 0 and planted["idle_pod"] in proc.stdout, "gpu_report_fail_on=[idle] did not fail"


def test_without_metrics_layout_comes_from_the_label(testbed, report_run, planted, tmp_path):
    proc, report = run_report(testbed, tmp_path, {"gpu_report_label_selector": report_run.selector})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["metrics_source"] == "none"
    node = next(n for n in report["nodes"] if n["name"] == planted["idle"])
    assert node["gpus"][0]["layout_source"] == "label"
    assert [s["profile"] for s in node["gpus"][0]["slices"]] == ["1g.10gb"] * 7
    held = sorted(s["pod"] for s in node["gpus"][0]["slices"] if s["pod"])
    assert held == sorted([planted["idle_pod"], planted["busy_pod"]])
    assert all(s["state"] in ("allocated", "free") for s in node["gpus"][0]["slices"])
    assert not findings_of(report, "idle"), "idle needs metrics; without them nothing is called idle"


def test_unreachable_prometheus_is_reported_not_hidden(testbed, report_run, planted, tmp_path):
    proc, report = run_report(testbed, tmp_path, {"gpu_report_prometheus_url": "http://127.0.0.1:9",
                                                  "gpu_report_label_selector": report_run.selector})
    assert proc.returncode == 0
    assert report["metrics_source"] == "none"
    assert "report built without metrics" in proc.stdout + proc.stderr and "127.0.0.1:9" in proc.stdout + proc.stderr


def test_schema_is_valid_and_rejects_broken_reports():
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    broken = {"schema_version": 1, "generated_at": "x", "metrics_source": "none", "options": {}, "nodes": [],
              "findings": [{"kind": "bogus", "severity": "error", "node": None, "gpu": None, "message": "",
                            "action": "", "details": {}}], "totals": {"nodes": 0, "gpus": 0, "per_resource": {}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, REPORT_SCHEMA)
    del broken["findings"][0]
    jsonschema.validate(broken, REPORT_SCHEMA)
    broken["surprise"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, REPORT_SCHEMA)
    assert json.loads(json.dumps(REPORT_SCHEMA)) == REPORT_SCHEMA
