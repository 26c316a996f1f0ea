"""The report on nodes run by the simulated GPU Operator (agents + simulated NVML): the exporter reads the same
simulated hardware MIG Manager configured. A MIG layout lost at a reboot (MIG devices do not persist) while the
label still says success is the drift users find only when pods stay Pending (user-pain.md §3.3)."""

from tests.testbed.gpusim import hoststate

from .conftest import run_report


def gpu_allocatable(testbed, name):
    allocatable = testbed.core.read_node(name).status.allocatable or {}
    return dict((k, int(v)) for k, v in allocatable.items() if k.startswith("nvidia.com/") and v != "0")


def drift_for(report, name):
    return [f for f in report["findings"] if f["kind"] == "drift" and f["node"] == name]


def test_layout_lost_at_reboot_is_reported_as_drift(testbed, gpu_cluster, add_gpu_node, dcgm_sim, tmp_path):
    name = add_gpu_node("rep-reboot", "H100-80GB-HBM3", 1)
    testbed.wait_for(lambda: gpu_allocatable(testbed, name).get("nvidia.com/gpu") == 1, 90, "GPU on %s" % name)
    testbed.kubectl("label", "node", name, "nvidia.com/mig.config=all-1g.10gb", "--overwrite")
    gpu_cluster.wait_state(name, "success", timeout=120)
    testbed.wait_for(lambda: gpu_allocatable(testbed, name) == {"nvidia.com/mig-1g.10gb": 7}, 60,
                     "7 x 1g.10gb advertised on %s" % name)
    dcgm_sim.add_node(name, state_path=str(gpu_cluster.state_path(name)))
    endpoints = [{"url": dcgm_sim.url(name), "node": name}]

    proc, healthy = run_report(testbed, tmp_path / "before", {"gpu_report_dcgm_endpoints": endpoints})
    assert proc.returncode == 0, proc.stdout[-4000:]
    node = next(n for n in healthy["nodes"] if n["name"] == name)
    assert node["gpus"][0]["layout_source"] == "dcgm"
    assert sorted(s["gi_id"] for s in node["gpus"][0]["slices"]) == sorted(
        gi["id"] for gi in hoststate.summary(gpu_cluster.state_path(name))["gpus"][0]["gpu_instances"])
    assert drift_for(healthy, name) == [], drift_for(healthy, name)

    # Discovery finds the operator's dcgm-exporter pod on the node; kwok's pod IPs lead nowhere, so the report
    # says which endpoint failed instead of pretending there were no metrics.
    def exporter_ip():
        pods = testbed.core.list_pod_for_all_namespaces(
            label_selector="app=nvidia-dcgm-exporter", field_selector="spec.nodeName=%s" % name).items
        running = [p for p in pods if p.status.phase == "Running" and p.status.pod_ip]
        return running[0].status.pod_ip if running else None

    testbed.wait_for(exporter_ip, 60, "the dcgm-exporter operand pod Running on %s" % name)
    discover = {"gpu_report_dcgm_discover": True, "gpu_report_metrics_timeout": 2}
    proc, discovered = run_report(testbed, tmp_path / "discover", discover)
    assert proc.returncode == 0, proc.stdout[-4000:]
    output = proc.stdout + proc.stderr
    assert "%s:9400/metrics (node %s) failed" % (exporter_ip(), name) in output, output[-3000:]
    assert discovered["metrics_source"] in ("none", "dcgm-exporter")

    hoststate.reboot(gpu_cluster.state_path(name))  # MIG devices are gone; the label still says success
    proc, after = run_report(testbed, tmp_path / "after", {"gpu_report_dcgm_endpoints": endpoints})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert testbed.core.read_node(name).metadata.labels["nvidia.com/mig.config.state"] == "success"
    drift = drift_for(after, name)
    assert any("hardware holds no MIG instances" in f["message"] and "all-1g.10gb" in f["message"]
               for f in drift), after["findings"]
