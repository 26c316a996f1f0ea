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

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import RESOURCE_GPU, parse_resource

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

# Device-plugin config file: top-level fields and sharing strategies (NVIDIA/k8s-device-plugin api/config/v1/config.go,
# README "With CUDA Time-Slicing").
_DP_TOP_LEVEL = frozenset(("version", "flags", "resources", "sharing", "imex"))
_DP_SHARING = frozenset(("timeSlicing", "mps"))
_DP_SHARING_FIELDS = frozenset(("renameByDefault", "failRequestsGreaterThanOne", "resources"))
_DP_RESOURCE_FIELDS = frozenset(("name", "replicas", "rename", "devices"))
_MIG_RESOURCE_PROFILE = re.compile(r"^[0-9]+g\.[0-9]+gb([.+-][a-z.]+)?$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


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


def device_plugin_config_problems(configs, mig_strategy):
    """Problems of a named set of device-plugin configs (time-slicing or MPS; NVIDIA/k8s-device-plugin api/config/v1)."""
    problems = []
    if not isinstance(configs, dict) or not configs:
        return ["device_plugin_config must be a non-empty mapping of config name to device-plugin config"]
    for name, config in sorted(configs.items()):
        where = "device_plugin_config[%s]" % name
        if not isinstance(config, dict):
            problems.append("%s must be a mapping" % where)
            continue
        unknown = sorted(set(config) - _DP_TOP_LEVEL)
        if unknown:
            problems.append("%s has unknown field(s) %s (known: %s)" % (where, ", ".join(unknown), ", ".join(sorted(_DP_TOP_LEVEL))))
        if config.get("version") != "v1":
            problems.append("%s.version must be 'v1', got %r" % (where, config.get("version")))
        flag_strategy = _get(config, ("flags", "migStrategy"))
        if flag_strategy is not None and flag_strategy not in MIG_STRATEGIES:
            problems.append("%s.flags.migStrategy %r is not one of %s" % (where, flag_strategy, "|".join(MIG_STRATEGIES)))
        # The operator sets MIG_STRATEGY on the device plugin and GFD from the ClusterPolicy, and that env wins
        # over flags.migStrategy in the file (NVIDIA/k8s-device-plugin api/config/v1/flags.go; NVIDIA/gpu-operator
        # controllers/object_controls.go applyMIGConfiguration): the file's flag only counts without the operator's.
        effective_strategy = mig_strategy or flag_strategy
        sharing = config.get("sharing") or {}
        if not isinstance(sharing, dict):
            problems.append("%s.sharing must be a mapping" % where)
            continue
        unknown = sorted(set(sharing) - _DP_SHARING)
        if unknown:
            problems.append("%s.sharing has unknown field(s) %s (known: mps, timeSlicing)" % (where, ", ".join(unknown)))
        if "timeSlicing" in sharing and "mps" in sharing:
            problems.append("%s.sharing sets both timeSlicing and mps; they are mutually exclusive" % where)
        if "mps" in sharing and effective_strategy == "mixed":
            # The device plugin refuses this combination: "using --mig-strategy=mixed is not supported with MPS"
            # (NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go).
            problems.append("%s uses MPS sharing with MIG strategy mixed, which the device plugin rejects" % where)
        for kind in sorted(set(sharing) & _DP_SHARING):
            block = sharing[kind] or {}
            if not isinstance(block, dict):
                problems.append("%s.sharing.%s must be a mapping" % (where, kind))
                continue
            unknown = sorted(set(block) - _DP_SHARING_FIELDS)
            if unknown:
                problems.append("%s.sharing.%s has unknown field(s) %s" % (where, kind, ", ".join(unknown)))
            resources = block.get("resources")
            if not isinstance(resources, list) or not resources:
                problems.append("%s.sharing.%s.resources must be a non-empty list" % (where, kind))
                continue
            for index, resource in enumerate(resources):
                rwhere = "%s.sharing.%s.resources[%d]" % (where, kind, index)
                if not isinstance(resource, dict):
                    problems.append("%s must be a mapping" % rwhere)
                    continue
                unknown = sorted(set(resource) - _DP_RESOURCE_FIELDS)
                if unknown:
                    problems.append("%s has unknown field(s) %s" % (rwhere, ", ".join(unknown)))
                rname = resource.get("name", "")
                parsed = parse_resource(str(rname))
                if not parsed or parsed["shared"] or not (
                        str(rname) == RESOURCE_GPU or _MIG_RESOURCE_PROFILE.match(parsed["profile"] or "")):
                    problems.append("%s.name %r is not nvidia.com/gpu or a nvidia.com/mig-<profile> resource" % (rwhere, rname))
                elif parsed["kind"] == "mig" and effective_strategy != "mixed":
                    # MIG resources exist only under the mixed strategy (NVIDIA/k8s-device-plugin internal/rm/rm.go).
                    problems.append("%s shares %s but MIG strategy is %s; MIG resources are advertised only under mixed"
                                    % (rwhere, rname, effective_strategy))
                replicas = resource.get("replicas")
                # replicas < 2 cannot be parsed by the device plugin or GFD, which then exit
                # (NVIDIA/k8s-device-plugin api/config/v1/replicas.go, ReplicatedResource.UnmarshalJSON).
                if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
                    problems.append("%s.replicas must be an integer >= 2, got %r" % (rwhere, replicas))
    return problems


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
        if isinstance(configs, dict) and not default and len(configs) > 1 and "default" not in configs:
            # The plugin infers the default only from a key named 'default' or a single key
            # (NVIDIA/k8s-device-plugin README, per-node configuration).
            problems.append("device_plugin_config has several entries and no 'default' one: set device_plugin_config_default")
    elif settings.get("device_plugin_config_default"):
        problems.append("device_plugin_config_default is set but device_plugin_config is empty")
    extra = settings.get("extra_values") or {}
    if not isinstance(extra, dict):
        problems.append("extra_values must be a mapping")
        extra = {}
    unknown = sorted(set(extra) - KNOWN_TOP_LEVEL_KEYS)
    if unknown:
        problems.append("extra_values has key(s) %s that the GPU Operator chart does not know" % ", ".join(unknown))
    owned = _flatten(_owned_values(settings))
    owned.pop("migManager.env", None)  # extra env entries are appended, see build_values
    extra_env = _get(extra, ("migManager", "env")) or []
    if any(isinstance(entry, dict) and entry.get("name") == "WITH_REBOOT" for entry in extra_env):
        problems.append("extra_values sets migManager.env WITH_REBOOT; use the mig_with_reboot setting instead")
    for path, value in sorted(_flatten(extra).items()):
        if path in owned and owned[path] != value:
            problems.append("extra_values sets %s=%r but the role variable for it says %r; set it once"
                            % (path, value, owned[path]))
    return problems


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
    if settings.get("device_plugin_config") is not None:
        values["devicePlugin"] = {"config": {
            "name": settings.get("device_plugin_config_name"),
            "default": settings.get("device_plugin_config_default") or "",
        }}
    return values


def build_values(settings):
    """Helm values for the chart: the role's own settings, then extra_values merged on top."""
    owned = _owned_values(settings)
    extra = settings.get("extra_values") or {}
    values = deep_merge(owned, extra)
    extra_env = _get(extra, ("migManager", "env"))
    if extra_env:
        values["migManager"]["env"] = owned["migManager"]["env"] + list(extra_env)
    return values


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
    extra = settings.get("extra_values") or {}
    if not isinstance(extra, dict):
        return []
    warnings = []
    for path, why in sorted(DEPRECATED_VALUES.items()):
        node = extra
        for key in path.split("."):
            node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            warnings.append("extra_values sets %s=%r, which %s" % (path, node, why))
    return warnings


def single_strategy_warnings(settings, mixed_profile_configs):
    """Warn about named MIG configs that the single strategy cannot advertise (GFD internal/lm/mig-strategy.go, NVIDIA/k8s-device-plugin).

    ``mixed_profile_configs`` lists config names whose layout puts more than one profile on a node.
    """
    if settings.get("mig_strategy") != "single" or not mixed_profile_configs:
        return []
    return ["MIG config(s) %s mix profiles on a node; under mig_strategy single GFD marks such nodes "
            "<model>-MIG-INVALID and the device plugin advertises nothing" % ", ".join(sorted(mixed_profile_configs))]
