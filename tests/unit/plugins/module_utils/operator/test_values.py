"""Chart values against NVIDIA's real chart (gpu-operator v26.7.0 values.yaml, test data in ../shared/nvidia)."""

import os

import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import values

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
