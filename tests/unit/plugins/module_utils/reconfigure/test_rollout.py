"""The sliding window of run_rollout: order, the max_unavailable bound, and the halt after a failure.
The per-node procedure is replaced (it talks to the API server; the integration tests cover it).
Also the pure tables and messages of the rollout."""

import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import rollout


class Ctx(object):
    progress = None  # tests that follow the progress record set a progress.Progress
    report = rollout.Context.report

    def ops_factory(self):
        return object()


def fake_node_steps(monkeypatch, fail=(), seconds=0.05):
    seen = {"running": 0, "peak": 0, "started": []}
    lock = threading.Lock()

    def plan_one(ctx, ops, name, target, hardware=None, keep_drain=False):
        return {"node": name, "errors": [], "current_config": "all-disabled"}

    def reconfigure_node(ctx, name, target, planned, hold_cordon=False, ops=None, drain_plan=None):
        with lock:
            seen["running"] += 1
            seen["peak"] = max(seen["peak"], seen["running"])
            seen["started"].append(name)
        time.sleep(seconds)
        with lock:
            seen["running"] -= 1
        result = "failed" if name in fail else ("verified" if hold_cordon else "reconfigured")
        return {"node": name, "result": result}

    monkeypatch.setattr(rollout, "plan_one", plan_one)
    monkeypatch.setattr(rollout, "reconfigure_node", reconfigure_node)
    return seen


def test_window_keeps_order_and_never_exceeds_max_unavailable(monkeypatch):
    seen = fake_node_steps(monkeypatch)
    names = ["n%02d" % i for i in range(12)]
    rows, plans = rollout.run_rollout(Ctx(), names, "all-1g.10gb", window=3)
    assert [r["node"] for r in rows] == names and [p["node"] for p in plans] == names
    assert all(r["result"] == "reconfigured" for r in rows)
    assert seen["peak"] == 3
    assert seen["started"][:3] == names[:3]


def test_rows_say_when_their_slot_took_them_and_the_timeline_adds_up(monkeypatch):
    fake_node_steps(monkeypatch, seconds=0.2)
    names = ["n%d" % i for i in range(4)]
    timeline = {}
    t0 = time.monotonic() - 5.0  # the module started 5 s before the nodes
    rows = rollout.run_rollout(Ctx(), names, "all-1g.10gb", window=2, timeline=timeline, t0=t0)[0]
    # Two waves of two: the second wave's slots open when the first wave's nodes finish, not before.
    first, second = rows[:2], rows[2:]
    assert all(5.0 <= r["started_s"] < 5.15 for r in first), rows
    assert all(r["finished_s"] - r["started_s"] >= 0.198 for r in rows)  # each rounded to ms
    assert min(r["started_s"] for r in second) >= min(r["finished_s"] for r in first)
    assert set(timeline) == {"pods_listed_s", "nodes_s", "follow_s"}
    assert 0.4 <= timeline["nodes_s"] < 0.4 + 0.3
    assert abs(max(r["finished_s"] for r in rows) - min(r["started_s"] for r in rows) - timeline["nodes_s"]) < 0.05


def test_no_node_starts_after_a_failure(monkeypatch):
    seen = fake_node_steps(monkeypatch, fail={"n01"})
    names = ["n%02d" % i for i in range(8)]
    rows, plans = rollout.run_rollout(Ctx(), names, "all-1g.10gb", window=2)
    by_node = dict((r["node"], r) for r in rows)
    assert by_node["n01"]["result"] == "failed"
    # n00 and n01 ran together; at most one more slot opened before n01 failed (n00 finishing first).
    assert len(seen["started"]) <= 3
    not_started = [n for n in names if by_node[n]["result"] == "not started"]
    assert not_started == names[len(seen["started"]):]
    assert all("halted after n01 failed" in by_node[n]["message"] for n in not_started)
    assert sorted(p["node"] for p in plans) == sorted(seen["started"])


def test_hold_cordon_reports_verified(monkeypatch):
    fake_node_steps(monkeypatch)
    rows = rollout.run_rollout(Ctx(), ["a", "b"], "all-1g.10gb", window=None, hold_cordon=True)[0]
    assert [r["result"] for r in rows] == ["verified", "verified"]


def test_tables():
    assert rollout.layout_text([{"1g.10gb": 2, "2g.20gb": 1}] * 2 + [None]) == \
        "2x[1g.10gb:2 2g.20gb:1], 1xdisabled"
    lines = rollout.summary_table([{"node": "n1", "model": "A100", "before": "all-disabled", "after": "all-balanced",
                                    "evicted": ["a/b"], "duration_s": 3.21, "result": "reconfigured"}])
    assert lines[0].split() == list(rollout.SUMMARY_COLUMNS)
    assert lines[1].split() == ["n1", "A100", "all-disabled", "all-balanced", "1", "-", "3.2s", "reconfigured"]


def test_rollback_summary_says_how_the_rollback_ended():
    assert rollout.rollback_summary({"verified": True, "config": "all-disabled", "result": "success"}) == \
        "back at all-disabled, verified"
    assert rollout.rollback_summary({"verified": False, "result": "skipped",
                                     "message": "no previous config recorded on node n1"}) == \
        "no previous config recorded on node n1"
    assert rollout.rollback_summary({"verified": False, "config": "all-disabled", "result": "failed"}) == \
        "all-disabled ended failed"
    assert rollout.rollback_summary({"verified": False, "config": "all-disabled", "result": "success",
                                     "mismatches": ["nvidia.com/gpu: want 1, have 0"]}) == \
        "all-disabled ended success but nvidia.com/gpu: want 1, have 0"


def test_plan_diff_shows_each_node_to_change_with_its_layout_and_pods():
    plans = [
        {"node": "a", "errors": [], "at_target": False, "current_config": "all-disabled", "target_config": "all-balanced",
         "current": "2x whole", "target": "2x [1g.10gb x2, 2g.20gb, 3g.40gb]", "pods_to_evict": ["ns/p1", "ns/p2"]},
        {"node": "b", "errors": [], "at_target": True, "current_config": "all-balanced", "target_config": "all-balanced"},
        {"node": "c", "errors": ["node c: bad"], "target_config": "all-balanced"},
        {"node": "d", "errors": [], "at_target": False, "current_config": None, "target_config": "all-balanced",
         "current": "1x whole", "target": "1x [7g.80gb]", "pods_to_evict": []},
    ]
    diff = rollout.plan_diff(plans)
    assert diff["before"] == ("a: nvidia.com/mig.config=all-disabled\n  layout: 2x whole\n"
                              "d: nvidia.com/mig.config=unset\n  layout: 1x whole\n")
    assert diff["after"] == ("a: nvidia.com/mig.config=all-balanced\n  layout: 2x [1g.10gb x2, 2g.20gb, 3g.40gb]\n"
                             "  evicts: ns/p1, ns/p2\n"
                             "d: nvidia.com/mig.config=all-balanced\n  layout: 1x [7g.80gb]\n  evicts: none\n")


def plan_entry(node, **extra):
    entry = {"node": node, "errors": [], "model": "NVIDIA H100 80GB HBM3", "current": "all-disabled (no MIG devices)",
             "target": "2x[1g.10gb:2 2g.20gb:1 3g.40gb:1]", "pods_to_evict": ["w/a", "w/b"],
             "blocking_budgets": ["w/pdb (allows 0, needs 1)"], "reset_or_reboot": "GPU reset"}
    entry.update(extra)
    return entry


def column_starts(line):
    """Where each column starts: after a run of two or more spaces (cells hold no plain space)."""
    import re
    return [0] + [m.end() for m in re.finditer(r"  +", line)]


def test_plan_table_is_one_aligned_line_per_row():
    entries = [plan_entry("gpu-node-1"), plan_entry("n2", at_target=True, pods_to_evict=[], blocking_budgets=[],
                                                    reset_or_reboot="none (layout only)"),
               plan_entry("a-much-longer-node-name", errors=["bad"], model=None)]
    lines = rollout.plan_table(entries)
    assert len(lines) == 4 and not any("\n" in line for line in lines)
    assert lines[0] == ("node                     model                  current                        "
                        "target                             evict  budgets                    reset/reboot        status")
    starts = column_starts(lines[0])
    assert len(starts) == len(rollout.PLAN_COLUMNS)
    for line in lines[1:]:
        assert column_starts(line) == starts[:len(column_starts(line))], line  # same columns, widths from content
    nbsp = rollout.NO_BREAK_SPACE
    assert lines[1].split("  ")[0] == "gpu-node-1"
    assert lines[1][starts[1]:].startswith("NVIDIA%sH100%s80GB%sHBM3" % (nbsp, nbsp, nbsp))
    assert lines[1][starts[-2]:].startswith("GPU%sreset" % nbsp) and lines[1].endswith("change")
    assert lines[2].endswith("at%starget" % nbsp) and lines[3].endswith("INVALID")
    assert lines[3][starts[1]:].startswith("?  ")
    # Spaces in cells print as spaces (no-break); splitting on whitespace still gives the words.
    assert lines[1][starts[2]:starts[3]].rstrip().replace(nbsp, " ") == "all-disabled (no MIG devices)"


def test_tables_print_one_line_per_row_in_ansible_yaml_output():
    """ansible.cfg (and AWX) print results as YAML, which folds a plain line at a single space past 80 columns."""
    import yaml

    lines = rollout.plan_table([plan_entry("gpu-node-%d" % i) for i in range(3)]) + rollout.summary_table([
        {"node": "gpu-node-1", "model": "NVIDIA H100 80GB HBM3", "before": "all-disabled", "after": "all-balanced",
         "evicted": ["a/b"], "duration_s": 3.21, "result": "not started"}])
    assert all(len(line) > 80 for line in lines[:4])
    dumped = yaml.dump({"msg": lines}, default_flow_style=False, allow_unicode=True, indent=4).splitlines()
    assert dumped[1:] == ["-   " + line for line in lines] or dumped[1:] == ["- " + line for line in lines], dumped


def test_a_node_whose_pods_no_longer_fit_is_not_started_and_the_others_go_on(monkeypatch):
    seen = fake_node_steps(monkeypatch)

    def plan_one(ctx, ops, name, target, hardware=None, keep_drain=False):
        return {"node": name, "errors": [], "current_config": "all-disabled", "model": "H100",
                "pods_to_evict": ["w/" + name]}

    monkeypatch.setattr(rollout, "plan_one", plan_one)
    asked = []

    def room_check(ops, planned):
        asked.append(planned["node"])
        return ["pods to evict ask for 1 nvidia.com/gpu in all, but after the change the cluster has room for 0: "
                "w/b (1) would stay Pending"] if planned["node"] == "b" else []

    rows, plans = rollout.run_rollout(Ctx(), ["a", "b", "c"], "all-1g.10gb", window=1, room_check=room_check)
    assert asked == ["a", "b", "c"] and seen["started"] == ["a", "c"]
    assert [r["result"] for r in rows] == ["reconfigured", "not started", "reconfigured"]
    assert rows[1]["message"].startswith("node b not started, nothing was changed there: pods to evict ask for 1 ")
    assert rows[1]["before"] == rows[1]["after"] == "all-disabled" and rows[1]["evicted"] == []


def test_each_node_outcome_reaches_the_progress_record(monkeypatch, tmp_path):
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import progress
    fake_node_steps(monkeypatch, fail=("b",))
    ctx = Ctx()
    ctx.progress = progress.Progress(str(tmp_path / "p.json"))
    rollout.run_rollout(ctx, ["a", "b", "c"], "all-balanced", window=1)
    steps = dict((n["node"], n["step"]) for n in ctx.progress.record()["nodes"])
    assert steps == {"a": "done", "b": "failed", "c": "not started"}


class CountingOps(object):
    """Records each KubeOps read FleetSnapshot makes (the real reads are covered by the integration tests)."""

    def __init__(self, forbid_configmap_list=False):
        self.calls = []
        self.forbid = forbid_configmap_list

    def list_nodes(self, label_selector=None, managed_fields=True):
        self.calls.append("list_nodes")
        return {"items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}

    def list_pods(self):
        self.calls.append("list_pods")
        return {"items": [{"metadata": {"name": "p1", "namespace": "w"}, "spec": {"nodeName": "n1"}},
                          {"metadata": {"name": "p2", "namespace": "w"}, "spec": {"nodeName": "n2"}},
                          {"metadata": {"name": "p3", "namespace": "w"}, "spec": {}}]}

    def list_configmaps(self, namespace):
        self.calls.append("list_configmaps")
        if self.forbid:
            raise rollout.ApiException(status=403, reason="Forbidden")
        return {"items": [{"metadata": {"name": "n1-mig-config"}, "data": {"config.yaml": "x"}}]}

    def get_configmap(self, namespace, name):
        self.calls.append("get_configmap %s/%s" % (namespace, name))
        return None

    def list_pdbs(self, namespace):
        self.calls.append("list_pdbs %s" % namespace)
        return {"items": []}


def test_fleet_snapshot_answers_per_node_reads_from_three_lists():
    ops = CountingOps()
    snap = rollout.FleetSnapshot(ops, "gpu-operator")
    assert snap.get_node("n2")["metadata"]["name"] == "n2"
    assert [p["metadata"]["name"] for p in snap.list_pods_on_node("n1")["items"]] == ["p1"]
    assert snap.list_pods_on_node("n3")["items"] == []
    assert snap.get_configmap("gpu-operator", "n1-mig-config")["data"] == {"config.yaml": "x"}
    assert snap.get_configmap("gpu-operator", "n2-mig-config") is None
    snap.list_pdbs("w")
    snap.list_pdbs("w")
    assert ops.calls == ["list_nodes", "list_pods", "list_configmaps", "list_pdbs w"]
    try:
        snap.get_node("gone")
    except rollout.ApiException as exc:
        assert exc.status == 404
    else:
        raise AssertionError("a node missing from the snapshot must read as 404")


def test_fleet_snapshot_falls_back_to_get_when_configmaps_cannot_be_listed():
    ops = CountingOps(forbid_configmap_list=True)
    snap = rollout.FleetSnapshot(ops, "gpu-operator")
    assert snap.get_configmap("gpu-operator", "n1-mig-config") is None
    assert ops.calls[-1] == "get_configmap gpu-operator/n1-mig-config"
