"""Settings validation, values, ConfigMaps and ClusterPolicy patch of the gpu_operator role (pure logic), and chart
values against NVIDIA's real chart (gpu-operator v26.7.0 values.yaml, test data in ../shared/nvidia)."""

import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.config_check import mig_config_findings
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import values
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.values import (
    build_values,
    cluster_policy_patch,
    configmaps,
    settings_problems,
    single_strategy_warnings,
)

H100 = "NVIDIA H100 80GB HBM3"
A100_40 = "NVIDIA A100-SXM4-40GB"


def settings(**overrides):
    base = dict(driver_enabled=True, toolkit_enabled=True, dcgm_exporter_enabled=True, mig_strategy="mixed",
                mig_manager_enabled=True, mig_with_reboot=False, mig_default_config="all-disabled", mig_config=None,
                mig_config_name="gpufleet-mig-parted-config", device_plugin_config=None,
                device_plugin_config_name="gpufleet-device-plugin-config", device_plugin_config_default=None,
                extra_values={})
    base.update(overrides)
    return base


def time_slicing(name="nvidia.com/gpu", kind="timeSlicing", replicas=4, flags=None):
    config = {"version": "v1", "sharing": {kind: {"resources": [{"name": name, "replicas": replicas}]}}}
    if flags:
        config["flags"] = flags
    return config


def test_values_follow_the_settings():
    values = build_values(settings(driver_enabled=False, mig_with_reboot=True, mig_strategy="single"))
    assert values["driver"] == {"enabled": False}
    assert values["mig"] == {"strategy": "single"}
    # WITH_REBOOT as NVIDIA documents it: a migManager.env entry with the string "true" (GPU Operator docs,
    # https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html)
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}]
    assert values["migManager"]["config"] == {"name": "", "default": "all-disabled"}
    assert "devicePlugin" not in values


def test_extra_values_merge_and_env_entries_are_appended():
    extra = {"migManager": {"env": [{"name": "FOO", "value": "1"}]}, "dcgmExporter": {"serviceMonitor": {"enabled": False}}}
    values = build_values(settings(mig_with_reboot=True, extra_values=extra))
    assert values["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}, {"name": "FOO", "value": "1"}]
    assert values["dcgmExporter"] == {"enabled": True, "serviceMonitor": {"enabled": False}}
    assert settings_problems(settings(mig_with_reboot=True, extra_values=extra)) == []


@pytest.mark.parametrize("overrides, expected", [
    (dict(mig_strategy="dynamic"), "mig_strategy 'dynamic' is not one of none|single|mixed"),
    (dict(mig_default_config="all-balanced"), "mig_default_config 'all-balanced'"),
    (dict(mig_config={"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}},
          mig_manager_enabled=False), "mig_manager_enabled is false"),
    (dict(extra_values={"mig": {"strategy": "single"}}), "extra_values sets mig.strategy='single'"),
    (dict(extra_values={"migManager": {"env": [{"name": "WITH_REBOOT", "value": "true"}]}}), "use the mig_with_reboot"),
    (dict(extra_values={"notAChartKey": {}}), "extra_values has key(s) notAChartKey"),
    (dict(device_plugin_config={"ts": time_slicing(kind="mps")}), "device_plugin_config[ts].sharing.mps: MPS sharing with MIG strategy mixed"),
    (dict(device_plugin_config={"ts": time_slicing(replicas=0)}), "replicas must be an integer >= 2"),
    (dict(device_plugin_config={"ts": time_slicing(replicas=1)}), "replicas must be an integer >= 2, got 1"),
    (dict(device_plugin_config={"a": time_slicing()}, device_plugin_config_default="b"), "names no entry"),
    (dict(device_plugin_config_default="any"), "device_plugin_config is empty"),
    (dict(mig_config={"version": "v1", "mig-configs": {}}, mig_config_name="Bad_Name"), "not a valid Kubernetes object name"),
])
def test_bad_settings_are_rejected_with_a_reason(overrides, expected):
    problems = settings_problems(settings(**overrides))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize("overrides, expected", [
    # NVIDIA's device plugin accepts these (tests/integration/oracle runs them through its parser): warned, not refused.
    (dict(device_plugin_config={"ts": time_slicing(name="nvidia.com/mig-1g.10gb")}, mig_strategy="single"),
     "exists only under MIG strategy mixed"),
    (dict(device_plugin_config={"a": dict(time_slicing(), bogus=1)}), "field(s) bogus are ignored"),
    (dict(device_plugin_config={"default": time_slicing(), "b": time_slicing()}), "nodes without the nvidia.com/device-plugin.config label get no sharing"),
    (dict(device_plugin_config={"only": time_slicing()}), "a single config 'only'"),
])
def test_configs_nvidia_accepts_are_warned_about_not_refused(overrides, expected):
    assert settings_problems(settings(**overrides)) == []
    assert any(expected in warning for warning in values.settings_warnings(settings(**overrides))), values.settings_warnings(settings(**overrides))


def test_several_configs_without_a_default_are_accepted_and_unlabelled_nodes_get_no_sharing():
    chosen = settings(device_plugin_config={"a": time_slicing(), "b": time_slicing(replicas=2)})
    assert settings_problems(chosen) == []
    assert values.settings_warnings(chosen) == []
    assert "every other node gets no config (no sharing" in values.device_plugin_config_selection(chosen)
    assert "every other node gets config 'b'" in values.device_plugin_config_selection(dict(chosen, device_plugin_config_default="b"))


def test_mps_is_fine_without_mixed_and_the_operators_strategy_wins_over_the_files_flag():
    """The operator's MIG_STRATEGY env (from the ClusterPolicy) wins over flags.migStrategy in the file."""
    assert settings_problems(settings(mig_strategy="single", device_plugin_config={"m": time_slicing(kind="mps")})) == []
    assert settings_problems(settings(mig_strategy="single", device_plugin_config={
        "m": time_slicing(kind="mps", flags={"migStrategy": "mixed"})})) == []
    problems = settings_problems(settings(mig_strategy="mixed", device_plugin_config={
        "m": time_slicing(kind="mps", flags={"migStrategy": "single"})}))
    assert any("MPS sharing with MIG strategy mixed" in p for p in problems)


def test_configmaps_and_patch():
    mig_config = {"version": "v1", "mig-configs": {"small": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    s = settings(mig_config=mig_config, device_plugin_config={"any": time_slicing()}, device_plugin_config_default="any")
    maps = configmaps(s, "gpu-operator", yaml.safe_dump)
    assert [m["metadata"]["name"] for m in maps] == ["gpufleet-mig-parted-config", "gpufleet-device-plugin-config"]
    assert yaml.safe_load(maps[0]["data"]["config.yaml"]) == mig_config  # key config.yaml (gpu-operator-mig.html)
    assert yaml.safe_load(maps[1]["data"]["any"]) == time_slicing()
    assert cluster_policy_patch(s) == {"spec": {
        "mig": {"strategy": "mixed"},
        "migManager": {"config": {"name": "gpufleet-mig-parted-config", "default": "all-disabled"}},
        "devicePlugin": {"config": {"name": "gpufleet-device-plugin-config", "default": "any"}},
    }}
    assert build_values(s)["devicePlugin"] == {"config": {"name": "gpufleet-device-plugin-config", "default": "any"}}


def test_custom_mig_config_checked_against_inventory_models():
    config = {"version": "v1", "mig-configs": {
        "ok-h100": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "typo": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.7gb": 1}}],
        "too-many": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}],
        "balanced": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
        # filtered to a model not in the inventory: not this fleet's business
        "h200-only": [{"device-filter": "0x233510DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    }}
    problems, names, mixed = mig_config_findings(config, [H100, A100_40])
    assert names == ["balanced", "h200-only", "ok-h100", "too-many", "typo"]
    assert len(problems) == 2, problems
    assert "mig_config[typo][0]: profile 1g.7gb exists on no GPU model of the inventory" in problems[1]
    assert "mig_config[too-many][0]: 3 x 3g.40gb fits on no GPU" in problems[0]
    assert mixed == ["balanced"]
    assert single_strategy_warnings(settings(mig_strategy="single"), mixed)
    assert not single_strategy_warnings(settings(mig_strategy="mixed"), mixed)


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
CHART_VALUES = os.path.join(ROOT, "..", "shared", "nvidia", "gpu-operator-v26.7.0", "deployments", "gpu-operator",
                            "values.yaml")

# Deliberate differences between our accepted top-level keys and the chart's: none. Were one needed, it
# would be listed here as {key: reason} and the comparison below would allow exactly it.
DELIBERATE_DIFFERENCES = {}


def _chart_values():
    # No skip: without NVIDIA's file the comparison cannot be made, and that is a failure.
    assert os.path.isfile(CHART_VALUES), "NVIDIA's chart values.yaml is missing at %s" % CHART_VALUES
    with open(CHART_VALUES) as handle:
        return yaml.safe_load(handle)


def _settings(**overrides):
    base = dict(mig_strategy="mixed", mig_default_config="all-disabled", mig_config=None,
                device_plugin_config=None, extra_values={})
    base.update(overrides)
    return base


def test_accepted_top_level_keys_are_the_charts():
    chart_keys = set(_chart_values())
    assert set(values.KNOWN_TOP_LEVEL_KEYS) ^ chart_keys == set(DELIBERATE_DIFFERENCES)
    assert {"draDriver", "extraObjects", "node-feature-discovery"} <= set(values.KNOWN_TOP_LEVEL_KEYS)
    assert "psp" not in values.KNOWN_TOP_LEVEL_KEYS


def test_real_keys_are_accepted_and_psp_is_refused():
    extra = {"draDriver": {"enabled": False}, "extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap"}]}
    assert values.settings_problems(_settings(extra_values=extra)) == []
    problems = values.settings_problems(_settings(extra_values={"psp": {"enabled": False}}))
    assert problems == ["extra_values has key(s) psp that the GPU Operator chart does not know"]


def test_every_chart_key_passes_through_to_the_values():
    chart = _chart_values()
    owned = ("mig", "driver", "toolkit", "dcgmExporter", "migManager", "devicePlugin")
    extra = dict((key, chart[key]) for key in chart if key not in owned)
    assert values.settings_problems(_settings(extra_values=extra)) == []
    built = values.build_values(_settings(extra_values=extra))
    assert built["extraObjects"] == chart["extraObjects"] and built["draDriver"] == chart["draDriver"]


def test_default_runtime_is_warned_about_not_refused():
    chart = _chart_values()
    assert "defaultRuntime" not in chart["operator"]  # the chart has no such value any more
    settings = _settings(extra_values={"operator": {"defaultRuntime": "containerd"}})
    assert values.settings_problems(settings) == []
    (warning,) = values.settings_warnings(settings)
    assert warning.startswith("extra_values sets operator.defaultRuntime='containerd', which is deprecated and unused")
    assert values.settings_warnings(_settings(extra_values={"operator": {"logging": {"level": "info"}}})) == []
    assert values.settings_warnings(_settings()) == []


def test_custom_mig_configmap_key_is_config_yaml():
    maps = values.configmaps(_settings(mig_config={"version": "v1", "mig-configs": {}}, mig_config_name="x"),
                             "gpu-operator", yaml.safe_dump)
    assert list(maps[0]["data"]) == ["config.yaml"]


def _flat(tree, prefix=""):
    for key, value in tree.items():
        path = "%s.%s" % (prefix, key) if prefix else key
        if isinstance(value, dict):
            yield from _flat(value, path)
        else:
            yield path, value


def test_the_mirrored_repositories_and_pull_secrets_are_every_one_of_the_charts():
    subchart = os.path.join(os.path.dirname(CHART_VALUES), "charts", "node-feature-discovery", "values.yaml")
    with open(subchart) as handle:
        nfd = yaml.safe_load(handle)
    assert nfd["imagePullSecrets"] == [], "NFD takes [{name: ...}] at its top level"
    chart = dict(_flat(values.deep_merge(_chart_values(), {"node-feature-discovery": nfd})))
    repositories = dict((p, v) for p, v in chart.items() if p.endswith("repository") and v)
    assert values.IMAGE_REPOSITORIES == repositories
    secrets = set(p.rsplit(".", 1)[0] for p in chart if p.endswith(".imagePullSecrets") and "." not in p.rsplit(".", 1)[0])
    template = open(os.path.join(os.path.dirname(CHART_VALUES), "templates", "clusterpolicy.yaml")).read()
    in_template = set(re.findall(r"\.Values\.([A-Za-z]+)\.imagePullSecrets", template)) | {"operator"}
    assert set(values.PULL_SECRET_COMPONENTS) == (secrets - {"node-feature-discovery"}) | in_template


def test_a_registry_mirror_and_pull_secrets_reach_every_image():
    built = values.build_values(_settings(image_registry="registry.example.com:5000/mirror",
                                          image_pull_secrets=["nvcr-mirror"]))
    flat = dict(_flat(built))
    assert flat["toolkit.repository"] == "registry.example.com:5000/mirror/nvidia/k8s"
    assert flat["node-feature-discovery.image.repository"] == "registry.example.com:5000/mirror/nfd/node-feature-discovery"
    assert all(flat[p].startswith("registry.example.com:5000/mirror/") for p in values.IMAGE_REPOSITORIES)
    assert all(flat["%s.imagePullSecrets" % c] == ["nvcr-mirror"] for c in values.PULL_SECRET_COMPONENTS)
    assert built["node-feature-discovery"]["imagePullSecrets"] == [{"name": "nvcr-mirror"}]


def test_bad_registry_and_secret_names_and_contradicting_layers_are_refused():
    problems = values.settings_problems(_settings(image_registry="https://registry.example.com",
                                                  image_pull_secrets=["Bad_Name"]))
    assert problems == ["image_registry 'https://registry.example.com' is not a registry host[:port][/path] "
                        "(e.g. registry.example.com:5000/nvidia-mirror)",
                        "image_pull_secrets entry 'Bad_Name' is not a valid Kubernetes object name"]
    problems = values.settings_problems(_settings(
        image_registry="mirror.example.com",
        values_files=[{"path": "/etc/gpu/site.yaml",
                       "values": {"toolkit": {"repository": "other.example.com/k8s"}, "psp": {}}},
                      {"path": "/etc/gpu/pool.yaml", "values": {"mig": {"strategy": "single"}}}]))
    assert problems == [
        "values file /etc/gpu/site.yaml has key(s) psp that the GPU Operator chart does not know",
        "values file /etc/gpu/site.yaml sets toolkit.repository='other.example.com/k8s' but the role variable for it "
        "says 'mirror.example.com/nvidia/k8s'; set it once",
        "values file /etc/gpu/pool.yaml sets mig.strategy='single' but the role variable for it says 'mixed'; set it once"]


def test_values_files_merge_in_order_before_extra_values():
    built = values.build_values(_settings(
        values_files=[{"path": "a.yaml", "values": {"dcgm": {"enabled": True, "version": "1"}, "cdi": {"enabled": False}}},
                      {"path": "b.yaml", "values": {"dcgm": {"version": "2"}, "migManager": {"env": [{"name": "A", "value": "1"}]}}}],
        extra_values={"dcgm": {"version": "3"}, "migManager": {"env": [{"name": "B", "value": "2"}]}}, mig_with_reboot=True))
    assert built["dcgm"] == {"enabled": True, "version": "3"} and built["cdi"] == {"enabled": False}
    assert built["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}, {"name": "A", "value": "1"},
                                          {"name": "B", "value": "2"}]


@pytest.mark.parametrize("layer", [{"clusterPolicy": {"deployCR": False}},
                                   {"clusterPolicy": {"deployCR": False}, "gpuCluster": {"deployCR": True}},
                                   {"gpuCluster": {"deployCR": True}}])
def test_the_gpucluster_dra_stack_is_refused_naming_both_settings(layer):
    for settings in (_settings(extra_values=layer), _settings(values_files=[{"path": "dra.yaml", "values": layer}])):
        problems = values.settings_problems(settings)
        assert len(problems) == 1 and problems[0].startswith("clusterPolicy.deployCR=")
        assert "gpuCluster.deployCR=" in problems[0] and "keep clusterPolicy.deployCR=true" in problems[0]
    assert values.settings_problems(_settings(extra_values={"clusterPolicy": {"deployCR": True}})) == []
