# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""mig-parted v1 config files: parse and validate, render, and select the entry for one GPU.

Format and rules: mig-parted api/spec/v1/spec.go and helpers.go (NVIDIA/mig-parted): ``version: v1``;
``mig-configs`` maps names to non-empty lists of entries with ``devices`` (``all`` or GPU indices),
``mig-enabled``, ``mig-devices`` (profile -> count; required when enabled, empty when disabled) and an
optional ``device-filter`` (``0xDDDDVVVV`` or a list; v0.15.0 adds ``:<subsystem id>``). Unknown
fields are rejected. PyYAML is used for the text form (a runtime requirement of the collection).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

try:
    import yaml

    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core; managed hosts may lack it
    HAS_YAML = False

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.catalog import normalize_pci_device_id, plain_copy
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import MigConfigError, ProfileNameError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import count_problem, parse_profile, short_repr

ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_FILTER_RE = re.compile(r"^0[xX][0-9A-Fa-f]{8}(:0[xX][0-9A-Fa-f]{8})?$")


def _name(key):
    """A mapping key as a message names it: plain when a short string, else bounded (a key may be any YAML value)."""
    return key if isinstance(key, str) and len(key) <= 80 else short_repr(key)


def _where(source, name=None, index=None, field=None):
    text = "mig-parted config %s" % source
    if name is not None:
        text += ": mig-configs.%s" % _name(name)
    if index is not None:
        text += "[%d]" % index
    if field is not None:
        text += ".%s" % field
    return text


def _load(data, source):
    if isinstance(data, (bytes, str)):
        if not HAS_YAML:
            try:
                return json.loads(data)  # JSON is YAML too; without PyYAML only that form parses
            except ValueError:
                raise MigConfigError("%s: PyYAML is needed to read YAML text on this host (pass the config "
                                     "as a dict instead)" % _where(source))
        try:
            # libyaml's loader where PyYAML has it: a generated config is ~100 KB and the pure-Python one took
            # ~0.2 s per node, once per node, when planning a fleet.
            data = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise MigConfigError("%s is not valid YAML: %s" % (_where(source), exc))
    if not isinstance(data, dict):
        raise MigConfigError("%s: expected a mapping with 'version' and 'mig-configs', got %s"
                             % (_where(source), type(data).__name__))
    return data


def _check_filter(value, where):
    values = value if isinstance(value, list) else [value]
    if not values:
        raise MigConfigError("%s: must not be an empty list" % where)
    for item in values:
        if not isinstance(item, str) or not _FILTER_RE.match(item):
            raise MigConfigError("%s: %s is not a PCI id (expected 0xDDDDVVVV[:0xSSSSVVVV], e.g. 0x233510DE)"
                                 % (where, short_repr(item)))


def _check_devices(value, where):
    if isinstance(value, str):
        if value != "all":
            raise MigConfigError("%s: the only string allowed is 'all', got %s" % (where, short_repr(value)))
        return
    if not isinstance(value, list) or not value:
        raise MigConfigError("%s: expected 'all' or a non-empty list of GPU indices, got %s" % (where, short_repr(value)))
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise MigConfigError("%s: %s is not a GPU index (whole number >= 0)" % (where, short_repr(item)))


def _check_mig_devices(value, enabled, where):
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise MigConfigError("%s: expected a mapping of profile -> count, got %s" % (where, short_repr(value)))
    if not enabled and value:
        raise MigConfigError("%s: must be empty when mig-enabled is false" % where)
    for profile, count in value.items():
        try:
            parse_profile(profile)
        except ProfileNameError as exc:
            raise MigConfigError("%s: %s" % (where, exc))
        problem = count_problem(count)
        if problem:
            raise MigConfigError("%s.%s: %s" % (where, profile, problem))
    if value and not any(value.values()):
        raise MigConfigError("%s: every count is 0; use mig-devices: {} to enable MIG without instances" % where)


# Validated configs by their text: a fleet's nodes share a handful of configs (one per GPU model), so planning
# 1000 nodes parses each once. Bounded; each caller gets its own copy.
_PARSED = {}
_PARSED_MAX = 64


def parse_config(data, source="<config>"):
    """Validate a mig-parted v1 config (YAML text or dict) and return it as a plain dict.

    Raises MigConfigError naming ``source``, the config name, the entry index and the field.
    """
    if isinstance(data, (bytes, str)):
        cached = _PARSED.get(data)
        if cached is None:
            cached = _parse_config(data, source)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[data] = cached
        return plain_copy(cached)
    return _parse_config(data, source)


def _parse_config(data, source):
    config = copy.deepcopy(_load(data, source))
    unknown = sorted(set(config) - {"version", "mig-configs"}, key=str)
    if unknown:
        raise MigConfigError("%s: unknown field(s) %s" % (_where(source), ", ".join(_name(k) for k in unknown)))
    if config.get("version") != "v1":
        raise MigConfigError("%s: version: unknown version %s (only 'v1' is accepted)"
                             % (_where(source), short_repr(config.get("version"))))
    configs = config.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigConfigError("%s: mig-configs: expected a non-empty mapping of config name -> entries" % _where(source))
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise MigConfigError("%s: expected a non-empty list of entries" % _where(source, name))
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise MigConfigError("%s: expected a mapping" % _where(source, name, index))
            extra = sorted(set(entry) - set(ENTRY_FIELDS), key=str)
            if extra:
                raise MigConfigError("%s: unknown field(s) %s (allowed: %s)"
                                     % (_where(source, name, index), ", ".join(_name(k) for k in extra), ", ".join(ENTRY_FIELDS)))
            for field in ("devices", "mig-enabled"):
                if field not in entry:
                    raise MigConfigError("%s: required field missing" % _where(source, name, index, field))
            if "device-filter" in entry:
                _check_filter(entry["device-filter"], _where(source, name, index, "device-filter"))
            _check_devices(entry["devices"], _where(source, name, index, "devices"))
            if not isinstance(entry["mig-enabled"], bool):
                raise MigConfigError("%s: expected true or false, got %s"
                                     % (_where(source, name, index, "mig-enabled"), short_repr(entry["mig-enabled"])))
            if entry["mig-enabled"] and "mig-devices" not in entry:
                raise MigConfigError("%s: required when mig-enabled is true (may be {})"
                                     % _where(source, name, index, "mig-devices"))
            _check_mig_devices(entry.get("mig-devices"), entry["mig-enabled"],
                               _where(source, name, index, "mig-devices"))
    return config


if HAS_YAML:
    class _Dumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
        """Block style, keys in insertion order (version first, like mig-parted's own files), no
        anchors/aliases for repeated filters."""

        def ignore_aliases(self, data):
            return True


def render_config(config):
    """YAML text of a config dict; ``version`` first, configs sorted by name."""
    ordered = {"version": config.get("version", "v1"), "mig-configs": {}}
    for name in sorted(config.get("mig-configs", {})):
        ordered["mig-configs"][name] = config["mig-configs"][name]
    if not HAS_YAML:
        return json.dumps(ordered, indent=2) + "\n"  # valid YAML as well
    return yaml.dump(ordered, Dumper=_Dumper, default_flow_style=False, sort_keys=False)


def filter_matches(device_filter, pci_device_id, pci_subsystem_id=None):
    """mig-parted device-filter matching: no filter matches all; else any listed id matches.
    A ``:subsystem`` part is compared only when the GPU's subsystem id is known."""
    if device_filter is None:
        return True
    wanted = normalize_pci_device_id(pci_device_id) if pci_device_id else None
    for item in device_filter if isinstance(device_filter, list) else [device_filter]:
        device, _sep, subsystem = item.partition(":")
        if wanted is None or normalize_pci_device_id(device) != wanted:
            continue
        if subsystem and pci_subsystem_id and normalize_pci_device_id(subsystem) != normalize_pci_device_id(pci_subsystem_id):
            continue
        return True
    return False


def select_for_gpu(config, config_name, gpu_index, pci_device_id, pci_subsystem_id=None):
    """{mig_enabled, mig_devices} that ``config_name`` sets on GPU ``gpu_index``; None when no entry
    selects that GPU (mig-parted then leaves it as it is). When several entries select it, the last
    wins, as mig-parted applies entries in order (WalkSelectedMigConfigForEachGPU)."""
    selected = None
    for entry in config["mig-configs"][config_name]:
        devices = entry["devices"]
        if devices != "all" and gpu_index not in devices:
            continue
        if not filter_matches(entry.get("device-filter"), pci_device_id, pci_subsystem_id):
            continue
        selected = {
            "mig_enabled": entry["mig-enabled"],
            "mig_devices": dict((k, v) for k, v in (entry.get("mig-devices") or {}).items() if v),
        }
    return selected
