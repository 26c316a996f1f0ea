"""reconfigure.node_step.run_step: label (or re-trigger) -> follow -> verify -> clear the marker, against a fake
API whose MIG Manager answers a label change with a scripted sequence of states."""

import copy

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step

CONFIG, STATE = node_step.MIG_CONFIG_LABEL, node_step.MIG_STATE_LABEL
PLANNED = {"expected_resources": {"nvidia.com/mig-1g.10gb": 7}, "expected_gfd_labels": {"nvidia.com/mig.strategy": "mixed"}}


class FakeMigManager(object):
    """A node and a MIG Manager: each trigger plays the next script (states; allocatable after success)."""

    def __init__(self, config="all-disabled", state="success", scripts=(), paused=False):
        labels = {CONFIG: config, STATE: state, "nvidia.com/mig.strategy": "mixed"}
        if paused:
            labels["nvidia.com/gpu.deploy.device-plugin"] = node_step.PAUSED_VALUE
        self.node = {"metadata": {"name": "n1", "labels": labels, "annotations": {}},
                     "status": {"allocatable": {"nvidia.com/gpu": "1"},
                                "conditions": [{"type": "Ready", "status": "True"}]}}
        self.scripts = list(scripts)
        self.pending = []
        self.calls = []

    def get_node(self, name):
        self.calls.append("get")
        return copy.deepcopy(self.node)

    def patch_node(self, name, patch):
        self.calls.append("patch")
        meta = patch.get("metadata") or {}
        for key in ("labels", "annotations"):
            for k, v in (meta.get(key) or {}).items():
                if v is None:
                    self.node["metadata"][key].pop(k, None)
                else:
                    self.node["metadata"][key][k] = v
        if CONFIG in (meta.get("labels") or {}) and self.scripts:
            self.pending = list(self.scripts.pop(0))
        return copy.deepcopy(self.node)

    def list_pods_on_node(self, name, label_selector=None):
        return {"items": [{"metadata": {"namespace": "gpu-operator", "name": "mig-manager-n1"}}]}

    def delete_pod(self, namespace, name):
        self.calls.append("restart")

    def watch_node(self, name, deadline, done, initial):
        if done(initial):
            return initial
        while self.pending:
            event = self.pending.pop(0)
            if isinstance(event, dict):
                self.node["status"]["allocatable"] = event
            else:
                self.node["metadata"]["labels"][STATE] = event
            if done(copy.deepcopy(self.node)):
                return copy.deepcopy(self.node)
        raise DeadlineExceeded("deadline", copy.deepcopy(self.node))


SUCCESS = ["pending", "success", {"nvidia.com/mig-1g.10gb": "7"}]


def test_a_change_is_labelled_followed_verified_and_the_marker_cleared():
    ops = FakeMigManager(scripts=[SUCCESS])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["trigger"] == {"action": "labelled"}
    assert step["final"] == "success" and step["states"] == ["pending", "success"] and step["verified"]
    annotations = ops.node["metadata"]["annotations"]
    assert annotations == {node_step.PREVIOUS_CONFIG_ANNOTATION: "all-disabled"}  # marker gone, previous kept
    assert set(step["timings"]) == {"apply_s", "verify_s"}


def test_a_held_node_keeps_its_marker():
    ops = FakeMigManager(scripts=[SUCCESS])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5, clear=False)
    assert step["verified"] and ops.node["metadata"]["annotations"][node_step.TARGET_CONFIG_ANNOTATION] == "all-1g.10gb"


def test_failed_is_reported_without_verifying_or_clearing():
    ops = FakeMigManager(scripts=[["pending", "failed"]])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "failed" and not step["verified"] and step["mismatches"] == []
    assert "verify_s" not in step["timings"]
    assert node_step.TARGET_CONFIG_ANNOTATION in ops.node["metadata"]["annotations"]


def test_success_that_never_advertises_the_plan_is_not_verified():
    ops = FakeMigManager(scripts=[["pending", "success"]])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "success" and not step["verified"]
    assert step["mismatches"] == ["allocatable nvidia.com/gpu is 1, plan says 0",
                                  "allocatable nvidia.com/mig-1g.10gb is 0, plan says 7"]
    assert node_step.TARGET_CONFIG_ANNOTATION in ops.node["metadata"]["annotations"]


def test_timeout_then_unwedge_once_finishes():
    ops = FakeMigManager(scripts=[["pending"], SUCCESS], paused=True)
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5, unwedge_on_timeout=True)
    assert step["unwedged"]["restored_labels"] == ["nvidia.com/gpu.deploy.device-plugin"]
    assert step["final"] == "success" and step["verified"] and step["states"] == ["pending", "pending", "success"]
    assert "restart" in ops.calls


def test_timeout_without_unwedge_stops_there():
    ops = FakeMigManager(scripts=[["pending"]])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "timeout" and "unwedged" not in step and "restart" not in ops.calls


def test_a_resumed_node_at_the_label_but_failed_is_retriggered_not_relabelled():
    ops = FakeMigManager(config="all-1g.10gb", state="failed", scripts=[SUCCESS])
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["trigger"]["action"] == "retriggered" and step["verified"]
    # the label was not pointed anywhere else, so the previous config is not overwritten
    assert node_step.PREVIOUS_CONFIG_ANNOTATION not in ops.node["metadata"]["annotations"]


def test_a_resumed_node_still_pending_is_only_followed():
    ops = FakeMigManager(config="all-1g.10gb", state="pending")
    ops.pending = ["success", {"nvidia.com/mig-1g.10gb": "7"}]
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["trigger"] == {"action": "none"} and step["verified"] and "restart" not in ops.calls


def test_retrigger_always_unwedges_even_to_another_config():
    ops = FakeMigManager(config="all-disabled", state="pending", scripts=[SUCCESS], paused=True)
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5, retrigger=True)
    assert step["trigger"]["action"] == "retriggered" and step["trigger"]["unwedged"]["retriggered"] == "all-1g.10gb"
    assert ops.node["metadata"]["labels"][CONFIG] == "all-1g.10gb" and step["verified"]


def test_someone_else_changing_the_label_is_changed():
    ops = FakeMigManager(scripts=[["pending"]])
    original = ops.watch_node

    def watch(name, deadline, done, initial):
        ops.node["metadata"]["labels"][CONFIG] = "all-balanced"
        return original(name, deadline, done, initial)

    ops.watch_node = watch
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "changed" and not step["verified"]
