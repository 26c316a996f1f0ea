"""The node order planner: replaying a rollout on a model of the cluster and searching an order that strands nothing."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import ordering
from tests.support import kube

GPU = "nvidia.com/gpu"
SLICE = "nvidia.com/mig-1g.10gb"
SHARED = "nvidia.com/gpu.shared"


def node(name, allocatable, unschedulable=False):
    return kube.node(name, allocatable=dict((k, str(v)) for k, v in allocatable.items()), unschedulable=unschedulable)


def pod(name, node_name, limits, phase="Running"):
    return kube.pod(name, node_name=node_name, limits=dict((k, str(v)) for k, v in limits.items()), phase=phase)


def plan(name, expected, evict, admin_cordoned=False):
    return {"node": name, "errors": [], "expected_resources": expected, "pods_to_evict": evict,
            "admin_cordoned": admin_cordoned}


def swap_fleet():
    """whole: 2 whole GPUs, both used; sliced: 14 slices, all used; spare: 2 whole GPUs free. The change turns
    whole into slices and sliced into whole GPUs. Sliced first strands its 14 slice pods (no slice anywhere
    until whole has changed); whole first moves its pods to spare, then sliced's pods land on whole's new slices."""
    nodes = [node("sliced", {SLICE: 14}), node("spare", {GPU: 2}), node("whole", {GPU: 2})]
    pods = [pod("s%d" % i, "sliced", {SLICE: 1}) for i in range(14)] + [
        pod("g0", "whole", {GPU: 1}), pod("g1", "whole", {GPU: 1})]
    plans = [plan("sliced", {GPU: 2}, ["w/s%d" % i for i in range(14)]),
             plan("whole", {SLICE: 14}, ["w/g0", "w/g1"])]
    return plans, nodes, pods


def test_finish_before_models_the_canary_the_sliding_window_and_held_batches():
    # canary 0; then a window of 2: 1 and 2 in flight, 3 waits for 1, 4 for 2
    assert ordering.finish_before(5, 2) == [[], [0], [], [1], [2]]
    # held batches of 2 after the canary: [1, 2] then [3, 4] - the whole batch before the next
    assert ordering.finish_before(5, 2, hold=True) == [[], [0], [], [1, 2], []]
    assert ordering.finish_before(3, 1, canary=False) == [[], [0], [1]]
    assert ordering.finish_before(3, None, canary=False) == [[], [], []]


def test_a_given_order_that_strands_nothing_is_kept():
    plans, nodes, pods = swap_fleet()
    choice = ordering.choose_order(plans, nodes, pods, ["whole", "sliced"], window=1)
    assert choice["order"] == ["whole", "sliced"] and not choice["changed"] and choice["feasible"]
    assert choice["given_strands"] is None and ordering.order_note(choice) is None


def test_an_order_that_strands_pods_is_replaced_by_one_that_does_not():
    plans, nodes, pods = swap_fleet()
    choice = ordering.choose_order(plans, nodes, pods, ["sliced", "whole"], window=1)
    assert choice["order"] == ["whole", "sliced"] and choice["changed"] and choice["feasible"]
    assert choice["given_strands"]["node"] == "sliced"
    assert sorted(p["pod"] for p in choice["given_strands"]["pods"]) == sorted("w/s%d" % i for i in range(14))
    note = ordering.order_note(choice)
    assert note.startswith("order changed to avoid stranding: whole, sliced (canary whole); in the given order "
                           "(sliced, whole) when sliced starts, ")
    assert "w/s0 (1 nvidia.com/mig-1g.10gb)" in note and "would find no room" in note


def test_nodes_in_flight_offer_nothing_so_the_window_decides():
    """Both at once (window 2, no canary): sliced's pods cannot use whole's slices before whole is done."""
    plans, nodes, pods = swap_fleet()
    choice = ordering.choose_order(plans, nodes, pods, ["whole", "sliced"], window=2, canary=False)
    assert not choice["feasible"] and not choice["changed"] and choice["order"] == ["whole", "sliced"]
    assert not choice["exhausted"] and choice["starts"] > 2
    assert ordering.order_note(choice).startswith("no node order keeps every evicted pod placed at every step "
                                                  "(every order tried")
    # with the canary the first node is done before the second starts
    assert ordering.choose_order(plans, nodes, pods, ["sliced", "whole"], window=2)["order"] == ["whole", "sliced"]


def test_pods_moved_onto_a_node_still_to_change_are_evicted_again_when_its_turn_comes():
    """a's whole-GPU pod can only go to b (old layout); b changes to slices next, and the pod must move again -
    to c, which is free only if c has not been changed to slices first."""
    nodes = [node("a", {GPU: 1}), node("b", {GPU: 1}), node("c", {GPU: 1})]
    pods = [pod("ga", "a", {GPU: 1})]
    plans = [plan("a", {GPU: 1}, ["w/ga"]), plan("b", {SLICE: 7}, []), plan("c", {SLICE: 7}, [])]
    # a, b, c: a's pod goes to b or c (old), b's start moves it to c or back to a (changed: whole GPU) -> fine
    assert ordering.choose_order(plans, nodes, pods, ["a", "b", "c"], window=1)["given_strands"] is None
    # c, b, a: c and b turn into slices first; then a's pod finds no whole GPU anywhere
    choice = ordering.choose_order(plans, nodes, pods, ["c", "b", "a"], window=1)
    assert choice["given_strands"] == {"node": "a", "pods": [{"pod": "w/ga", "asks": {GPU: 1}}]}
    # the first order found keeps c first: a's pod goes to b (old), and b's start moves it again, back to a
    assert choice["changed"] and choice["order"] == ["c", "a", "b"]
    cluster = ordering.model(plans, nodes, pods, choice["order"])
    cluster.finish("c")
    assert cluster.start("a") == [] and [r[0] for r in cluster.residents["b"]] == ["w/ga"]
    cluster.finish("a")
    assert cluster.start("b") == [] and [r[0] for r in cluster.residents["a"]] == ["w/ga"]


def test_a_pod_must_fit_on_one_node_and_time_sliced_names_count_as_their_own_resource():
    nodes = [node("n1", {SHARED: 4}), node("x", {SHARED: 2}), node("y", {SHARED: 2})]
    pods = [pod("ts", "n1", {SHARED: 3})]
    plans = [plan("n1", {SLICE: 7}, ["w/ts"])]
    # 4 shared replicas free in all, but no node has 3
    choice = ordering.choose_order(plans, nodes, pods, ["n1"], window=1)
    assert choice["given_strands"] == {"node": "n1", "pods": [{"pod": "w/ts", "asks": {SHARED: 3}}]}
    assert not choice["feasible"] and choice["starts"] == 1  # one node: nothing to search


def test_cordoned_nodes_finished_pods_and_pods_that_stay_are_counted_as_capacity_py_counts():
    nodes = [node("n1", {GPU: 1}), node("off", {GPU: 4}, unschedulable=True), node("busy", {GPU: 2}),
             node("kept", {GPU: 1})]
    pods = [pod("g", "n1", {GPU: 1}), pod("b", "busy", {GPU: 2}), pod("done", "kept", {GPU: 1}, phase="Succeeded")]
    plans = [plan("n1", {SLICE: 7}, ["w/g"]), plan("kept", {GPU: 1}, [], admin_cordoned=True)]
    cluster = ordering.model(plans, nodes, pods, ["n1"])
    assert cluster.free("off") == {} and cluster.free("busy") == {GPU: 0} and cluster.free("kept") == {GPU: 1}
    assert ordering.replay(cluster, ["n1"], 1) is None  # lands on kept (its finished pod holds nothing)
    assert cluster.residents["kept"] == []  # replay works on a copy


def test_the_search_is_bounded_and_says_so():
    """Twelve whole-GPU nodes turning into slices, one free whole GPU elsewhere: every order places the first
    node's pod and strands the second's; 12 + 12 x 11 starts would prove it, the bound stops at 50."""
    nodes = [node("spare", {GPU: 1})] + [node("n%02d" % i, {GPU: 1}) for i in range(12)]
    pods = [pod("g%02d" % i, "n%02d" % i, {GPU: 1}) for i in range(12)]
    plans = [plan("n%02d" % i, {SLICE: 7}, ["w/g%02d" % i]) for i in range(12)]
    names = ["n%02d" % i for i in range(12)]
    bounded = ordering.choose_order(plans, nodes, pods, names, window=1, budget=50)
    assert not bounded["feasible"] and bounded["exhausted"] and bounded["starts"] == 12 + 50
    assert "search stopped at its bound, 62 node starts simulated" in ordering.order_note(bounded)
    full = ordering.choose_order(plans, nodes, pods, names, window=1)
    assert not full["feasible"] and not full["exhausted"] and full["starts"] == 12 + 12 + 12 * 11
    strand = {"node": "n01", "pods": [{"pod": "w/g01", "asks": {GPU: 1}}]}
    assert bounded["given_strands"] == full["given_strands"] == strand
