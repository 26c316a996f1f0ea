"""Upgrade pre-flight: MIG-changing nodes, a held rollout Lease and a not-ready operator block it (pure logic)."""

import datetime

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import upgrade
from tests.support import kube

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
READY = {"ready": True, "state": "ready", "not_ready": []}


def node(name, state=None, config=None):
    labels = {"nvidia.com/mig.config.state": state, "nvidia.com/mig.config": config}
    return kube.node(name, labels=dict((k, v) for k, v in labels.items() if v is not None))


def lease(holder, renewed, duration=60, rollout="all-balanced on 3 nodes"):
    return {"metadata": {"annotations": {"gpufleet.io/rollout": rollout}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renewed}}


def test_settled_fleet_may_be_upgraded():
    nodes = [node("a", "success", "all-1g.10gb"), node("b", "failed", "all-disabled"), node("cpu")]
    assert upgrade.upgrade_blockers(nodes, None, READY, "gpu-operator", "gpufleet-mig-rollout", NOW) == []


def test_pending_and_rebooting_nodes_are_named_in_name_order():
    nodes = [node("z", "rebooting", "all-3g.40gb"), node("a", "success", "x"), node("m", "pending", "all-1g.10gb")]
    assert upgrade.upgrade_blockers(nodes, None, READY, "gpu-operator", "l", NOW) == [
        "node m: nvidia.com/mig.config.state=pending (applying nvidia.com/mig.config=all-1g.10gb)",
        "node z: nvidia.com/mig.config.state=rebooting (applying nvidia.com/mig.config=all-3g.40gb)",
    ]


def test_live_lease_names_its_holder_and_an_expired_one_does_not_block():
    live = lease("ctl-1234", "2026-01-01T11:59:30.000000Z")
    blockers = upgrade.upgrade_blockers([], live, READY, "gpu-operator", "gpufleet-mig-rollout", NOW)
    assert blockers == ["MIG rollout lock gpu-operator/gpufleet-mig-rollout held by ctl-1234 (all-balanced on 3 nodes), "
                        "renewed 2026-01-01T11:59:30.000000Z, expires 2026-01-01T12:00:30.000000Z"]
    expired = lease("ctl-1234", "2026-01-01T11:58:00.000000Z")
    assert upgrade.upgrade_blockers([], expired, READY, "gpu-operator", "gpufleet-mig-rollout", NOW) == []
    released = {"spec": {"holderIdentity": None}}
    assert upgrade.lease_blocker(released, "ns", "l", NOW) is None


def test_not_ready_operator_lines_follow_node_and_lease_blockers():
    assessment = {"ready": False, "state": "notReady",
                  "not_ready": ["ClusterPolicy cluster-policy: state notReady", "a: device-plugin (no pod)"]}
    blockers = upgrade.upgrade_blockers([node("a", "pending", "c")], lease("h", "2026-01-01T11:59:59Z"), assessment,
                                        "ns", "l", NOW)
    assert blockers[0].startswith("node a: ")
    assert blockers[1].startswith("MIG rollout lock ns/l held by h ")
    assert blockers[2:] == ["operator not ready: ClusterPolicy cluster-policy: state notReady",
                            "operator not ready: a: device-plugin (no pod)"]
