"""The rollout's progress record, the lines printed from it, and the Events posted on the nodes."""

import json
import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import progress


class Clock(object):
    def __init__(self, start=1000.0):
        self.now = start

    def __call__(self):
        return self.now


class Events(object):
    def __init__(self, fail=None):
        self.posted = []
        self.fail = fail

    def create_event(self, namespace, body):
        if self.fail:
            raise self.fail
        self.posted.append((namespace, body))
        return body


class Forbidden(Exception):
    status = 403
    reason = "Forbidden"


def test_record_is_replaced_with_each_step_and_lines_show_only_changes(tmp_path):
    path = tmp_path / "step-0.json"
    clock = Clock()
    tracker = progress.Progress(str(path), config="all-balanced", clock=clock, write_interval=0)
    assert json.loads(path.read_text())["nodes"] == []
    tracker.step("gpu-a", "draining", "all-disabled -> all-balanced")
    first = json.loads(path.read_text())
    clock.now += 7
    tracker.step("gpu-a", "pending")
    tracker.step("gpu-a", "pending")  # the same step again is not a change
    clock.now += 20
    tracker.step("gpu-a", "done", "all-disabled -> all-balanced, verified")
    tracker.finish()
    last = json.loads(path.read_text())
    assert last["finished"] is True and last["config"] == "all-balanced"
    node = last["nodes"][0]
    assert [s for _t, s in node["history"]] == ["draining", "pending", "done"] and node["elapsed_s"] == 27.0
    assert not list(tmp_path.glob(".progress-*")), "temporary files left behind"

    lines = progress.progress_lines(first, last)
    assert [line.split()[1:4] for line in lines] == [["gpu-a", "pending", "+7s"], ["gpu-a", "done", "+27s"]]
    assert lines[-1].endswith("all-disabled -> all-balanced, verified")
    assert len(progress.progress_lines(None, last)) == 3 and progress.progress_lines(last, last) == []


def test_lines_never_contain_a_brace():
    record = {"nodes": [{"node": "n", "started": 0.0, "step": "failed", "message": "x {y}", "history": [[1.0, "failed"]]}]}
    assert "{" not in progress.progress_lines(None, record)[0]


def test_events_per_step_on_the_node_in_namespace_default():
    events = Events()
    tracker = progress.Progress(None, events, clock=Clock())
    for step in ("draining", "labelled", "pending", "rebooting", "applied", "verifying", "done"):
        tracker.step("gpu-a", step, step + " message")
    tracker.step("gpu-b", "draining")
    tracker.step("gpu-b", "failed", "node gpu-b: MIG Manager reported failed")
    tracker.flush()  # posted by a background thread, in the order of the steps
    reasons = [(b["involvedObject"]["name"], b["reason"], b["type"]) for _ns, b in events.posted]
    assert reasons == [("gpu-a", "MigReconfigureDraining", "Normal"), ("gpu-a", "MigReconfigureVerified", "Normal"),
                       ("gpu-b", "MigReconfigureDraining", "Normal"), ("gpu-b", "MigReconfigureFailed", "Warning")]
    namespace, body = events.posted[-1]
    assert namespace == "default" and body["metadata"]["namespace"] == "default"
    assert body["involvedObject"]["kind"] == "Node" and body["source"] == {"component": "gpufleet"}
    assert body["message"] == "node gpu-b: MIG Manager reported failed" and tracker.events_posted == 4


def test_an_event_that_cannot_be_posted_is_kept_as_an_error_not_raised():
    tracker = progress.Progress(None, Events(fail=Forbidden("no")), clock=Clock())
    tracker.step("gpu-a", "draining")
    tracker.step("gpu-b", "draining")
    tracker.flush()
    assert tracker.events_posted == 0
    assert tracker.event_errors == ["Event MigReconfigureDraining on node gpu-a not posted: HTTP 403 Forbidden"]


def test_threads_report_concurrently(tmp_path):
    path = tmp_path / "p.json"
    tracker = progress.Progress(str(path), write_interval=0)
    threads = [threading.Thread(target=lambda i=i: [tracker.step("n%d" % i, s) for s in ("draining", "pending", "done")])
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = json.loads(path.read_text())
    assert sorted(n["node"] for n in record["nodes"]) == ["n%d" % i for i in range(8)]
    assert all(n["step"] == "done" for n in record["nodes"])


def test_steps_in_quick_succession_are_written_together_within_the_interval(tmp_path):
    path = tmp_path / "p.json"
    tracker = progress.Progress(str(path), write_interval=0.3)
    writes = []
    original = tracker.write

    def counting_write():
        writes.append(len(tracker.nodes))
        original()
    tracker.write = counting_write
    for i in range(50):
        tracker.step("n%d" % i, "draining")
    assert len(writes) <= 1  # the record was written just now (at the start): the steps wait for the writer
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(json.loads(path.read_text())["nodes"]) < 50:
        time.sleep(0.05)
    assert len(json.loads(path.read_text())["nodes"]) == 50, "the writer thread did not write the last steps"
    assert len(writes) <= 2
    tracker.finish()
    assert json.loads(path.read_text())["finished"] is True


def test_a_write_that_fails_mid_run_is_counted_and_never_raised(tmp_path):
    directory = tmp_path / "records"
    directory.mkdir()
    path = directory / "rollout.json"
    tracker = progress.Progress(str(path), clock=Clock(), write_interval=0)
    directory.rename(tmp_path / "gone")  # each write now fails: its directory is not there
    tracker.step("gpu-a", "draining")
    tracker.step("gpu-a", "pending")
    assert tracker.write_failures == 2
    assert tracker.write_warning() == (
        "progress record %s: 2 write(s) failed, the last with: No such file or directory; it stops short of the "
        "rollout's end, whose outcome is in this result's rows" % path)
    (tmp_path / "gone").rename(directory)
    tracker.step("gpu-a", "done")
    tracker.finish()
    assert [step for _t, step in json.loads(path.read_text())["nodes"][0]["history"]] == ["draining", "pending", "done"]
    assert tracker.write_warning() == "progress record %s: 2 write(s) failed; later writes succeeded" % path


def test_the_first_write_failing_raises_so_the_rollout_can_refuse(tmp_path):
    path = tmp_path / "missing" / "rollout.json"
    try:
        progress.Progress(str(path))
    except OSError as exc:
        assert exc.strerror == "No such file or directory"
    else:
        raise AssertionError("no error for %s" % path)
    assert progress.Progress(str(tmp_path / "rollout.json")).write_warning() is None
