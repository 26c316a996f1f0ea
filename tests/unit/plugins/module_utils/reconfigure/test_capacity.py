"""Eviction capacity warnings: pure counting over Node and Pod dicts."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import capacity
from tests.support import kube


def node(name, allocatable, unschedulable=False):
    return kube.node(name, allocatable=allocatable, unschedulable=unschedulable)


def pod(name, node_name, limits, phase="Running", init=None):
    return kube.pod(name, node_name=node_name, limits=limits, phase=phase, init_limits=init)


def plan(name, expected, evict, admin_cordoned=False):
    return {"node": name, "errors": [], "expected_resources": expected, "pods_to_evict": evict,
            "admin_cordoned": admin_cordoned}


def test_requests_sum_containers_and_take_the_largest_init_container():
    p = pod("a", "n1", {"nvidia.com/gpu": "1", "cpu": "1"}, init={"nvidia.com/gpu": "2"})
    p["spec"]["containers"].append({"resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}})
    assert capacity.pod_gpu_requests(p) == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1}


def test_whole_gpu_pods_have_nowhere_to_go_after_all_balanced():
    nodes = [node("n1", {"nvidia.com/gpu": "1"}), node("n2", {"nvidia.com/gpu": "1"})]
    pods = [pod("g1", "n1", {"nvidia.com/gpu": "1"}), pod("g2", "n2", {"nvidia.com/gpu": "1"})]
    plans = [plan("n1", {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1}, ["w/g1"]),
             plan("n2", {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1}, ["w/g2"])]
    warnings = capacity.eviction_warnings(plans, nodes, pods)
    assert len(warnings) == 1
    assert "2 nvidia.com/gpu" in warnings[0] and "room for 0" in warnings[0] and "w/g1 (1), w/g2 (1)" in warnings[0]


def test_room_elsewhere_means_no_warning_but_pods_that_stay_take_theirs():
    nodes = [node("n1", {"nvidia.com/gpu": "1"}), node("spare", {"nvidia.com/gpu": "2"})]
    plans = [plan("n1", {"nvidia.com/mig-1g.10gb": 7}, ["w/g1"])]
    free_spare = [pod("g1", "n1", {"nvidia.com/gpu": "1"})]
    assert capacity.eviction_warnings(plans, nodes, free_spare) == []
    busy_spare = free_spare + [pod("s1", "spare", {"nvidia.com/gpu": "2"})]
    assert "room for 0" in capacity.eviction_warnings(plans, nodes, busy_spare)[0]
    finished = free_spare + [pod("s1", "spare", {"nvidia.com/gpu": "2"}, phase="Succeeded")]
    assert capacity.eviction_warnings(plans, nodes, finished) == []


def test_cordoned_nodes_offer_no_room():
    nodes = [node("n1", {"nvidia.com/gpu": "1"}), node("off", {"nvidia.com/gpu": "4"}, unschedulable=True),
             node("n2", {"nvidia.com/gpu": "1"})]
    pods = [pod("g1", "n1", {"nvidia.com/gpu": "1"})]
    plans = [plan("n1", {"nvidia.com/mig-1g.10gb": 7}, ["w/g1"]),
             plan("n2", {"nvidia.com/gpu": 1}, [], admin_cordoned=True)]
    assert "room for 0" in capacity.eviction_warnings(plans, nodes, pods)[0]


def test_a_node_advertising_nothing_for_a_moment_takes_no_room_from_others():
    """Its device plugin restarts (e.g. after a strategy change): allocatable is empty, its pods keep theirs."""
    nodes = [node("n1", {"nvidia.com/gpu": "1"}), node("n2", {"nvidia.com/gpu": "1"}), node("restarting", {})]
    pods = [pod("g1", "n1", {"nvidia.com/gpu": "1"}), pod("g2", "n2", {"nvidia.com/gpu": "1"}),
            pod("r1", "restarting", {"nvidia.com/gpu": "1"}), pod("r2", "restarting", {"nvidia.com/gpu": "2"})]
    plans = [plan("n1", {"nvidia.com/gpu": 2}, ["w/g1"]), plan("n2", {"nvidia.com/gpu": 2}, ["w/g2"])]
    assert capacity.eviction_warnings(plans, nodes, pods) == []
    crowded = pods + [pod("x1", "n1", {"nvidia.com/gpu": "1"}), pod("x2", "n2", {"nvidia.com/gpu": "3"})]
    assert "room for 1" in capacity.eviction_warnings(plans, nodes, crowded)[0]


def test_pods_on_a_node_that_is_gone_take_no_room():
    nodes = [node("n1", {"nvidia.com/gpu": "1"}), node("spare", {"nvidia.com/gpu": "1"})]
    pods = [pod("g1", "n1", {"nvidia.com/gpu": "1"}), pod("orphan", "deleted-node", {"nvidia.com/gpu": "4"})]
    assert capacity.eviction_warnings([plan("n1", {"nvidia.com/mig-1g.10gb": 7}, ["w/g1"])], nodes, pods) == []


def test_shortages_name_each_pod_with_what_it_asks_and_the_room_left():
    nodes = [node("n1", {"nvidia.com/gpu": "2"}), node("n2", {"nvidia.com/gpu.shared": "4"}),
             node("spare", {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"})]
    pods = [pod("big", "n1", {"nvidia.com/gpu": "2"}), pod("ts1", "n2", {"nvidia.com/gpu.shared": "3"}),
            pod("ts2", "n2", {"nvidia.com/gpu.shared": "1"}), pod("keep", "spare", {"nvidia.com/gpu.shared": "1"})]
    plans = [plan("n1", {"nvidia.com/mig-1g.10gb": 7}, ["w/big"]),
             plan("n2", {"nvidia.com/mig-1g.10gb.shared": 28}, ["w/ts1", "w/ts2"])]
    found = capacity.shortages(plans, nodes, pods)
    assert found == [
        {"resource": "nvidia.com/gpu", "wanted": 2, "room": 1, "pods": [{"pod": "w/big", "asks": 2}]},
        {"resource": "nvidia.com/gpu.shared", "wanted": 4, "room": 1,
         "pods": [{"pod": "w/ts1", "asks": 3}, {"pod": "w/ts2", "asks": 1}]}]
    text = capacity.shortage_text(found[1], limit=1)
    assert text.startswith("pods to evict ask for 4 nvidia.com/gpu.shared in all, but after the change the "
                           "cluster has room for 1: w/ts1 (3) and 1 more would stay Pending")
    assert "w/ts2 (1)" in capacity.shortage_text(found[1], limit=None)
    # Enough room once the spare's time-sliced pod is gone: the whole-GPU shortage alone remains.
    assert [s["resource"] for s in capacity.shortages(plans, nodes + [node("s2", {"nvidia.com/gpu.shared": "3"})],
                                                      pods)] == ["nvidia.com/gpu"]


def shared_node(name, allocatable, labels):
    return {"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {"allocatable": allocatable}}


def test_time_sliced_nodes_offer_their_shares_after_the_change():
    """Four replicas per slice: one 1g.10gb slice holds four pods' requests (time-slicing), so two evicted
    pods find room on a node that will have one slice; without replicas the same plan has room for one."""
    sliced = {"nvidia.com/mig-1g.10gb.replicas": "4"}
    nodes = [shared_node("n1", {"nvidia.com/mig-1g.10gb": "8"}, sliced)]
    pods = [pod("a", "n1", {"nvidia.com/mig-1g.10gb": "1"}), pod("b", "n1", {"nvidia.com/mig-1g.10gb": "1"})]
    plans = [plan("n1", {"nvidia.com/mig-1g.10gb": 1}, ["w/a", "w/b"])]
    assert capacity.eviction_warnings(plans, nodes, pods) == []
    nodes[0]["metadata"]["labels"] = {}
    assert "room for 1" in capacity.eviction_warnings(plans, nodes, pods)[0]


def test_renamed_shares_are_offered_under_their_shared_names():
    labels = {"nvidia.com/gpu.replicas": "2"}
    nodes = [shared_node("n1", {"nvidia.com/gpu.shared": "2"}, labels)]
    pods = [pod("a", "n1", {"nvidia.com/gpu.shared": "1"}), pod("b", "n1", {"nvidia.com/gpu.shared": "1"})]
    plans = [plan("n1", {"nvidia.com/gpu": 1}, ["w/a", "w/b"])]
    assert capacity.eviction_warnings(plans, nodes, pods) == []
