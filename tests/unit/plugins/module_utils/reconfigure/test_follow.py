"""Following evicted pods to their replacements: matching by the controller's uid, pure over pod dicts."""

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import follow, tables
from tests.support import kube

RS = {"kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid"}
STS = {"kind": "StatefulSet", "name": "db", "uid": "sts-uid"}


def pod(name, uid, owner=None, node=None, phase="Running", created="2026-01-01T00:00:00Z", scheduled_message=None):
    meta = {"creationTimestamp": created}
    if owner:  # a controller reference after one that is not
        meta["ownerReferences"] = [{"kind": "Node", "name": "x", "uid": "not-a-controller"}, dict(owner, controller=True)]
    status = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                              "message": scheduled_message}]} if scheduled_message else None
    return kube.pod(name, uid=uid, node_name=node, phase=phase, metadata=meta, status=status)


def test_replacements_are_new_pods_of_the_same_controller_given_in_eviction_order():
    old = [pod("web-a", "a", RS, "n1"), pod("web-b", "b", RS, "n1"), pod("db-0", "d0", STS, "n2"),
           pod("bare", "x", None, "n2")]
    evictions = [follow.eviction(p["spec"]["nodeName"], p) for p in old]
    assert evictions[0]["owner"] == RS and evictions[3]["owner"] is None
    known = set(["a", "b", "d0", "x", "other"])
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    now = [pod("web-other", "other", RS, "n3"),  # existed before: not a replacement
           pod("web-c", "c", RS, "n3", created="2026-01-01T00:01:00Z"),
           pod("web-d", "d", RS, None, phase="Pending", created="2026-01-01T00:02:00Z", scheduled_message=message),
           pod("db-0", "d1", STS, "n3")]  # same name, new uid
    result, done = follow.outcome(evictions, now, known)
    assert not done
    assert result["n1"] == {"evicted": 2, "returned": 1, "returned_on": {"n3": 1}, "not_back": [],
                            "pending": [{"pod": "w/web-d", "replaces": "w/web-b", "reason": message}]}
    assert result["n2"] == {"evicted": 2, "returned": 1, "returned_on": {"n3": 1}, "pending": [],
                            "not_back": [{"pod": "w/bare", "reason": "not recreated (no controller)"}]}
    now[2] = pod("web-d", "d", RS, "n4", created="2026-01-01T00:02:00Z")
    result, done = follow.outcome(evictions, now, known)
    assert done and result["n1"]["returned_on"] == {"n3": 1, "n4": 1}
    lines = follow.lines("n1", result["n1"])
    assert lines == ["n1: 2 of 2 evicted pods running again: 1 on n3, 1 on n4"]
    assert follow.lines("n2", result["n2"]) == ["n2: 1 of 2 evicted pods running again: 1 on n3",
                                                "n2: w/bare not recreated (no controller)"]


def test_no_replacement_yet_and_terminating_pods_do_not_count():
    evictions = [follow.eviction("n1", pod("web-a", "a", RS, "n1"))]
    gone = pod("web-a", "a", RS, "n1")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    result, done = follow.outcome(evictions, [gone], set(["a"]))
    assert not done and result["n1"]["not_back"] == [{"pod": "w/web-a", "reason": "no replacement pod seen"}]


def test_a_replacement_evicted_again_passes_its_place_on_and_both_nodes_see_the_pod_that_runs():
    first = pod("web-a", "a", RS, "n1")
    moved = pod("web-b", "b", RS, "n2", created="2026-01-01T00:01:00Z")  # a's replacement, landed on n2
    evictions = [follow.eviction("n1", first), follow.eviction("n2", moved)]
    final = pod("web-c", "c", RS, "n1", created="2026-01-01T00:02:00Z")
    result, done = follow.outcome(evictions, [final], set(["a"]))
    assert done
    assert result["n1"]["returned_on"] == {"n1": 1} and result["n2"]["returned_on"] == {"n1": 1}
    result, done = follow.outcome(evictions, [], set(["a"]))
    assert not done and [p["reason"] for p in result["n2"]["not_back"]] == ["no replacement pod seen"]


def test_pending_reason_without_a_scheduler_message():
    assert follow.pending_reason(pod("p", "u", RS, "n1", phase="Pending")) == "Pending on n1"
    assert follow.pending_reason(pod("p", "u", RS, None, phase="Pending")) == "Pending, not scheduled yet"


def test_summary_table_has_the_back_column_and_the_follow_lines():
    row = {"node": "n1", "model": "H100", "before": "all-disabled", "after": "all-1g.10gb", "evicted": ["w/a", "w/b"],
           "duration_s": 2.0, "result": "reconfigured",
           "follow": {"evicted": 2, "returned": 1, "returned_on": {"n2": 1}, "not_back": [],
                      "pending": [{"pod": "w/c", "replaces": "w/b", "reason": "0/2 nodes are available"}]}}
    lines = tables.summary_table([row, {"node": "n2", "result": "unchanged"}])
    assert lines[0].split() == list(tables.SUMMARY_COLUMNS)
    assert lines[1].split()[4:6] == ["2", "1/2"] and lines[2].split()[5] == "-"
    assert lines[3:] == ["n1: 1 of 2 evicted pods running again: 1 on n2",
                         "n1: w/c (replaces w/b) Pending: 0/2 nodes are available"]


class WatchOps(object):
    """List and watch of the evicted pods' namespace: the watch delivers ``events`` then waits out its deadline."""

    def __init__(self, pods, events=()):
        self.pods, self.events, self.deadlines = pods, list(events), []

    def lister(self, path):
        return path

    def list_pods_in_namespace(self, namespace):
        return {"metadata": {"resourceVersion": "1"}, "items": self.pods}

    def watch(self, list_func, deadline, done, initial):
        self.deadlines.append(deadline - time.monotonic())
        while self.events:
            event = self.events.pop(0)
            if done("MODIFIED", event):
                return event
        raise DeadlineExceeded("deadline reached", None)


def test_the_follow_ends_once_the_scheduler_refused_every_replacement_not_the_timeout_later():
    old = pod("web-a", "a", RS, "n1")
    refused = pod("web-b", "b", RS, None, phase="Pending", created="2026-01-01T00:01:00Z",
                  scheduled_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    ops = WatchOps([refused])
    result = follow.follow(ops, [follow.eviction("n1", old)], set(["a"]), timeout=600)
    assert result["n1"]["pending"][0]["pod"] == "w/web-b"
    assert len(ops.deadlines) == 1 and ops.deadlines[0] <= follow.SETTLE_S  # settled, not the 600 s timeout


def test_a_replacement_not_yet_refused_is_waited_for_until_it_runs():
    old = pod("web-a", "a", RS, "n1")
    waiting = pod("web-b", "b", RS, "n2", phase="Pending", created="2026-01-01T00:01:00Z")  # bound, starting
    ops = WatchOps([waiting], events=[pod("web-b", "b", RS, "n2", created="2026-01-01T00:01:00Z")])
    result = follow.follow(ops, [follow.eviction("n1", old)], set(["a"]), timeout=600)
    assert result["n1"]["returned_on"] == {"n2": 1} and ops.deadlines[0] > 500


class DownOps(object):
    """KubeOps whose pod list (or, with ``listing``, whose watch) fails as the API server does when it is gone."""

    def __init__(self, exc, listing=None):
        self.exc = exc
        self.listing = listing

    def lister(self, _path):
        return None

    def list_pods_in_namespace(self, _namespace):
        if self.listing is None:
            raise self.exc
        return self.listing

    def watch(self, *_args, **_kwargs):
        raise self.exc


def test_an_api_server_gone_while_following_ends_the_follow_with_what_is_known_not_the_rollout():
    """The rollout's rows were lost when the API server was down past a node's deadline: the follow after the last
    node raised the connection error out of mig_rollout (found by test_control_plane_restart.py)."""
    import urllib3

    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces/w/pods", ConnectionRefusedError(111, "Connection refused"))
    evictions = [follow.eviction("n1", pod("web-a", "a", RS, "n1")), follow.eviction("n1", pod("bare", "x", None, "n1"))]
    result = follow.follow(DownOps(refused), evictions, set(["a", "x"]), 5)
    assert result["n1"]["evicted"] == 2 and result["n1"]["returned"] == 0
    assert result["n1"]["not_back"] == [
        {"pod": "w/web-a", "reason": "no replacement pod seen; not followed to the end: Kubernetes API server "
                                     "unreachable ([Errno 111] Connection refused)"},
        {"pod": "w/bare", "reason": "not recreated (no controller)"}]
    # Listed, then the watch fails: the pending replacement keeps its reason, with the note.
    waiting = pod("web-b", "b", RS, None, phase="Pending", created="2026-01-01T00:01:00Z")
    result = follow.follow(DownOps(refused, {"items": [waiting], "metadata": {"resourceVersion": "1"}}),
                           evictions[:1], set(["a"]), 5)
    assert result["n1"]["pending"] == [{"pod": "w/web-b", "replaces": "w/web-a", "reason": (
        "Pending, not scheduled yet; not followed to the end: Kubernetes API server unreachable "
        "([Errno 111] Connection refused)")}]
