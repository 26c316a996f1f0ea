"""Pure drain logic: which pods a GPU drain evicts, which budgets block, and cordon bookkeeping."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import drain
from tests.support import kube


def pod(name, ns="team", resources=None, runtime_class=None, owner="ReplicaSet", phase="Running",
        labels=None, emptydir=False, terminating=False, mirror=False):
    meta = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if terminating else {}
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
    return kube.pod(name, namespace=ns, limits=resources, phase=phase, labels=labels or {}, uid="uid-" + name,
                    owner=owner or None, runtime_class=runtime_class, metadata=meta,
                    spec={"volumes": [{"name": "scratch", "emptyDir": {}}]} if emptydir else None)


def names(items):
    return sorted(p["name"] for p in items)


def test_gpu_scope_evicts_gpu_mig_and_runtimeclass_pods_only():
    pods = [pod("whole", resources={"nvidia.com/gpu": "1"}),
            pod("slice", resources={"nvidia.com/mig-1g.10gb": "1"}),
            pod("shared", resources={"nvidia.com/gpu.shared": "1"}),
            pod("runtime", runtime_class="nvidia"),
            pod("cpu", resources={"cpu": "2"})]
    plan = drain.classify_pods(pods)
    assert names(plan["evict"]) == ["runtime", "shared", "slice", "whole"]
    assert names(plan["left_alone"]) == ["cpu"]
    assert plan["evict"][0]["gpu_resources"] or plan["evict"][0]["name"] == "runtime"


def test_all_scope_evicts_cpu_pods_but_never_daemonsets_mirror_or_finished():
    pods = [pod("cpu"), pod("plugin", owner="DaemonSet", resources={"nvidia.com/gpu": "1"}),
            pod("static", mirror=True), pod("done", phase="Succeeded")]
    plan = drain.classify_pods(pods, pod_scope="all")
    assert names(plan["evict"]) == ["cpu"]
    assert names(plan["left_alone"]) == ["done", "plugin", "static"]


def test_bare_and_emptydir_pods_block_unless_allowed():
    pods = [pod("bare", owner=None, resources={"nvidia.com/gpu": "1"}),
            pod("scratch", emptydir=True, resources={"nvidia.com/gpu": "1"})]
    plan = drain.classify_pods(pods)
    assert names(plan["blockers"]) == ["bare", "scratch"] and not plan["evict"]
    assert "force" in [p for p in plan["blockers"] if p["name"] == "bare"][0]["reason"]
    plan = drain.classify_pods(pods, force=True, delete_emptydir_data=True)
    assert names(plan["evict"]) == ["bare", "scratch"] and not plan["blockers"]


def test_terminating_pods_are_waited_for_not_evicted():
    plan = drain.classify_pods([pod("leaving", resources={"nvidia.com/gpu": "1"}, terminating=True)])
    assert names(plan["terminating"]) == ["leaving"] and not plan["evict"]


def test_selector_semantics():
    labels = {"app": "train", "tier": "gpu"}
    assert drain.selector_matches({"matchLabels": {"app": "train"}}, labels)
    assert not drain.selector_matches({"matchLabels": {"app": "serve"}}, labels)
    assert drain.selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]},
                                  labels)
    assert not drain.selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    assert drain.selector_matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert drain.selector_matches({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
                                  labels)
    assert drain.selector_matches({}, labels)  # empty selector: every pod of the namespace
    assert not drain.selector_matches(None, labels)


def pdb(name, ns, match, allowed):
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": {"matchLabels": match}},
            "status": {"disruptionsAllowed": allowed}}


def test_blocking_budgets_counts_pods_per_budget():
    pods = [pod("a", labels={"app": "x"}), pod("b", labels={"app": "x"}), pod("c", labels={"app": "y"})]
    pdbs = [pdb("one-left", "team", {"app": "x"}, 1), pdb("free", "team", {"app": "y"}, 1),
            pdb("other-ns", "elsewhere", {"app": "x"}, 0)]
    blocking = drain.blocking_budgets(pods, pdbs)
    assert blocking == [{"namespace": "team", "name": "one-left", "disruptions_allowed": 1,
                         "pods": ["team/a", "team/b"]}]


def node(unschedulable=False, prior=None):
    annotations = {} if prior is None else {drain.PRIOR_UNSCHEDULABLE_ANNOTATION: prior}
    return kube.node("n1", annotations=annotations, unschedulable=unschedulable or None)


def test_cordon_records_prior_state_once():
    assert drain.cordon_patch(node()) == {
        "metadata": {"annotations": {drain.PRIOR_UNSCHEDULABLE_ANNOTATION: "false"}},
        "spec": {"unschedulable": True}}
    assert drain.cordon_patch(node(True))["metadata"]["annotations"][drain.PRIOR_UNSCHEDULABLE_ANNOTATION] == "true"
    # A re-run after our own cordon keeps the first record and changes nothing.
    assert drain.cordon_patch(node(True, prior="false")) is None
    # Someone uncordoned it meanwhile: cordon again, keep the record.
    assert drain.cordon_patch(node(False, prior="false")) == {"spec": {"unschedulable": True}}


def test_uncordon_restores_exactly_what_was_found():
    patch, outcome = drain.uncordon_patch(node(True, prior="false"))
    assert outcome == "uncordoned" and patch["spec"] == {"unschedulable": None}
    patch, outcome = drain.uncordon_patch(node(True, prior="true"))
    assert outcome == "left-cordoned" and "spec" not in patch
    assert drain.uncordon_patch(node(True)) == (None, "no-record")


class PatchOps(object):
    def __init__(self):
        self.patches = []

    def patch_node(self, name, body):
        self.patches.append((name, body))
        return body


def test_uncordon_and_the_marker_go_in_one_patch_and_the_marker_alone_when_nothing_to_uncordon():
    ops = PatchOps()
    marker = {"metadata": {"annotations": {"gpufleet.io/mig-target-config": None}}}
    drainer = drain.NodeDrainer(ops, "n1")
    assert drainer.uncordon(node(True, prior="false"), marker) == (True, "uncordoned")
    cleared = {"gpufleet.io/mig-target-config": None, drain.PRIOR_UNSCHEDULABLE_ANNOTATION: None}
    assert ops.patches == [("n1", {"metadata": {"annotations": cleared}, "spec": {"unschedulable": None}})]
    assert drainer.uncordon(node(True, prior="true"), marker) == (True, "left-cordoned")
    assert "spec" not in ops.patches[-1][1]  # an admin's cordon stays
    assert drainer.uncordon(node(True), marker) == (False, "no-record")
    assert ops.patches[-1] == ("n1", marker) and len(ops.patches) == 3
    assert marker == {"metadata": {"annotations": {"gpufleet.io/mig-target-config": None}}}  # not modified


class WatchingOps(object):
    """The node's pods: a watch that deletes the evicted pods; counts lists (none expected after the plan's)."""

    def __init__(self):
        self.lists, self.watched_from = 0, None

    def list_pods_on_node(self, node_name):
        self.lists += 1
        return {"metadata": {"resourceVersion": "7"}, "items": []}

    def lister(self, path):
        return path

    def watch(self, list_func, deadline, done, initial, relisted=None, **kwargs):
        self.watched_from = initial["metadata"]["resourceVersion"]
        gone = {"metadata": {"uid": "uid-a"}, "spec": {"nodeName": "n1"}}
        assert done("DELETED", gone)
        return gone


def test_wait_gone_watches_from_the_plans_list_without_listing_again():
    ops = WatchingOps()
    evicted = [drain.summarize_pod(pod("a"))]
    assert drain.NodeDrainer(ops, "n1").wait_gone(evicted, 10 ** 9, {"resourceVersion": "5"}) == []
    assert ops.lists == 0 and ops.watched_from == "5"
    assert drain.NodeDrainer(ops, "n1").wait_gone(evicted, 10 ** 9) == []  # no list given: lists first (gone already)
    assert ops.lists == 1


class ConflictOps(object):
    """A node that an admin cordons between our read and our cordon: the first patch, sent with the resourceVersion
    read, is refused with 409 as the API server refuses it; the node read again is the admin's."""

    def __init__(self, current):
        self.current = current
        self.patches, self.reads = [], 0

    def patch_node(self, name, body):
        self.patches.append(body)
        if body["metadata"].get("resourceVersion") != self.current["metadata"]["resourceVersion"]:
            raise drain.ApiException(status=409, reason="Conflict")
        return body

    def get_node(self, name):
        self.reads += 1
        return self.current


def versioned(unschedulable, version, prior=None):
    found = node(unschedulable, prior)
    found["metadata"]["resourceVersion"] = version
    return found


def test_a_cordon_made_between_our_read_and_our_write_is_recorded_as_the_admins():
    ops = ConflictOps(versioned(True, "8"))  # the admin cordoned: version 7 -> 8
    changed, _node = drain.NodeDrainer(ops, "n1").cordon(versioned(False, "7"))
    assert changed and ops.reads == 1 and len(ops.patches) == 2
    assert ops.patches[0]["metadata"]["resourceVersion"] == "7"
    # Made anew from the node as it is: the admin's cordon is the state found, so the uncordon will keep it.
    assert ops.patches[1]["metadata"]["annotations"][drain.PRIOR_UNSCHEDULABLE_ANNOTATION] == "true"
    assert ops.patches[1]["metadata"]["resourceVersion"] == "8"


def test_an_uncordon_is_made_anew_when_the_node_changed_since_it_was_read():
    # Someone else released the node meanwhile (our record gone): nothing of ours is left to undo.
    ops = ConflictOps(versioned(False, "12"))
    changed, outcome = drain.NodeDrainer(ops, "n1").uncordon(versioned(True, "11", prior="false"))
    assert (changed, outcome) == (False, "no-record") and len(ops.patches) == 1


def test_conflicts_without_end_give_up_naming_the_conflict():
    class Always(ConflictOps):
        def get_node(self, name):
            self.reads += 1
            return versioned(False, str(100 + self.reads))

        def patch_node(self, name, body):
            self.patches.append(body)
            raise drain.ApiException(status=409, reason="Conflict")

    ops = Always(versioned(False, "1"))
    try:
        drain.NodeDrainer(ops, "n1").cordon(versioned(False, "1"))
    except drain.ApiException as exc:
        assert exc.status == 409
    else:
        raise AssertionError("no conflict raised")
    assert len(ops.patches) == drain.CONFLICT_RETRIES
