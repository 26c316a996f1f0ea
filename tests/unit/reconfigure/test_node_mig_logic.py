"""Pure parts of the MIG step: config source choice, strategy, verification, lease expiry, tables."""

import datetime

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import node_gpu_allocatable
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import lock as rollout_lock
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step, rollout


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
    assert node_step.active_cluster_policy([{"status": {"state": "ignored"}}, policy()]) == policy()


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


def test_lease_expiry():
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
    lease = {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 60, "renewTime": "2026-01-01T11:59:30.000000Z"}}
    assert not rollout_lock.is_expired(lease, now)
    lease["spec"]["renewTime"] = "2026-01-01T11:58:00.000000Z"
    assert rollout_lock.is_expired(lease, now)
    assert rollout_lock.is_expired({"spec": {}}, now)
    assert rollout_lock.lease_view(lease)["expires"] == "2026-01-01T11:59:00.000000Z"


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
