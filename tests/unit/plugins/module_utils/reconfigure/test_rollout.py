"""The sliding window of run_rollout: order, the max_unavailable bound, and the halt after a failure.
The per-node procedure is replaced (it talks to the API server; the integration tests cover it).
Also the pure tables and messages of the rollout."""

import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import rollout


class Ctx(object):
    def ops_factory(self):
        return object()


def fake_node_steps(monkeypatch, fail=(), seconds=0.05):
    seen = {"running": 0, "peak": 0, "started": []}
    lock = threading.Lock()

    def plan_one(ctx, ops, name, target, hardware=None):
        return {"node": name, "errors": [], "current_config": "all-disabled"}

    def reconfigure_node(ctx, name, target, planned, hold_cordon=False, ops=None):
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
    assert lines[1].split() == ["n1", "A100", "all-disabled", "all-balanced", "1", "3.2s", "reconfigured"]


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
