"""Pure logic of the fleet report: findings and suggestions (helpers shared with the other report tests)."""

import datetime
import json

import jsonschema

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report
from tests.support import kube


NOW = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=report._UTC)
H100 = "NVIDIA H100 80GB HBM3"


def node(name, labels, allocatable=None, state_written="2026-12-02T11:59:00Z", unschedulable=False):
    """A GPU node whose mig.config.state label MIG Manager last wrote at ``state_written`` (managedFields)."""
    written = {"manager": "mig-manager", "time": state_written,
               "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/mig.config.state": {}}}}}
    return kube.node(name, labels=dict({"nvidia.com/gpu.present": "true"}, **labels), allocatable=allocatable or {},
                     unschedulable=unschedulable, conditions=kube.READY, metadata={"managedFields": [written]})


def h100(name, config="all-1g.10gb", state="success", counts=None, allocatable=None, gpus=1, **extra):
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": str(gpus),
              "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
              "nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state}
    for profile, count in (counts if counts is not None else {"1g.10gb": 7 * gpus}).items():
        labels["nvidia.com/mig-%s.count" % profile] = str(count)
    labels.update(extra)
    if allocatable is None:
        allocatable = {"nvidia.com/mig-1g.10gb": str(7 * gpus)}
    return node(name, labels, allocatable)


def pod(name, resources, node_name=None, phase="Running"):
    return kube.pod(name, namespace="ml", node_name=node_name, limits=resources, phase=phase)


def samples(node_name, instances, model=H100, gpu=0):
    """instances: [(gi_id, profile, engine, fb_used, pod)]"""
    out = []
    for gi_id, profile, engine, fb_used, holder in instances:
        for metric, value in ((report.METRIC_ENGINE, engine), (report.METRIC_FB_USED, fb_used)):
            out.append({"node": node_name, "gpu": gpu, "gi_id": gi_id, "profile": profile, "model": model,
                        "metric": metric, "value": value, "pod": holder})
    return out


def build(nodes, pods=(), metrics=None, **options):
    built = report.build_report(nodes, list(pods), metrics=metrics, now=NOW,
                                metrics_source="prometheus" if metrics else "none", options=options or None)
    jsonschema.validate(json.loads(json.dumps(built)), report.REPORT_SCHEMA)
    return built


def kinds(built, node_name=None):
    return sorted(f["kind"] for f in built["findings"] if node_name is None or f["node"] == node_name)


def test_consistent_node_has_no_findings():
    built = build([h100("ok")], metrics=samples("ok", [(7 + i, "1g.10gb", 0.5, 1000.0, None) for i in range(7)]))
    assert built["findings"] == []
    assert [s["state"] for s in built["nodes"][0]["gpus"][0]["slices"]] == ["free"] * 7


def test_drift_allocatable_gfd_and_hardware():
    stale = h100("stale", allocatable={"nvidia.com/mig-1g.10gb": "3"})
    built = build([stale])
    assert kinds(built) == ["drift"] and "allocatable" in built["findings"][0]["message"]

    gfd = build([h100("gfd", counts={"2g.20gb": 3})])
    assert any("GFD labels" in f["message"] for f in gfd["findings"])

    hardware = build([h100("hw")], metrics=samples("hw", [(1, "3g.40gb", 0.0, 0.0, None)]))
    found = [f for f in hardware["findings"] if "hardware holds" in f["message"]]
    assert found and found[0]["details"]["hardware"] == {"3g.40gb": 1} and found[0]["severity"] == "error"


def test_drift_is_not_reported_while_a_change_is_pending():
    built = build([h100("busy", state="pending", allocatable={})], stuck_after_s=3600)
    assert "drift" not in kinds(built)


def test_stuck_thresholds_failed_and_paused_operands():
    fresh = build([h100("fresh", state="pending")], stuck_after_s=3600)
    assert kinds(fresh) == []
    old = build([h100("old", state="pending")], stuck_after_s=30)
    assert kinds(old) == ["stuck"] and old["findings"][0]["details"]["seconds"] == 60
    # The message names the moment the state was written, not the age: it reads the same on the next run.
    assert "pending since 2026-12-02T11:59:00Z, longer than stuck_after (30s)" in old["findings"][0]["message"]
    failed = build([h100("bad", state="failed")])
    assert kinds(failed) == ["stuck"]
    paused = build([h100("paused", **{"nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change"})])
    assert "operands left paused" in paused["findings"][0]["message"]
    assert paused["nodes"][0]["state_seconds"] == 60


def test_idle_needs_a_holder_and_low_activity():
    metrics = samples("n", [(7, "1g.10gb", 0.01, 2000.0, "ml/a"), (8, "1g.10gb", 0.9, 8000.0, "ml/b")] +
                      [(9 + i, "1g.10gb", 0.0, 0.0, None) for i in range(5)])
    pods = [pod("a", {"nvidia.com/mig-1g.10gb": "1"}, "n"), pod("b", {"nvidia.com/mig-1g.10gb": "1"}, "n")]
    built = build([h100("n")], pods, metrics, idle_below=0.05)
    idle = [f for f in built["findings"] if f["kind"] == "idle"]
    assert [f["details"]["pod"] for f in idle] == ["ml/a"]
    totals = built["totals"]["per_resource"]["nvidia.com/mig-1g.10gb"]
    assert totals == {"allocatable": 7, "requested": 2, "idle_allocated": 1, "free": 5}


def test_pods_matched_by_request_without_exporter_pod_labels():
    finished = pod("done", {"nvidia.com/mig-1g.10gb": "1"}, "n", phase="Succeeded")
    pods = [pod("a", {"nvidia.com/mig-1g.10gb": "2"}, "n"), finished]
    built = build([h100("n")], pods)
    held = [s for s in built["nodes"][0]["gpus"][0]["slices"] if s["pod"]]
    assert [(s["pod"], s["pod_mapping"], s["state"]) for s in held] == [("ml/a", "by-request", "allocated")] * 2
    assert built["nodes"][0]["requested"] == {"nvidia.com/mig-1g.10gb": 2}


def test_unallocatable_demand_and_suggestion_checked_with_the_planner():
    waiting = pod("w", {"nvidia.com/mig-3g.40gb": "1"}, None, phase="Pending")
    fits = pod("x", {"nvidia.com/mig-1g.10gb": "1"}, None, phase="Pending")
    metrics = samples("n", [(7 + i, "1g.10gb", 0.3, 1000.0, "ml/h" if i == 0 else None) for i in range(7)])
    built = build([h100("n")], [waiting, fits, pod("h", {"nvidia.com/mig-1g.10gb": "1"}, "n")], metrics)
    unallocatable = [f for f in built["findings"] if f["kind"] == "unallocatable"]
    assert [f["details"]["pod"] for f in unallocatable] == ["ml/w"]
    suggestion = next(f for f in built["findings"] if f["kind"] == "suggestion")
    assert suggestion["node"] == "n" and suggestion["details"]["feasible"] is True
    layout = suggestion["details"]["gpus"][0]["mig_devices"]
    assert layout["3g.40gb"] == 1 and layout["1g.10gb"] >= 1
    config = suggestion["details"]["mig_parted_config"]["mig-configs"]["gpufleet-suggested"]
    assert config[0]["devices"] == [0] and config[0]["mig-devices"] == layout


def test_no_suggestion_without_evidence():
    built = build([h100("n")], metrics=samples("n", [(7 + i, "1g.10gb", 0.0, 0.0, None) for i in range(7)]))
    assert "suggestion" not in kinds(built)


def test_a_profile_the_model_lacks_is_one_finding_not_a_failed_report():
    metrics = samples("a", [(1, "9g.99gb", 0.5, 100, None), (2, None, 0.5, 100, None)]) + samples(
        "b", [(1, "1g.10gb", 0.01, 100, "ml/p")])
    built = build([h100("a"), h100("b")], pods=[pod("p", {"nvidia.com/mig-1g.10gb": 1}, "b")], metrics=metrics)
    unknown = [f for f in built["findings"] if "does not have" in f["message"]]
    assert [(f["node"], f["gpu"], f["details"]["profile"]) for f in unknown] == [("a", 0, "9g.99gb"), ("a", 0, "")]
    assert "without a GPU_I_PROFILE label" in unknown[1]["message"]
    assert [n["name"] for n in built["nodes"]] == ["a", "b"]
    assert "idle" in kinds(built, "b"), "the other node is still reported in full"


def test_a_gpu_count_label_no_node_has_is_one_finding_not_a_failed_report():
    broken = h100("a", **{"nvidia.com/gpu.count": "100000000"})
    built = build([broken, h100("b")])
    found = [f for f in built["findings"] if f["node"] == "a" and "nvidia.com/gpu.count" in f["message"]]
    assert [f["severity"] for f in found] == ["error"]
    assert "nvidia.com/gpu.count=100000000 is more GPUs than a node holds (at most 64 accepted)" in found[0]["message"]
    nodes = dict((n["name"], n) for n in built["nodes"])
    assert nodes["a"]["gpus"] == [] and len(nodes["b"]["gpus"]) == 1


# -- a report of no GPU node ------------------------------------------------------------------------------------

SOURCE = {"kubeconfig": "/home/me/.kube/config", "context": "kind-dev", "server": "127.0.0.1:6443",
          "label_selector": None}


def plain_node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/os": "linux"}},
            "status": {"allocatable": {"cpu": "8"}, "capacity": {"cpu": "8"}}}


def test_no_gpu_node_is_a_warning_naming_context_kubeconfig_and_server():
    built = report.build_report([plain_node("cp-1"), plain_node("worker-1")], [], now=NOW, connection=SOURCE)
    jsonschema.validate(built, report.REPORT_SCHEMA)
    assert [(f["kind"], f["severity"], f["node"]) for f in built["findings"]] == [("empty", "warning", None)]
    finding = built["findings"][0]
    assert finding["message"] == (
        "no GPU nodes in context kind-dev of kubeconfig /home/me/.kube/config (API server 127.0.0.1:6443): 2 nodes, "
        "none with GPU labels (nvidia.com/gpu.present, nvidia.com/gpu.product) or GPU resources")
    assert "kubeconfig and context" in finding["action"]
    assert finding["details"] == dict(SOURCE, nodes_listed=2)
    assert built["totals"]["nodes"] == 0


def test_no_gpu_node_names_the_selector_and_an_empty_node_list():
    selected = report.build_report([], [], now=NOW, connection=dict(SOURCE, label_selector="pool=gpu"))
    assert selected["findings"][0]["message"].endswith(": no node matches label selector pool=gpu")
    assert "label selector matches" in selected["findings"][0]["action"]
    empty = report.build_report([], [], now=NOW, connection=dict(SOURCE, context=None))
    assert empty["findings"][0]["message"] == ("no GPU nodes in the current context of kubeconfig /home/me/.kube/config "
                                               "(API server 127.0.0.1:6443): the API server lists no nodes")
    # Without a kubeconfig (host and token, or the in-cluster account) the server is still named.
    direct = report.build_report([], [], now=NOW, connection={"server": "10.0.0.1:443"})
    assert direct["findings"][0]["message"].startswith("no GPU nodes in the connection given (no kubeconfig) "
                                                       "(API server 10.0.0.1:443)")


def test_a_gpu_node_means_no_empty_finding():
    assert "empty" not in kinds(build([h100("ok")]))


# -- what a report says about the fleet, apart from its time -----------------------------------------------------

def test_content_view_leaves_out_only_what_time_changes():
    earlier = build([h100("old", state="pending")], stuck_after_s=30)
    later = report.build_report([h100("old", state="pending")], [], now=NOW + datetime.timedelta(seconds=90),
                                options={"stuck_after_s": 30})
    assert earlier != later
    assert earlier["generated_at"] != later["generated_at"]
    assert earlier["nodes"][0]["state_seconds"] == 60 and later["nodes"][0]["state_seconds"] == 150
    assert report.content_view(earlier) == report.content_view(later)
    view = report.content_view(earlier)
    assert "generated_at" not in view and "state_seconds" not in view["nodes"][0]
    assert "seconds" not in view["findings"][0]["details"] and earlier["findings"][0]["details"]["seconds"] == 60


def test_keep_unchanged_returns_the_previous_report_when_only_time_differs():
    earlier = json.loads(json.dumps(build([h100("n", state="pending")], stuck_after_s=30)))
    later = report.build_report([h100("n", state="pending")], [], now=NOW + datetime.timedelta(minutes=5),
                                options={"stuck_after_s": 30})
    kept = report.keep_unchanged(later, earlier)
    assert kept == earlier and kept["generated_at"] == "2026-12-02T12:00:00Z"
    assert list(kept) == sorted(kept), "keys in order"


def test_keep_unchanged_returns_the_new_report_when_the_fleet_changed():
    earlier = json.loads(json.dumps(build([h100("n")])))
    changed = report.build_report([h100("n", allocatable={"nvidia.com/mig-1g.10gb": "3"})], [],
                                  now=NOW + datetime.timedelta(minutes=5))
    assert report.keep_unchanged(changed, earlier)["generated_at"] == "2026-12-02T12:05:00Z"
    # A metric reading is content too.
    metrics = samples("n", [(7 + i, "1g.10gb", 0.5, 1000.0, None) for i in range(7)])
    with_metrics = report.build_report([h100("n")], [], metrics=metrics, now=NOW)
    moved = report.build_report([h100("n")], [], now=NOW + datetime.timedelta(minutes=5),
                                metrics=samples("n", [(7 + i, "1g.10gb", 0.6, 1000.0, None) for i in range(7)]))
    assert report.keep_unchanged(moved, with_metrics)["generated_at"] == "2026-12-02T12:05:00Z"


def test_keep_unchanged_without_a_usable_previous_report():
    fresh = build([h100("n")])
    for previous in (None, {}, {"schema_version": 0}, dict(fresh, schema_version=2),
                     {"schema_version": 1, "nodes": ["not a node"], "findings": []},
                     {"schema_version": 1, "nodes": [], "findings": [1]}):
        assert report.keep_unchanged(fresh, previous) == fresh
    assert list(report.keep_unchanged(fresh, None)) == sorted(fresh)
