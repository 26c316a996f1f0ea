"""Pure parts of the per-node MIG step: config source choice, strategy, verification, paused operands."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step


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
    assert node_step.gpu_allocatable(node) == {"nvidia.com/mig-1g.10gb": 14}
    assert node_step.resource_mismatches({"nvidia.com/mig-1g.10gb": 14}, node_step.gpu_allocatable(node)) == []
    problems = node_step.resource_mismatches({"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8},
                                             node_step.gpu_allocatable(node))
    assert problems == ["allocatable nvidia.com/mig-1g.10gb is 14, plan says 16",
                        "allocatable nvidia.com/mig-2g.20gb is 0, plan says 8"]
    assert node_step.label_mismatches({"nvidia.com/gpu.count": "4"}, {"nvidia.com/gpu.count": "4"}) == []
    assert node_step.label_mismatches({"nvidia.com/gpu.count": "4"}, {}) == [
        "GFD label nvidia.com/gpu.count is None, plan says '4'"]


def test_paused_deploy_labels():
    node = {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
                                    "nvidia.com/gpu.deploy.dcgm": "true"}}}
    assert node_step.paused_deploy_labels(node) == ["nvidia.com/gpu.deploy.device-plugin"]
