"""The per-node MIG step: its pure parts (config source choice, strategy, verification, paused operands) and
run_step (label or re-trigger -> follow -> verify -> clear the marker) against a fake API whose MIG Manager answers
a label change with a scripted sequence of states."""

import copy
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import api as k8s_api
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import PAUSED_VALUE, node_gpu_allocatable
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step

CONFIG, STATE = node_step.LABEL_MIG_CONFIG, node_step.LABEL_MIG_STATE


class FakeConfigMaps(object):
    """Only the ConfigMap lookup find_config_source needs (no API server involved)."""

    def __init__(self, maps):
        self.maps = maps

    def get_configmap(self, namespace, name):
        return self.maps.get((namespace, name))


def policy(config_name="", strategy="mixed", env=None, namespace="gpu-operator"):
    return {"spec": {"mig": {"strategy": strategy},
                     "migManager": {"config": {"name": config_name}, "env": env or []}},
            "status": {"namespace": namespace, "state": "ready"}}


def test_config_source_order_custom_generated_builtin():
    ops = FakeConfigMaps({("gpu-operator", "custom"): {"data": {"config.yaml": "version: v1"}},
                          ("gpu-operator", "n1-mig-config"): {"data": {"config.yaml": "generated"}}})
    assert node_step.find_config_source(ops, policy("custom"), "n1", "gpu-operator")["kind"] == "custom"
    assert node_step.find_config_source(ops, policy(), "n1", "gpu-operator")["text"] == "generated"
    assert node_step.find_config_source(ops, policy(), "n2", "gpu-operator")["kind"] == "builtin"


def test_missing_custom_configmap_or_key_is_an_error_naming_it():
    ops = FakeConfigMaps({("gpu-operator", "nokey"): {"data": {"other.yaml": ""}}})
    for name, text in (("absent", "gpu-operator/absent, which does not exist"), ("nokey", "no key config.yaml")):
        try:
            node_step.find_config_source(ops, policy(name), "n1", "gpu-operator")
        except node_step.MigStepError as exc:
            assert text in str(exc)
        else:
            raise AssertionError("expected MigStepError for %s" % name)


def test_strategy_reboot_and_namespace_from_cluster_policy():
    node = {"metadata": {"labels": {"nvidia.com/mig.strategy": "single"}}}
    assert node_step.mig_strategy(policy(strategy="mixed"), node) == "mixed"
    assert node_step.mig_strategy(None, node) == "single"
    assert node_step.mig_strategy(None, {"metadata": {}}) == "none"
    assert node_step.with_reboot(policy(env=[{"name": "WITH_REBOOT", "value": "true"}]))
    assert not node_step.with_reboot(policy(env=[{"name": "WITH_REBOOT", "value": "false"}]))
    assert k8s_api.active_cluster_policy([{"status": {"state": "ignored"}}, policy()]) == policy()


def test_verification_compares_gpu_resources_only_and_names_the_difference():
    node = {"status": {"allocatable": {"cpu": "32", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu": "0"}}}
    assert node_gpu_allocatable(node, keep_zero=False) == {"nvidia.com/mig-1g.10gb": 14}
    assert node_step.resource_mismatches({"nvidia.com/mig-1g.10gb": 14}, node_gpu_allocatable(node, keep_zero=False)) == []
    problems = node_step.resource_mismatches({"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8},
                                             node_gpu_allocatable(node, keep_zero=False))
    assert problems == ["allocatable nvidia.com/mig-1g.10gb is 14, plan says 16",
                        "allocatable nvidia.com/mig-2g.20gb is 0, plan says 8"]
    assert node_step.label_mismatches({"nvidia.com/gpu.count": "4"}, {"nvidia.com/gpu.count": "4"}) == []
    assert node_step.label_mismatches({"nvidia.com/gpu.count": "4"}, {}) == [
        "GFD label nvidia.com/gpu.count is None, plan says '4'"]


def test_paused_deploy_labels():
    node = {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
                                    "nvidia.com/gpu.deploy.dcgm": "true"}}}
    assert node_step.paused_deploy_labels(node) == ["nvidia.com/gpu.deploy.device-plugin"]


PLANNED = {"expected_resources": {"nvidia.com/mig-1g.10gb": 7}, "expected_gfd_labels": {"nvidia.com/mig.strategy": "mixed"}}


class FakeMigManager(object):
    """A node and a MIG Manager: each trigger plays the next script (states; allocatable after success)."""

    def __init__(self, config="all-disabled", state="success", scripts=(), paused=False):
        labels = {CONFIG: config, STATE: state, "nvidia.com/mig.strategy": "mixed"}
        if paused:
            labels["nvidia.com/gpu.deploy.device-plugin"] = PAUSED_VALUE
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

    def lister(self, path):
        return path

    def watch(self, list_func, deadline, done, initial, **selectors):
        """KubeOps.watch: done(event_type, node); nodes come from the script as watch_node plays it."""
        return self.watch_node(selectors.get("field_selector"), deadline, lambda obj: done("MODIFIED", obj), initial)

    def list_cluster_policies(self):
        return []

    def get_configmap(self, namespace, name):
        return None

    def watch_node(self, name, deadline, done, initial):
        if done(initial):
            return initial
        while self.pending:
            event = self.pending.pop(0)
            if isinstance(event, tuple):  # (field, value) of status.nodeInfo, or the Ready condition
                if event[0] == "Ready":
                    self.node["status"]["conditions"] = [{"type": "Ready", "status": event[1]}]
                else:
                    self.node["status"].setdefault("nodeInfo", {})[event[0]] = event[1]
            elif isinstance(event, dict):
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


def test_a_reboot_whose_rebooting_state_the_watch_missed_is_known_from_the_new_boot_id():
    # A watch that re-lists after an error sees only the latest state: here `rebooting` never shows, but kubelet's
    # bootID changes, and success on a node not yet Ready again is not the end.
    ops = FakeMigManager(scripts=[["pending", ("bootID", "boot-2"), ("Ready", "False"), "success", ("Ready", "True"),
                                   {"nvidia.com/mig-1g.10gb": "7"}]])
    ops.node["status"]["nodeInfo"] = {"bootID": "boot-1"}
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["rebooted"] is True and step["states"] == ["pending", "success"] and step["verified"]
    assert step["not_ready_seen"] is True
    plain = FakeMigManager(scripts=[SUCCESS])
    plain.node["status"]["nodeInfo"] = {"bootID": "boot-1"}
    assert node_step.run_step(plain, "n1", "all-1g.10gb", PLANNED, 5, 5)["rebooted"] is False


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


def _shared_node(allocatable, labels):
    return {"metadata": {"name": "n1", "labels": labels}, "status": {"allocatable": allocatable}}


def test_time_sliced_allocatable_and_shared_product_verify_against_the_device_plan():
    """count x replicas shares (renamed .shared or not) and GFD's -SHARED product are the planned devices."""
    single = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED", "nvidia.com/gpu.count": "14",
              "nvidia.com/gpu.replicas": "4"}
    expected_labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.count": "14"}
    assert node_step.node_mismatches(_shared_node({"nvidia.com/gpu": "56"}, single),
                                     {"nvidia.com/gpu": 14}, expected_labels) == []
    renamed = dict(single, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    assert node_step.node_mismatches(_shared_node({"nvidia.com/gpu.shared": "56"}, renamed),
                                     {"nvidia.com/gpu": 14}, expected_labels) == []
    mixed = {"nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-1g.10gb.replicas": "2"}
    assert node_step.node_mismatches(_shared_node({"nvidia.com/mig-1g.10gb": "14"}, mixed),
                                     {"nvidia.com/mig-1g.10gb": 7}, {"nvidia.com/mig-1g.10gb.count": "7"}) == []


def test_without_replicas_a_shared_product_or_extra_shares_are_still_mismatches():
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.count": "1"}
    problems = node_step.node_mismatches(_shared_node({"nvidia.com/gpu": "4"}, labels), {"nvidia.com/gpu": 1},
                                         {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert "allocatable nvidia.com/gpu is 4, plan says 1" in problems
    assert any(p.startswith("GFD label nvidia.com/gpu.product") for p in problems)


def test_a_deleted_node_ends_deleted_not_timeout():
    ops = FakeMigManager(scripts=[["pending"]])

    def watch(list_func, deadline, done, initial, **selectors):
        assert not done("MODIFIED", copy.deepcopy(ops.node))
        assert done("DELETED", copy.deepcopy(ops.node))
        return copy.deepcopy(ops.node)

    ops.watch = watch
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "deleted" and step["node"] is None and not step["verified"]


def test_not_ready_during_the_apply_is_ridden_through_and_recorded():
    ops = FakeMigManager(scripts=[["pending", "success", {"nvidia.com/mig-1g.10gb": "7"}]])
    original = ops.watch_node

    def watch_node(name, deadline, done, initial):
        if ops.node["metadata"]["labels"].get(STATE) is None:
            ops.node["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
            assert not done(copy.deepcopy(ops.node))  # pending-free, NotReady: keep following
            ops.node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        return original(name, deadline, done, initial)

    ops.watch_node = watch_node
    step = node_step.run_step(ops, "n1", "all-1g.10gb", PLANNED, 5, 5)
    assert step["final"] == "success" and step["not_ready_seen"] is True and step["verified"]


def test_a_not_ready_node_is_not_verified():
    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/mig.strategy": "mixed"}},
            "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7"},
                       "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                       "message": "kubelet stopped"}]}}

    class Ops(object):
        def watch_node(self, name, deadline, done, initial):
            assert not done(initial)
            raise DeadlineExceeded("deadline", initial)

    problems = node_step.wait_verified(Ops(), "n1", PLANNED["expected_resources"], PLANNED["expected_gfd_labels"], 0, node)
    assert problems == ["node n1 is NotReady (Ready=False, KubeletNotReady: kubelet stopped)"]


def test_mig_manager_not_running_names_the_missing_configmap_or_the_missing_pod():
    ops = FakeMigManager()
    policy = {"spec": {"migManager": {"config": {"name": "custom-mig"}}}}
    text = node_step.mig_manager_not_running(ops, "n1", "gpu-operator", policy)
    assert "MIG Manager is not running on node n1" in text and "ConfigMap gpu-operator/custom-mig, which does not exist" in text
    ops.list_pods_on_node = lambda name, label_selector=None: {"items": []}
    text = node_step.mig_manager_not_running(ops, "n1", "gpu-operator", {"spec": {}})
    assert text == "MIG Manager is not running on node n1: no nvidia-mig-manager pod there (nvidia.com/gpu.deploy.mig-manager=None)"
    ops.list_pods_on_node = lambda name, label_selector=None: {"items": [
        {"metadata": {"namespace": "gpu-operator", "name": "m"}, "status": {"phase": "Running"}}]}
    assert node_step.mig_manager_not_running(ops, "n1", "gpu-operator", {"spec": {}}) is None


CDI_LOG = (
    'time="2026-12-07T02:00:20Z" level=info msg="Applying the selected MIG config to the node"\n'
    'time="2026-12-07T02:00:21Z" level=info msg="Creating management CDI spec (simplified implementation)"\n'
    'level=error msg="failed to generate CDI spec: failed to initialize NVML"\n'
    'time="2026-12-07T02:00:21Z" level=error msg="Error: failed to handle CDI: cmd.Wait error for cdiGenerateCommand: '
    'exit status 1"\n'
    'time="2026-12-07T02:00:21Z" level=info msg="Waiting for change to \'nvidia.com/mig.config\' label"\n')


def test_mig_managers_reason_is_its_last_error_line_unescaped():
    older = 'time="1" level=error msg="Error: failed to apply MIG configuration: exit status 1"\n'
    assert node_step.mig_manager_error({"gpu-operator/a": older + CDI_LOG}) == (
        "failed to handle CDI: cmd.Wait error for cdiGenerateCommand: exit status 1")
    assert node_step.mig_manager_error({"p": 'level=error msg="Error: config \\"x\\" unknown"'}) == 'config "x" unknown'
    assert node_step.mig_manager_error({"p": 'level=error msg="failed to generate CDI spec"'}) is None  # not its loop's
    assert node_step.mig_manager_error({}) is None


class DiagnosticsOps(object):
    """What collect_diagnostics reads: the node, the pods on it, MIG Manager's log."""

    def __init__(self, state, log):
        self.node = {"metadata": {"name": "gpu-a", "labels": {CONFIG: "all-1g.10gb", STATE: state}},
                     "spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        self.log = log

    def get_node(self, name):
        return self.node

    def list_pods_on_node(self, name):
        return {"items": [{"metadata": {"name": "nvidia-mig-manager-x", "namespace": "gpu-operator",
                                        "labels": {"app": node_step.MIG_MANAGER_APP}},
                           "spec": {"nodeName": name}, "status": {"phase": "Running"}}]}

    def pod_log(self, namespace, name, tail_lines=None):
        return self.log


def test_a_failed_cdi_step_is_named_with_mig_managers_reason_and_where_to_look():
    found = node_step.collect_diagnostics(DiagnosticsOps("failed", CDI_LOG), "gpu-a", "gpu-operator")
    assert found["mig_manager_error"] == "failed to handle CDI: cmd.Wait error for cdiGenerateCommand: exit status 1"
    assert found["hints"][0].startswith(
        "MIG Manager changed the MIG layout for all-1g.10gb, then its CDI step failed (ClusterPolicy cdi.enabled"), found
    assert found["hints"][0].endswith(
        ": failed to handle CDI: cmd.Wait error for cdiGenerateCommand: exit status 1; its log does not keep "
        "nvidia-ctk's own error: run nvidia-ctk cdi generate --mode=management in the MIG Manager pod to see it, and "
        "check the driver root (driver.enabled, hostPaths.driverInstallDir)"), found
    other = 'level=error msg="Error: failed to apply MIG configuration: exit status 1"'
    found = node_step.collect_diagnostics(DiagnosticsOps("failed", other), "gpu-a", "gpu-operator")
    assert found["hints"][0] == "MIG Manager reported failed for all-1g.10gb: failed to apply MIG configuration: exit status 1"
    found = node_step.collect_diagnostics(DiagnosticsOps("success", CDI_LOG), "gpu-a", "gpu-operator")
    assert "mig_manager_error" not in found  # an old error in the log of a node that has since succeeded


def _daemonset(generation=3, observed=3, desired=4, updated=2, uid="ds-uid"):
    return {"metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator", "uid": uid,
                         "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "nvidia-mig-manager"}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated}}


def _revision(number, hash_, owner="ds-uid"):
    return {"metadata": {"name": "nvidia-mig-manager-%s" % hash_, "labels": {"controller-revision-hash": hash_},
                         "ownerReferences": [{"kind": "DaemonSet", "uid": owner}]}, "revision": number}


def _mig_manager_pod(hash_):
    return {"metadata": {"name": "nvidia-mig-manager-x1", "namespace": "gpu-operator",
                         "labels": {"app": "nvidia-mig-manager", "controller-revision-hash": hash_},
                         "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-mig-manager"}]}}


def test_an_old_mig_manager_pod_during_a_daemonset_rollout_is_named_with_both_revisions():
    revisions = [_revision(1, "aaa"), _revision(3, "ccc"), _revision(2, "bbb"), _revision(9, "zzz", owner="other")]
    why = node_step.mig_manager_outdated(_mig_manager_pod("bbb"), _daemonset(), revisions)
    assert why == ("MIG Manager pod gpu-operator/nvidia-mig-manager-x1 runs an older template of DaemonSet "
                   "nvidia-mig-manager (controller-revision-hash=bbb, current ccc): the DaemonSet is still rolling out "
                   "a change (kubectl -n gpu-operator rollout status daemonset/nvidia-mig-manager)")
    assert node_step.mig_manager_outdated(_mig_manager_pod("ccc"), _daemonset(), revisions) is None


def test_a_rolled_out_daemonset_or_one_without_history_never_holds_a_node():
    old_pod = _mig_manager_pod("aaa")
    assert node_step.mig_manager_outdated(old_pod, _daemonset(updated=4), [_revision(2, "bbb")]) is None
    assert node_step.mig_manager_outdated(old_pod, _daemonset(), []) is None


def test_a_new_template_the_controller_has_not_acted_on_holds_the_node_though_the_pod_matches_the_newest_revision():
    # Until the DaemonSet controller syncs, its newest ControllerRevision is still the old template's (aaa here),
    # so the old pod matches it; the unobserved generation is what says the pod is about to be replaced.
    why = node_step.mig_manager_outdated(_mig_manager_pod("aaa"), _daemonset(generation=4, updated=4),
                                         [_revision(1, "aaa")])
    assert why == ("DaemonSet nvidia-mig-manager has a new template (generation 4) its controller has not yet acted "
                   "on (observed 3): MIG Manager pod gpu-operator/nvidia-mig-manager-x1 may be replaced "
                   "(kubectl -n gpu-operator rollout status daemonset/nvidia-mig-manager)")
    assert node_step.mig_manager_outdated(_mig_manager_pod("aaa"), _daemonset(generation=4, observed=4, updated=4),
                                          [_revision(1, "aaa")]) is None


class FakeRolloutOps(object):
    def __init__(self, pods, daemonset, revisions, forbidden=False):
        self.pods, self.daemonset, self.revisions, self.forbidden = pods, daemonset, revisions, forbidden
        self.selectors = []

    def list_pods_on_node(self, node, label_selector=None):
        return {"items": self.pods}

    def get_daemonset(self, namespace, name):
        if self.forbidden:
            raise k8s_api.ApiException(status=403, reason="Forbidden")
        return self.daemonset if name == self.daemonset["metadata"]["name"] else None

    def list_controller_revisions(self, namespace, label_selector=None):
        self.selectors.append(label_selector)
        return self.revisions


def test_rollout_pending_reads_the_pods_daemonset_and_its_history_and_tolerates_a_missing_grant():
    ops = FakeRolloutOps([_mig_manager_pod("aaa")], _daemonset(), [_revision(1, "aaa"), _revision(2, "bbb")])
    assert "current bbb" in node_step.mig_manager_rollout_pending(ops, "gpu-1")
    assert ops.selectors == ["app=nvidia-mig-manager"]
    assert node_step.mig_manager_rollout_pending(FakeRolloutOps([], _daemonset(), []), "gpu-1") is None
    forbidden = FakeRolloutOps([_mig_manager_pod("aaa")], _daemonset(), [], forbidden=True)
    assert node_step.mig_manager_rollout_pending(forbidden, "gpu-1") is None


def test_waiting_for_the_current_template_ends_when_the_pod_is_replaced():
    ops = FakeRolloutOps([_mig_manager_pod("aaa")], _daemonset(), [_revision(1, "aaa"), _revision(2, "bbb")])
    calls = []

    def replaced_after_two_looks(node, label_selector=None):
        calls.append(node)
        return {"items": [_mig_manager_pod("aaa" if len(calls) < 3 else "bbb")]}
    ops.list_pods_on_node = replaced_after_two_looks
    assert node_step.wait_mig_manager_current(ops, "gpu-1", time.monotonic() + 30, interval=0.01) is None
    assert len(calls) == 3
    still = FakeRolloutOps([_mig_manager_pod("aaa")], _daemonset(), [_revision(1, "aaa"), _revision(2, "bbb")])
    assert "older template" in node_step.wait_mig_manager_current(still, "gpu-1", time.monotonic() + 0.05, interval=0.01)


class CountingOps(FakeRolloutOps):
    def __init__(self, *args, **kwargs):
        super(CountingOps, self).__init__(*args, **kwargs)
        self.gets, self.pod_lists = 0, 0

    def get_daemonset(self, namespace, name):
        self.gets += 1
        return super(CountingOps, self).get_daemonset(namespace, name)

    def list_pods_on_node(self, node, label_selector=None):
        self.pod_lists += 1
        return super(CountingOps, self).list_pods_on_node(node, label_selector)


def test_the_node_pods_given_are_searched_for_mig_managers_and_nothing_is_listed():
    workload = {"metadata": {"name": "train-0", "namespace": "ml", "labels": {"app": "train"},
                             "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-mig-manager"}]}}
    ops = CountingOps([], _daemonset(), [_revision(1, "aaa"), _revision(2, "bbb")])
    assert "current bbb" in node_step.mig_manager_rollout_pending(ops, "gpu-1", pods=[workload, _mig_manager_pod("aaa")])
    assert node_step.mig_manager_rollout_pending(ops, "gpu-1", pods=[workload]) is None
    assert ops.pod_lists == 0


def test_a_rolled_out_daemonset_is_read_once_per_max_age_and_one_rolling_out_on_every_look():
    now = [100.0]
    reads = node_step.DaemonSetReads(max_age=5.0, clock=lambda: now[0])
    done = CountingOps([_mig_manager_pod("aaa")], _daemonset(updated=4), [])
    for _node in range(10):
        assert node_step.mig_manager_rollout_pending(done, "gpu-1", daemonsets=reads) is None
    assert done.gets == 1
    now[0] += 5.0
    node_step.mig_manager_rollout_pending(done, "gpu-1", daemonsets=reads)
    assert done.gets == 2
    # the next read finds a new template rolling out: every later look reads it again
    done.daemonset = _daemonset()
    done.revisions = [_revision(1, "aaa"), _revision(2, "bbb")]
    now[0] += 5.0
    for _node in range(3):
        assert "current bbb" in node_step.mig_manager_rollout_pending(done, "gpu-1", daemonsets=reads)
    assert done.gets == 5
