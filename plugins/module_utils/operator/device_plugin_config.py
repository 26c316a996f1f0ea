# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Which device-plugin configs NVIDIA's device plugin accepts, and which config a node gets (pure, no I/O).

A device-plugin config is accepted exactly when NVIDIA's parser (NVIDIA/k8s-device-plugin v0.20.0, the version
the GPU Operator v26.7.0 chart deploys;
``api/config/v1``: ``Config``, ``Flags``, ``Sharing``, ``ReplicatedResources``/``ReplicatedResource``/
``ReplicatedDevices`` UnmarshalJSON, ``NewResourceName``, ``Duration``) and the device plugin's start-up checks
(``cmd/nvidia-device-plugin/main.go`` validateFlags) accept it under the GPU Operator's environment: the
operator sets MIG_STRATEGY from the ClusterPolicy, DEVICE_LIST_STRATEGY, DEVICE_ID_STRATEGY and MPS_ROOT
(``assets/state-device-plugin/0500_daemonset.yaml``), and an environment variable wins over the file's flag
(``api/config/v1/flags.go``). Anything else makes the device plugin (and GFD) exit on start.

The file is read as YAML turned into JSON and decoded by Go's encoding/json: fields of plain structs match
case-insensitively and unknown ones are ignored (reported here as warnings); the sharing blocks are decoded
by hand there, with exact field names. The integration test tests/integration/oracle runs a corpus of configs
through NVIDIA's own code and this module and requires the same verdict for each.

Which config a node gets (``cmd/config-manager/main.go`` updateConfigName, run by the operator with
FALLBACK_STRATEGIES=empty and DEFAULT_CONFIG=devicePlugin.config.default): the key named by the node's
``nvidia.com/device-plugin.config`` label; else devicePlugin.config.default; else an empty config (no
sharing). A key named ``default``, or a single key, is not picked up by itself. A label or default that
names a missing key stops the config manager ("specified config ... does not exist"). tests/integration/oracle
checks the module's verdict and ``device_plugin_config_selection`` against NVIDIA's config-manager on real Nodes.

Hand-written because NVIDIA ships this logic only in Go.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_DEVICE_PLUGIN_CONFIG

RESOURCE_PREFIX = "nvidia.com"
SHARED_SUFFIX = ".shared"
MAX_RESOURCE_NAME = 63
VERSION = "v1"
DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")
ALLOCATION_POLICIES = ("distributed", "packed")  # api/config/v1/consts.go AllocationPolicy*
INFINITE = "infinite"  # api/config/v1/duration.go: GFD sleeps forever after its first labelling

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(r"^%s(\.%s)*$" % (_DNS_LABEL, _DNS_LABEL))
_UUID = re.compile(r"^(urn:uuid:)?\{?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\}?$")
_UINT = re.compile(r"^[0-9]+$")
_DURATION = re.compile(r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)$")

# Go struct fields of the config (json tags), per struct; values: type checker name or a nested struct.
_FLAGS_PLUGIN = {"passDeviceSpecs": "bool", "deviceListStrategy": "string_or_strings", "deviceIDStrategy": "string",
                 "cdiAnnotationPrefix": "string", "nvidiaCTKPath": "string", "containerDriverRoot": "string",
                 "sharedDevicesAllocationPolicy": "string"}
_FLAGS_GFD = {"oneshot": "bool", "noTimestamp": "bool", "sleepInterval": "duration", "outputFile": "string",
              "machineTypeFile": "string"}
_FLAGS = {"migStrategy": "string", "failOnInitError": "bool", "mpsRoot": "string", "nvidiaDriverRoot": "string",
          "nvidiaDevRoot": "string", "gdrcopyEnabled": "bool", "gdsEnabled": "bool", "mofedEnabled": "bool",
          "useNodeFeatureAPI": "bool", "deviceDiscoveryStrategy": "string", "plugin": _FLAGS_PLUGIN, "gfd": _FLAGS_GFD}
_IMEX = {"channelIDs": "ints", "required": "bool"}
_GO_TYPE_NAMES = {"bool": "a boolean", "string": "a string", "string_or_strings": "a string or a list of strings",
                  "duration": "a duration (e.g. 60s), 'infinite' or a number of nanoseconds", "ints": "a list of integers",
                  "int": "an integer"}


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _is_int(value):
    """A JSON number Go decodes into int (YAML 2.0 reaches Go's JSON as 2)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _type_ok(kind, value):
    if value is None:
        return True  # null leaves a Go pointer/basic field unset
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "string_or_strings":
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "duration":
        if isinstance(value, str):
            return value == INFINITE or bool(_DURATION.match(value))
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "ints":
        return isinstance(value, list) and all(_is_int(v) for v in value)
    return True


def _fold(mapping, fields):
    """{go field: (key as written, value)} of a Go struct decoded by encoding/json: exact key, else a
    case-insensitive one (Go's rule); the rest in the second result (ignored by Go)."""
    found, unknown = {}, []
    lower = dict((f.lower(), f) for f in fields)
    for key, value in mapping.items():
        text = str(key)
        field = text if text in fields else lower.get(text.lower())
        if field is None:
            unknown.append(text)
        elif field not in found or text == field:
            found[field] = (text, value)
    return found, sorted(unknown)


def resource_name_problem(name):
    """Why NVIDIA's NewResourceName refuses ``name`` (None when fine); prefix ``nvidia.com/`` added when absent."""
    if not isinstance(name, str):
        return "must be a string, got %s" % _kind(name)
    full = name if name.startswith(RESOURCE_PREFIX + "/") else RESOURCE_PREFIX + "/" + name
    if len(full) > MAX_RESOURCE_NAME:
        return "%r is longer than %d characters" % (full, MAX_RESOURCE_NAME)
    short = full.split("/", 1)[1]
    if len(short) > 253 or not _DNS_SUBDOMAIN.match(short):
        return "%r is not a valid resource name (lower-case DNS subdomain after nvidia.com/)" % full
    return None


def full_resource_name(name):
    return name if name.startswith(RESOURCE_PREFIX + "/") else RESOURCE_PREFIX + "/" + name


def _device_ref_ok(item):
    if _is_int(item) and not isinstance(item, float):
        return item >= 0
    if not isinstance(item, str):
        return False
    if _UINT.match(item):
        return True
    parts = item.split(":", 1)
    if len(parts) == 2 and all(_UINT.match(p) for p in parts):
        return True
    if item.startswith("GPU-"):
        return bool(_UUID.match(item[4:]))
    if item.startswith("MIG-"):
        rest = item[4:]
        if _UUID.match(rest):
            return True
        parts = rest.split("/", 2)
        return len(parts) == 3 and parts[0].startswith("GPU-") and bool(_UUID.match(parts[0][4:])) \
            and all(_UINT.match(p) for p in parts[1:])
    return False


def _devices_problem(devices):
    if isinstance(devices, str):
        return None if devices == "all" else "%r: the only valid string is 'all'" % devices
    if _is_int(devices):
        return None if not isinstance(devices, float) and devices > 0 else "a count of devices must be > 0, got %r" % devices
    if isinstance(devices, list):
        bad = [d for d in devices if not _device_ref_ok(d)]
        return "unsupported device(s) %s (GPU index, <gpu>:<mig> index or GPU-/MIG- UUID)" % bad if bad else None
    return "must be 'all', a count or a list of devices, got %s" % _kind(devices)


def _sharing_block(where, kind, block, problems, warnings):
    """sharing.timeSlicing / sharing.mps: ReplicatedResources.UnmarshalJSON (exact field names). Returns the
    replicated resources [{name, rename, replicas}] or None."""
    if block is None:
        if kind == "mps":
            return None  # a nil pointer: no MPS
        block = {}  # Go calls the value's UnmarshalJSON with null: no resources
    if not isinstance(block, dict):
        problems.append("%s must be a mapping, got %s" % (where, _kind(block)))
        return None
    known = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    unknown = sorted(str(k) for k in block if k not in known)
    if unknown:
        warnings.append("%s: field(s) %s are ignored by the device plugin (known: %s)" % (where, ", ".join(unknown), ", ".join(known)))
    for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
        if block.get(flag) is not None and not isinstance(block.get(flag), bool):
            problems.append("%s.%s must be a boolean, got %s" % (where, flag, _kind(block.get(flag))))
            return None
    resources = block.get("resources")
    if resources is not None and not isinstance(resources, list):
        problems.append("%s.resources must be a list, got %s" % (where, _kind(resources)))
        return None
    if not resources:
        problems.append("%s.resources must list at least one resource (name, replicas)" % where)
        return None
    out = []
    rename_by_default = bool(block.get("renameByDefault"))
    for index, resource in enumerate(resources):
        rwhere = "%s.resources[%d]" % (where, index)
        if not isinstance(resource, dict):
            problems.append("%s must be a mapping with name and replicas, got %s" % (rwhere, _kind(resource)))
            return None
        unknown = sorted(str(k) for k in resource if k not in ("name", "rename", "devices", "replicas"))
        if unknown:
            warnings.append("%s: field(s) %s are ignored by the device plugin" % (rwhere, ", ".join(unknown)))
        if "name" not in resource:
            problems.append("%s.name is missing" % rwhere)
            return None
        why = resource_name_problem(resource["name"] if resource["name"] is not None else "")
        if why:
            problems.append("%s.name %s" % (rwhere, why))
            return None
        if "devices" in resource:
            why = _devices_problem(resource["devices"])
            if why:
                problems.append("%s.devices %s" % (rwhere, why))
                return None
            if resource["devices"] != "all":
                warnings.append("%s.devices: the device plugin ignores device selection and shares all devices" % rwhere)
        if "replicas" not in resource:
            problems.append("%s.replicas is missing" % rwhere)
            return None
        replicas = resource["replicas"]
        if replicas is not None and not _is_int(replicas):
            problems.append("%s.replicas must be an integer >= 2, got %s %r" % (rwhere, _kind(replicas), replicas))
            return None
        replicas = int(replicas or 0)
        if replicas < 2:
            problems.append("%s.replicas must be an integer >= 2, got %r" % (rwhere, resource["replicas"]))
            return None
        if "rename" in resource:
            why = resource_name_problem(resource["rename"] if resource["rename"] is not None else "")
            if why:
                problems.append("%s.rename %s" % (rwhere, why))
                return None
        name = full_resource_name(resource["name"])
        if resource.get("rename") and resource.get("rename") != (name + SHARED_SUFFIX if rename_by_default else ""):
            warnings.append("%s.rename: the device plugin ignores custom names (renameByDefault decides)" % rwhere)
        out.append({"name": name, "rename": name + SHARED_SUFFIX if rename_by_default else None, "replicas": replicas})
    return out


def _struct(where, value, fields, problems, warnings):
    """Type-check a Go struct decoded by encoding/json. Returns {field: value} as Go sees it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append("%s must be a mapping, got %s" % (where, _kind(value)))
        return None
    found, unknown = _fold(value, fields)
    if unknown:
        warnings.append("%s: field(s) %s are ignored by the device plugin" % (where, ", ".join(unknown)))
    seen = {}
    for field, (key, item) in sorted(found.items()):
        kind = fields[field]
        if isinstance(kind, dict):
            nested = _struct("%s.%s" % (where, key), item, kind, problems, warnings)
            if nested is None:
                return None
            seen[field] = nested
        elif not _type_ok(kind, item):
            problems.append("%s.%s must be %s, got %s %r" % (where, key, _GO_TYPE_NAMES[kind], _kind(item), item))
            return None
        else:
            seen[field] = item
    return seen


def check_config(where, config, mig_strategy):
    """(problems, warnings, effect) of one device-plugin config used under the operator's ``mig_strategy``.

    ``effect``: {'sharing': 'none'|'time-slicing'|'mps', 'resources': [{name, rename, replicas}],
    'fail_requests_greater_than_one': whether a pod asking for more than one shared replica is refused (None
    without sharing)} when the config is accepted, else None. Problems name ``where`` and the field; never raises."""
    problems, warnings = [], []
    if not isinstance(config, dict):
        return ["%s must be a mapping (a device-plugin config), got %s" % (where, _kind(config))], [], None
    top, unknown = _fold(config, ("version", "flags", "resources", "sharing", "imex"))
    if unknown:
        warnings.append("%s: field(s) %s are ignored by the device plugin (known: flags, imex, resources, sharing, version)"
                        % (where, ", ".join(unknown)))
    key, version = top.get("version", ("version", None))
    if version is not None and not isinstance(version, str):
        return ["%s.%s must be the string 'v1', got %s %r" % (where, key, _kind(version), version)], warnings, None
    if version not in (None, "", VERSION):
        return ["%s.%s must be 'v1' (or unset), got %r" % (where, key, version)], warnings, None
    flags = _struct("%s.%s" % (where, top.get("flags", ("flags",))[0]), top.get("flags", (None, None))[1], _FLAGS,
                    problems, warnings)
    if flags is None:
        return problems, warnings, None
    if "resources" in top:
        rkey, resources = top["resources"]
        rwhere = "%s.%s" % (where, rkey)
        found = _struct(rwhere, resources, {"gpus": "list", "mig": "list"}, problems, warnings)
        if found is None:
            return problems, warnings, None
        for field in ("gpus", "mig"):
            entries = found.get(field)
            if entries is None:
                continue
            if not isinstance(entries, list):
                return problems + ["%s.%s must be a list, got %s" % (rwhere, field, _kind(entries))], warnings, None
            for index, entry in enumerate(entries):
                ewhere = "%s.%s[%d]" % (rwhere, field, index)
                if not isinstance(entry, dict):
                    return problems + ["%s must be a mapping with pattern and name, got %s" % (ewhere, _kind(entry))], warnings, None
                for part in ("pattern", "name"):
                    if part not in entry:
                        return problems + ["%s.%s is missing" % (ewhere, part)], warnings, None
                if entry["pattern"] is not None and not isinstance(entry["pattern"], str):
                    return problems + ["%s.pattern must be a string, got %s" % (ewhere, _kind(entry["pattern"]))], warnings, None
                why = resource_name_problem(entry["name"] if entry["name"] is not None else "")
                if why:
                    return problems + ["%s.name %s" % (ewhere, why)], warnings, None
        if found.get("gpus") or found.get("mig"):
            warnings.append("%s: the device plugin ignores custom resource names (resources section)" % rwhere)
    sharing_key, sharing = top.get("sharing", ("sharing", None))
    swhere = "%s.%s" % (where, sharing_key)
    replicated, strategy, fail_flags, fail_gt_one = [], "none", {}, None
    if sharing is not None:
        if not isinstance(sharing, dict):
            return ["%s must be a mapping, got %s" % (swhere, _kind(sharing))], warnings, None
        found, unknown = _fold(sharing, ("timeSlicing", "mps"))
        if unknown:
            warnings.append("%s: field(s) %s are ignored by the device plugin (known: mps, timeSlicing)" % (swhere, ", ".join(unknown)))
        blocks = {}
        for kind in ("timeSlicing", "mps"):
            key, block = found.get(kind, (kind, None))
            if kind == "timeSlicing" and kind not in found:
                continue  # absent: no time-slicing (a null written out is decoded, see _sharing_block)
            result = _sharing_block("%s.%s" % (swhere, key), kind, block, problems, warnings)
            if problems:
                return problems, warnings, None
            blocks[kind] = result
            fail_flags[kind] = block.get("failRequestsGreaterThanOne") if isinstance(block, dict) else None
        # api/config/v1/config.go: MPS refuses requests of more than one replica unless the config sets
        # failRequestsGreaterThanOne: false; time-slicing refuses them only when it is set true.
        if blocks.get("mps"):
            strategy, replicated = "mps", blocks["mps"]
            fail_gt_one = fail_flags.get("mps") is not False
            if blocks.get("timeSlicing"):
                warnings.append("%s sets both timeSlicing and mps: the device plugin uses mps only" % swhere)
        elif blocks.get("timeSlicing"):
            strategy, replicated = "time-slicing", blocks["timeSlicing"]
            fail_gt_one = fail_flags.get("timeSlicing") is True
    imex = _struct("%s.%s" % (where, top.get("imex", ("imex",))[0]), top.get("imex", (None, None))[1], _IMEX, problems, warnings)
    if imex is None:
        return problems, warnings, None
    # validateFlags (cmd/nvidia-device-plugin/main.go), under the operator's environment.
    discovery = flags.get("deviceDiscoveryStrategy")
    if discovery is not None and discovery not in DISCOVERY_STRATEGIES:
        problems.append("%s.flags.deviceDiscoveryStrategy %r is not one of %s" % (where, discovery, "|".join(DISCOVERY_STRATEGIES)))
    policy = (flags.get("plugin") or {}).get("sharedDevicesAllocationPolicy")
    if policy is not None and policy not in ALLOCATION_POLICIES:
        problems.append("%s.flags.plugin.sharedDevicesAllocationPolicy %r is not one of %s (the device plugin exits: "
                        "\"invalid --shared-devices-allocation-policy option\")" % (where, policy, "|".join(ALLOCATION_POLICIES)))
    if strategy == "mps" and mig_strategy == "mixed":
        problems.append("%s.mps: MPS sharing with MIG strategy mixed is refused by the device plugin "
                        "(\"using --mig-strategy=mixed is not supported with MPS\")" % swhere)
    channels = [int(c) for c in imex.get("channelIDs") or []]
    if channels not in ([], [0]):
        problems.append("%s.imex.channelIDs must be [] or [0], got %s" % (where, channels))
    if problems:
        return problems, warnings, None
    file_strategy = flags.get("migStrategy")
    if file_strategy is not None and file_strategy != mig_strategy:
        warnings.append("%s.flags.migStrategy %r is overridden by the GPU Operator's MIG strategy %r" % (where, file_strategy, mig_strategy))
    for resource in replicated:
        if resource["name"].startswith(RESOURCE_PREFIX + "/mig-") and mig_strategy != "mixed":
            warnings.append("%s shares %s, which exists only under MIG strategy mixed (the operator's is %s): no effect"
                            % (swhere, resource["name"], mig_strategy))
    return [], warnings, {"sharing": strategy, "resources": replicated, "fail_requests_greater_than_one": fail_gt_one}


def selection_text(config_names, default=None):
    """One line saying which nodes get which config."""
    names = sorted(config_names or ())
    rest = ("config %r" % default) if default else "no config (no sharing: the operator's config manager falls back to an empty config)"
    return ("nodes labelled %s=<name> get that config (%s); every other node gets %s"
            % (LABEL_DEVICE_PLUGIN_CONFIG, ", ".join(names) or "none defined", rest))
