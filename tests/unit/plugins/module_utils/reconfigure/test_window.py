"""The sliding window: order, the max_unavailable bound, the halt after a failure, the room check before each
node, and the Timeline observer. The node's read and procedure are replaced (they talk to the API server; the
integration tests cover them)."""

import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import preflight, timeline, window


class Ctx(object):
    progress = None  # tests that follow the progress record set a progress.Progress
    report = preflight.Context.report
    report_row = preflight.Context.report_row

    def ops_factory(self):
        return object()


def fake_node_steps(monkeypatch, fail=(), seconds=0.05):
    seen = {"running": 0, "peak": 0, "started": []}
    lock = threading.Lock()

    def plan_one(ctx, snap, name, target, hardware=None, keep_drain=False):
        return {"node": name, "errors": [], "current_config": "all-disabled"}

    def run_node(ctx, name, target, planned, hold_cordon=False, ops=None, drain_plan=None, pods=None):
        with lock:
            seen["running"] += 1
            seen["peak"] = max(seen["peak"], seen["running"])
            seen["started"].append(name)
        time.sleep(seconds)
        with lock:
            seen["running"] -= 1
        result = "failed" if name in fail else ("verified" if hold_cordon else "reconfigured")
        return {"node": name, "result": result}

    monkeypatch.setattr(window.snapshot, "read_node", lambda ops, ctx, name: window.snapshot.Snapshot("gpu-operator"))
    monkeypatch.setattr(window.preflight, "plan_one", plan_one)
    monkeypatch.setattr(window.procedure, "run_node", run_node)
    return seen


def run_window(ctx, names, width, observer=None, **kwargs):
    """(rows, plans) of the window over ``names``, all to all-1g.10gb."""
    slots = window.Window(ctx, [(n, "all-1g.10gb") for n in names], width, observer=observer, **kwargs).run()
    return [s.row for s in slots], [s.plan for s in slots if s.plan is not None]


def test_window_keeps_order_and_never_exceeds_max_unavailable(monkeypatch):
    seen = fake_node_steps(monkeypatch)
    names = ["n%02d" % i for i in range(12)]
    rows, plans = run_window(Ctx(), names, 3)
    assert [r["node"] for r in rows] == names and [p["node"] for p in plans] == names
    assert all(r["result"] == "reconfigured" for r in rows)
    assert seen["peak"] == 3
    assert seen["started"][:3] == names[:3]


def test_rows_say_when_their_slot_took_them_and_the_timeline_adds_up(monkeypatch):
    fake_node_steps(monkeypatch, seconds=0.2)
    names = ["n%d" % i for i in range(4)]
    observer = timeline.Timeline(t0=time.monotonic() - 5.0)  # the module started 5 s before the nodes
    observer.step_started("run nodes")
    rows = run_window(Ctx(), names, 2, observer=observer)[0]
    observer.step_finished("run nodes")
    # Two waves of two: the second wave's slots open when the first wave's nodes finish, not before.
    first, second = rows[:2], rows[2:]
    assert all(5.0 <= r["started_s"] < 5.15 for r in first), rows
    assert all(r["finished_s"] - r["started_s"] >= 0.198 for r in rows)  # each rounded to ms
    assert min(r["started_s"] for r in second) >= min(r["finished_s"] for r in first)
    assert all(set(r["overhead_s"]) == {"plan", "around_steps"} for r in rows)
    figures = observer.figures()
    assert set(figures) == {"prepare_s", "pods_listed_s", "nodes_s", "follow_s", "finish_s"}
    assert 5.0 <= figures["prepare_s"] < 5.15 and figures["follow_s"] == 0.0
    assert 0.4 <= figures["nodes_s"] < 0.4 + 0.3
    assert abs(max(r["finished_s"] for r in rows) - min(r["started_s"] for r in rows) - figures["nodes_s"]) < 0.05


def test_without_an_observer_rows_carry_no_timing(monkeypatch):
    fake_node_steps(monkeypatch)
    rows = run_window(Ctx(), ["a", "b"], 2)[0]
    assert not any(set(r) & {"started_s", "finished_s", "overhead_s"} for r in rows)


def test_no_node_starts_after_a_failure(monkeypatch):
    seen = fake_node_steps(monkeypatch, fail={"n01"})
    names = ["n%02d" % i for i in range(8)]
    rows, plans = run_window(Ctx(), names, 2)
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
    rows = run_window(Ctx(), ["a", "b"], None, hold_cordon=True)[0]
    assert [r["result"] for r in rows] == ["verified", "verified"]


def test_a_node_whose_pods_no_longer_fit_is_not_started_and_the_others_go_on(monkeypatch):
    seen = fake_node_steps(monkeypatch)

    def plan_one(ctx, snap, name, target, hardware=None, keep_drain=False):
        return {"node": name, "errors": [], "current_config": "all-disabled", "model": "H100",
                "pods_to_evict": ["w/" + name]}

    monkeypatch.setattr(window.preflight, "plan_one", plan_one)
    asked = []

    def room_check(ops, planned):
        asked.append(planned["node"])
        return ["pods to evict ask for 1 nvidia.com/gpu in all, but after the change the cluster has room for 0: "
                "w/b (1) would stay Pending"] if planned["node"] == "b" else []

    rows, plans = run_window(Ctx(), ["a", "b", "c"], 1, room=room_check)
    assert asked == ["a", "b", "c"] and seen["started"] == ["a", "c"]
    assert [r["result"] for r in rows] == ["reconfigured", "not started", "reconfigured"]
    assert rows[1]["message"].startswith("node b not started, nothing was changed there: pods to evict ask for 1 ")
    assert rows[1]["before"] == rows[1]["after"] == "all-disabled" and rows[1]["evicted"] == []


def test_each_node_outcome_reaches_the_progress_record(monkeypatch, tmp_path):
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import progress
    fake_node_steps(monkeypatch, fail=("b",))
    ctx = Ctx()
    ctx.progress = progress.Progress(str(tmp_path / "p.json"))
    run_window(ctx, ["a", "b", "c"], 1)
    steps = dict((n["node"], n["step"]) for n in ctx.progress.record()["nodes"])
    assert steps == {"a": "done", "b": "failed", "c": "not started"}


def test_an_unexpected_error_in_a_node_is_its_failed_row_and_halts(monkeypatch):
    """A ValueError from the node's procedure (a response that is not JSON, say) or from planning it: that node's
    row is failed and names the error, the rows of the others are kept, and no node starts after it."""
    seen = fake_node_steps(monkeypatch)
    run_node = window.procedure.run_node

    def broken_run_node(ctx, name, target, planned, **kwargs):
        if name == "n1":
            raise ValueError("Expecting value: line 1 column 1 (char 0)")
        return run_node(ctx, name, target, planned, **kwargs)

    monkeypatch.setattr(window.procedure, "run_node", broken_run_node)
    rows = run_window(Ctx(), ["n0", "n1", "n2", "n3"], 1)[0]
    assert [r["node"] for r in rows] == ["n0", "n1", "n2", "n3"]
    assert [r["result"] for r in rows] == ["reconfigured", "failed", "not started", "not started"]
    assert "ValueError: Expecting value" in rows[1]["message"] and "n1" in rows[1]["message"]
    assert "halted after n1 failed" in rows[2]["message"]
    assert seen["started"] == ["n0"]


def test_an_unexpected_error_while_planning_a_node_changes_nothing_there(monkeypatch):
    fake_node_steps(monkeypatch)

    def broken_plan(ctx, snap, name, target, hardware=None, keep_drain=False):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(window.preflight, "plan_one", broken_plan)
    rows = run_window(Ctx(), ["n0", "n1"], 2)[0]
    assert rows[0]["result"] == "failed" and "nothing was changed there" in rows[0]["message"], rows[0]
    assert "TypeError" in rows[0]["message"]


class Lease(object):
    """A LeaseRenewer's view as the window reads it: lost (taken or deleted) or lapsed (renewals failing)."""

    class lock(object):
        namespace, name, duration_s = "gpu-operator", "gpufleet-mig-rollout", 0.6

    def __init__(self, error=None, lapsed_until=None):
        self.error = error
        self.lapsed_until = lapsed_until  # monotonic time a failing renewal lands again (None: never lapsed)

    def lapsed_s(self):
        return 1.0 if self.lapsed_until is not None and time.monotonic() < self.lapsed_until else 0.0

    def lost(self):
        return self.error or ("rollout lock gpu-operator/gpufleet-mig-rollout not renewed" if self.lapsed_s() else None)


def test_a_lost_lease_starts_no_further_node(monkeypatch):
    seen = fake_node_steps(monkeypatch)
    lease = Lease()
    calls = {"n": 0}
    run_node = window.procedure.run_node

    def losing(ctx, name, target, planned, **kwargs):
        calls["n"] += 1
        lease.error = "lost rollout lock gpu-operator/gpufleet-mig-rollout (holder now rollout-b)"  # while n0 runs
        return run_node(ctx, name, target, planned, **kwargs)

    monkeypatch.setattr(window.procedure, "run_node", losing)
    rows = run_window(Ctx(), ["n0", "n1", "n2"], 1, lease=lease)[0]
    assert [r["result"] for r in rows] == ["reconfigured", "not started", "not started"]  # n0 in flight: finished
    assert "holder now rollout-b" in rows[1]["message"] and "nothing was changed there" in rows[1]["message"]
    assert seen["started"] == ["n0"]


def test_a_lapse_that_ends_within_the_lease_duration_only_delays_the_next_node(monkeypatch):
    seen = fake_node_steps(monkeypatch)
    lease = Lease(lapsed_until=time.monotonic() + 0.3)
    started = time.monotonic()
    rows = run_window(Ctx(), ["n0"], 1, lease=lease)[0]
    assert rows[0]["result"] == "reconfigured" and seen["started"] == ["n0"]
    assert time.monotonic() - started >= 0.3


def test_a_lapse_past_one_more_duration_starts_nothing(monkeypatch):
    seen = fake_node_steps(monkeypatch)
    rows = run_window(Ctx(), ["n0", "n1"], 2, lease=Lease(lapsed_until=time.monotonic() + 60))[0]
    assert [r["result"] for r in rows] == ["not started", "not started"] and seen["started"] == []
    assert all("not renewed" in r["message"] for r in rows)


def test_after_a_cancel_no_node_starts_and_the_ones_in_flight_finish(monkeypatch):
    cancelled = threading.Event()
    seen = fake_node_steps(monkeypatch, seconds=0.2)
    run_node = window.procedure.run_node

    both_running = threading.Barrier(2, timeout=5)

    def cancelling(ctx, name, target, planned, **kwargs):
        both_running.wait()
        cancelled.set()  # Ctrl-C while the first two nodes run
        return run_node(ctx, name, target, planned, **kwargs)

    monkeypatch.setattr(window.procedure, "run_node", cancelling)
    rows = run_window(Ctx(), ["n0", "n1", "n2", "n3"], 2, cancelled=cancelled)[0]
    assert [r["result"] for r in rows[:2]] == ["reconfigured", "reconfigured"]
    assert [r["result"] for r in rows[2:]] == ["not started", "not started"]
    assert all("cancelled" in r["message"] for r in rows[2:])
    assert sorted(seen["started"]) == ["n0", "n1"]
