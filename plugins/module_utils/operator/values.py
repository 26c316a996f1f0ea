# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Turn the gpu_operator role's settings into GPU Operator Helm values, ConfigMaps and a
ClusterPolicy patch, and reject unknown or contradictory settings before anything is installed.

Pure Python, no I/O. Value keys are those of the NVIDIA GPU Operator chart v26.7.0
(NVIDIA/gpu-operator deployments/gpu-operator/values.yaml); ClusterPolicy fields from api/nvidia/v1/clusterpolicy_types.go.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.device_plugin_config import (
    check_config,
    selection_text,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import nvidia_drivers as driver_pools

MIG_STRATEGIES = ("none", "single", "mixed")  # ClusterPolicy spec.mig.strategy enum (clusterpolicy_types.go)
MIG_DEFAULT_CONFIGS = ("all-disabled", "")  # CRD enum of spec.migManager.config.default (clusterpolicy_types.go)
MIG_CONFIG_KEY = "config.yaml"  # a custom MIG ConfigMap must hold this key (chart values.yaml, migManager.config)

# Top-level keys of the real chart's values.yaml, NVIDIA/gpu-operator v26.7.0
# deployments/gpu-operator/values.yaml (its NFD subchart's values sit under the top-level key
# node-feature-discovery there too). A unit test compares this set with that file.
KNOWN_TOP_LEVEL_KEYS = frozenset((
    "platform", "nfd", "psa", "cdi", "sandboxWorkloads", "hostPaths", "daemonsets", "validator",
    "operator", "mig", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd", "migManager",
    "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager",
    "sandboxDevicePlugin", "ccManager", "kataManager", "kataSandboxDevicePlugin", "clusterPolicy",
    "gpuCluster", "draDriver", "extraObjects", "node-feature-discovery",
))

# Values the chart still accepts but that do nothing: path -> why (ClusterPolicy CRD v26.7.0
# deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml marks operator.defaultRuntime
# "Deprecated: DefaultRuntime is no longer used by the gpu-operator. This is instead, detected at
# runtime."; no template of the chart reads it).
DEPRECATED_VALUES = {
    "operator.defaultRuntime": "is deprecated and unused: the GPU Operator detects the container runtime "
                               "itself (ClusterPolicy CRD v26.7.0); remove it from extra_values",
}

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

# Every image repository of chart v26.7.0 (deployments/gpu-operator/values.yaml, NFD subchart included) with its
# default; a unit test compares them with that file. A mirror keeps each image's path below the registry host, as
# NVIDIA's air-gapped install guide has it
# (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/install-gpu-operator-air-gapped.html).
IMAGE_REPOSITORIES = {
    "validator.repository": "nvcr.io/nvidia", "operator.repository": "nvcr.io/nvidia",
    "driver.repository": "nvcr.io/nvidia", "driver.manager.repository": "nvcr.io/nvidia/cloud-native",
    "toolkit.repository": "nvcr.io/nvidia/k8s", "devicePlugin.repository": "nvcr.io/nvidia",
    "dcgm.repository": "nvcr.io/nvidia/cloud-native", "dcgmExporter.repository": "nvcr.io/nvidia/k8s",
    "gfd.repository": "nvcr.io/nvidia", "migManager.repository": "nvcr.io/nvidia/cloud-native",
    "nodeStatusExporter.repository": "nvcr.io/nvidia", "gds.repository": "nvcr.io/nvidia/cloud-native",
    "gdrcopy.repository": "nvcr.io/nvidia/cloud-native",
    "vgpuManager.driverManager.repository": "nvcr.io/nvidia/cloud-native",
    "vgpuDeviceManager.repository": "nvcr.io/nvidia/cloud-native", "vfioManager.repository": "nvcr.io/nvidia/cloud-native",
    "vfioManager.driverManager.repository": "nvcr.io/nvidia/cloud-native",
    "sandboxDevicePlugin.repository": "nvcr.io/nvidia", "kataSandboxDevicePlugin.repository": "nvcr.io/nvidia/cloud-native",
    "ccManager.repository": "nvcr.io/nvidia/cloud-native", "draDriver.repository": "nvcr.io/nvidia",
    "node-feature-discovery.image.repository": "registry.k8s.io/nfd/node-feature-discovery",
}
# Components whose pods take imagePullSecrets from the chart (templates/clusterpolicy.yaml and operator.yaml:
# a list of Secret names); the NFD subchart takes [{name: ...}] at its top level.
PULL_SECRET_COMPONENTS = (
    "validator", "operator", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd", "migManager",
    "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager", "kataManager",
    "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager", "draDriver",
)
_REGISTRY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


def _nest(path, value):
    tree = value
    for key in reversed(path.split(".")):
        tree = {key: tree}
    return tree


def mirrored_repository(registry, default):
    """``default`` (host/path) with its host replaced by ``registry`` (host[:port][/path])."""
    return "%s/%s" % (registry.rstrip("/"), default.split("/", 1)[1])


class OperatorSettingsError(ValueError):
    """Settings that must not reach the cluster; ``problems`` lists every reason."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(OperatorSettingsError, self).__init__("; ".join(self.problems))


def _get(tree, path, default=None):
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def deep_merge(base, extra):
    """``extra`` merged into a copy of ``base``: dicts recursively, anything else replaced (Helm's rule)."""
    merged = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _flatten(tree, prefix=""):
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are leaves."""
    flat = {}
    for key, value in tree.items():
        path = "%s.%s" % (prefix, key) if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, path))
        else:
            flat[path] = value
    return flat


def _check_k8s_name(what, name, problems, limit=253):
    if not isinstance(name, str) or not name or len(name) > limit or not _K8S_NAME.match(name) or ".." in name \
            or (limit == 63 and "." in name):
        problems.append("%s %r is not a valid Kubernetes object name" % (what, name))


def device_plugin_config_findings(configs, mig_strategy):
    """(problems, warnings, {name: effect}) of a named set of device-plugin configs used under the operator's
    ``mig_strategy``: a config is a problem exactly when NVIDIA's device plugin would refuse it (see
    device_plugin_config.check_config); ``effect`` is {'sharing', 'resources', 'fail_requests_greater_than_one'} of each accepted config."""
    if not isinstance(configs, dict) or not configs:
        return ["device_plugin_config must be a non-empty mapping of config name to device-plugin config"], [], {}
    problems, warnings, effects = [], [], {}
    for name in sorted(configs, key=str):
        found, warned, effect = check_config("device_plugin_config[%s]" % name, configs[name], mig_strategy)
        problems.extend(found)
        warnings.extend(warned)
        if effect is not None:
            effects[name] = effect
    return problems, warnings, effects


def device_plugin_config_problems(configs, mig_strategy):
    """Problems of a named set of device-plugin configs (time-slicing or MPS; NVIDIA/k8s-device-plugin api/config/v1)."""
    return device_plugin_config_findings(configs, mig_strategy)[0]


def settings_problems(settings, mig_config_problems=None):
    """Every reason the settings must not be installed (empty list when they are fine).

    ``mig_config_problems`` is the list the planning library found in a custom MIG config
    (it needs the GPU models of the inventory, so the caller runs it).
    """
    problems = list(mig_config_problems or [])
    # Names of what the role creates: checked whether or not a config is given, before anything is applied.
    if settings.get("namespace") is not None:
        _check_k8s_name("namespace", settings["namespace"], problems, limit=63)
    strategy = settings.get("mig_strategy")
    if strategy not in MIG_STRATEGIES:
        problems.append("mig_strategy %r is not one of %s" % (strategy, "|".join(MIG_STRATEGIES)))
    if settings.get("mig_default_config", "all-disabled") not in MIG_DEFAULT_CONFIGS:
        problems.append("mig_default_config %r is not one of 'all-disabled' or '' (ClusterPolicy enum)"
                        % settings.get("mig_default_config"))
    if settings.get("mig_config") is not None:
        if not settings.get("mig_manager_enabled", True):
            problems.append("mig_config is set but mig_manager_enabled is false: nothing would apply it")
    if settings.get("mig_config") is not None or settings.get("mig_config_name") is not None:
        _check_k8s_name("mig_config_name", settings.get("mig_config_name"), problems)
    if settings.get("mig_with_reboot") and not settings.get("mig_manager_enabled", True):
        problems.append("mig_with_reboot is true but mig_manager_enabled is false")
    if settings.get("device_plugin_config") is not None or settings.get("device_plugin_config_name") is not None:
        _check_k8s_name("device_plugin_config_name", settings.get("device_plugin_config_name"), problems)
    if settings.get("device_plugin_config") is not None:
        configs = settings["device_plugin_config"]
        problems.extend(device_plugin_config_problems(configs, strategy))
        default = settings.get("device_plugin_config_default")
        if isinstance(configs, dict) and default and default not in configs:
            problems.append("device_plugin_config_default %r names no entry of device_plugin_config (has: %s)"
                            % (default, ", ".join(sorted(configs))))
    elif settings.get("device_plugin_config_default"):
        problems.append("device_plugin_config_default is set but device_plugin_config is empty")
    registry = settings.get("image_registry")
    if registry and (not isinstance(registry, str) or not _REGISTRY.match(registry)):
        problems.append("image_registry %r is not a registry host[:port][/path] (e.g. registry.example.com:5000/nvidia-mirror)"
                        % (registry,))
    secrets = settings.get("image_pull_secrets") or []
    if not isinstance(secrets, list):
        problems.append("image_pull_secrets must be a list of Secret names")
    else:
        for name in secrets:
            _check_k8s_name("image_pull_secrets entry", name, problems)
    problems.extend(driver_pools.pool_problems(settings.get("nvidia_drivers"), settings.get("driver_group_nodes"),
                                               settings.get("driver_enabled", True)))
    owned = _flatten(_owned_values(settings))
    owned.pop("migManager.env", None)  # extra env entries are appended, see build_values
    layers = _value_layers(settings, problems)
    merged = {}
    for _where, layer in layers:
        merged = deep_merge(merged, layer)
    if _get(merged, ("clusterPolicy", "deployCR"), True) is not True or _get(merged, ("gpuCluster", "deployCR"), False):
        problems.append(
            "clusterPolicy.deployCR=%s, gpuCluster.deployCR=%s: chart v26.7.0 then deploys the GPUCluster (DRA) stack, "
            "which its values.yaml marks experimental, instead of the ClusterPolicy this collection installs, validates "
            "and changes MIG layouts through (MIG Manager, device plugin, GFD); keep clusterPolicy.deployCR=true"
            % (_get(merged, ("clusterPolicy", "deployCR"), True), _get(merged, ("gpuCluster", "deployCR"), False)))
    for where, layer in layers:
        unknown = sorted(set(layer) - KNOWN_TOP_LEVEL_KEYS)
        if unknown:
            problems.append("%s has key(s) %s that the GPU Operator chart does not know" % (where, ", ".join(unknown)))
        layer_env = _get(layer, ("migManager", "env")) or []
        if any(isinstance(entry, dict) and entry.get("name") == "WITH_REBOOT" for entry in layer_env):
            problems.append("%s sets migManager.env WITH_REBOOT; use the mig_with_reboot setting instead" % where)
        for path, value in sorted(_flatten(layer).items()):
            if path in owned and owned[path] != value:
                problems.append("%s sets %s=%r but the role variable for it says %r; set it once"
                                % (where, path, value, owned[path]))
    return problems


def _value_layers(settings, problems=None):
    """[(where, values)] merged over the role's own values, in order: each values file, then extra_values."""
    layers = []
    for entry in settings.get("values_files") or []:
        layers.append(("values file %s" % entry.get("path"), entry.get("values") or {}))
    layers.append(("extra_values", settings.get("extra_values") or {}))
    checked = []
    for where, layer in layers:
        if not isinstance(layer, dict):
            if problems is not None:
                problems.append("%s must be a mapping of chart values, got %s" % (where, type(layer).__name__))
            continue
        checked.append((where, layer))
    return checked


def _owned_values(settings):
    """The values the role derives from its own variables (before extra_values)."""
    values = {
        "driver": {"enabled": bool(settings.get("driver_enabled", True))},
        "toolkit": {"enabled": bool(settings.get("toolkit_enabled", True))},
        "mig": {"strategy": settings.get("mig_strategy")},
        "dcgmExporter": {"enabled": bool(settings.get("dcgm_exporter_enabled", True))},
        "migManager": {
            "enabled": bool(settings.get("mig_manager_enabled", True)),
            # WITH_REBOOT as a migManager.env entry, as NVIDIA documents for CSPs
            # (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html). The value is a string.
            "env": [{"name": "WITH_REBOOT", "value": "true"}] if settings.get("mig_with_reboot") else [],
            "config": {
                "name": settings.get("mig_config_name") if settings.get("mig_config") is not None else "",
                "default": settings.get("mig_default_config", "all-disabled"),
            },
        },
    }
    if settings.get("nvidia_drivers"):
        # One NVIDIADriver per pool, applied by the role; the chart's own single default NVIDIADriver would take every
        # GPU node no pool selects (chart v26.7.0 templates/nvidiadriver.yaml).
        values["driver"]["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": False}
    if settings.get("device_plugin_config") is not None:
        values["devicePlugin"] = dict(values.get("devicePlugin") or {}, config={
            "name": settings.get("device_plugin_config_name"),
            "default": settings.get("device_plugin_config_default") or "",
        })
    registry = settings.get("image_registry")
    if registry and isinstance(registry, str):
        for path, default in IMAGE_REPOSITORIES.items():
            values = deep_merge(values, _nest(path, mirrored_repository(registry, default)))
    secrets = settings.get("image_pull_secrets")
    if secrets and isinstance(secrets, list):
        for component in PULL_SECRET_COMPONENTS:
            values = deep_merge(values, {component: {"imagePullSecrets": list(secrets)}})
        values = deep_merge(values, {"node-feature-discovery": {"imagePullSecrets": [{"name": s} for s in secrets]}})
    return values


def build_values(settings):
    """Helm values for the chart: the role's own settings, then each values file and extra_values merged on top."""
    owned = _owned_values(settings)
    values = copy.deepcopy(owned)
    env = list(owned["migManager"]["env"])
    for _where, layer in _value_layers(settings):
        values = deep_merge(values, layer)
        env += list(_get(layer, ("migManager", "env")) or [])
    if env:
        values["migManager"]["env"] = env
    return values


def nvidia_drivers(settings, chart_values):
    """The NVIDIADriver of each driver pool (nvidia_drivers.render_pools), with the chart's driver image repository,
    image and pull secrets from ``chart_values`` (build_values) where a pool gives none."""
    driver = chart_values.get("driver") or {}
    return driver_pools.render_pools(settings.get("nvidia_drivers"), settings.get("driver_group_nodes") or {},
                                     driver.get("repository"), driver.get("image"), driver.get("imagePullSecrets"))


def cluster_policy_patch(settings):
    """The ClusterPolicy spec fields the role keeps in line without a reinstall (merge patch)."""
    owned = _owned_values(settings)
    spec = {
        "mig": {"strategy": owned["mig"]["strategy"]},
        "migManager": {"config": dict(owned["migManager"]["config"])},
    }
    dp_config = _get(owned, ("devicePlugin", "config"))
    if dp_config:
        spec["devicePlugin"] = {"config": dict(dp_config)}
    return {"spec": spec}


def configmaps(settings, namespace, dump_yaml):
    """ConfigMaps the role manages: the custom MIG config (key config.yaml) and device-plugin configs.

    ``dump_yaml`` renders a mapping as YAML text (injected so this module needs no YAML library).
    """
    managed = []
    labels = {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"}
    if settings.get("mig_config") is not None:
        managed.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": settings["mig_config_name"], "namespace": namespace, "labels": labels},
            "data": {MIG_CONFIG_KEY: dump_yaml(settings["mig_config"])},
        })
    if settings.get("device_plugin_config") is not None:
        managed.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": settings["device_plugin_config_name"], "namespace": namespace, "labels": labels},
            "data": dict((name, dump_yaml(config)) for name, config in sorted(settings["device_plugin_config"].items())),
        })
    return managed


_MISSING = object()


def settings_warnings(settings):
    """Warnings (not errors) about the settings: chart values that are deprecated and do nothing."""
    warnings = []
    for where, layer in _value_layers(settings):
        for path, why in sorted(DEPRECATED_VALUES.items()):
            node = layer
            for key in path.split("."):
                node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
            if node is not _MISSING:
                warnings.append("%s sets %s=%r, which %s" % (where, path, node, why.replace("extra_values", where)))
    return warnings + device_plugin_config_warnings(settings)


def device_plugin_config_warnings(settings):
    """What the device plugin ignores in the configs, and unlabelled nodes that get no sharing although a
    config looks like a default (the operator's config manager never picks a key by its name or count)."""
    configs = settings.get("device_plugin_config")
    if not isinstance(configs, dict) or not configs:
        return []
    warnings = device_plugin_config_findings(configs, settings.get("mig_strategy"))[1]
    if not settings.get("device_plugin_config_default") and ("default" in configs or len(configs) == 1):
        warnings.append("device_plugin_config has %s but device_plugin_config_default is unset: nodes without the "
                        "nvidia.com/device-plugin.config label get no sharing (the GPU Operator runs the config manager "
                        "with FALLBACK_STRATEGIES=empty); set device_plugin_config_default to use it there"
                        % ("a key named 'default'" if "default" in configs else "a single config %r" % next(iter(configs))))
    return warnings


def device_plugin_config_selection(settings):
    """One line: which nodes get which device-plugin config (None when the role manages none)."""
    configs = settings.get("device_plugin_config")
    if not isinstance(configs, dict) or not configs:
        return None
    return selection_text(configs, settings.get("device_plugin_config_default"))


def single_strategy_warnings(settings, mixed_profile_configs):
    """Warn about named MIG configs that the single strategy cannot advertise (GFD internal/lm/mig-strategy.go, NVIDIA/k8s-device-plugin).

    ``mixed_profile_configs`` lists config names whose layout puts more than one profile on a node.
    """
    if settings.get("mig_strategy") != "single" or not mixed_profile_configs:
        return []
    return ["MIG config(s) %s mix profiles on a node; under mig_strategy single GFD marks such nodes "
            "<model>-MIG-INVALID and the device plugin advertises nothing" % ", ".join(sorted(mixed_profile_configs))]
