"""mig-parted's config file: parse, select per GPU, assert, and generate from hardware (pure, no I/O).

Behaviour follows NVIDIA/mig-parted v0.15.0 as summarised in reference nvidia-gpu-operator-and-mig.md §4.
"""

import collections
import re

import yaml

PROFILE_RE = re.compile(r"^(?:(?P<c>[0-9]+)c\.)?(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb(?P<attr>[+-][a-z]+(?:\.[a-z]+)*(?:,[a-z]+(?:\.[a-z]+)*)*)?$")
ENTRY_KEYS = {"device-filter", "devices", "mig-enabled", "mig-devices"}
GENERATED_HEADER = "# DO NOT EDIT: Auto-generated MIG configuration from GPU hardware.\n"
A30_DEVICE_ID = "0x20B710DE"
# NVML reports wrong profiles for the A30; mig-parted hardcodes these (MP pkg/mig/discovery, reference §4.3).
A30_PROFILES = {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}
BALANCED = {7: {1: 2, 2: 1, 3: 1}, 4: {1: 2, 2: 1}}  # MP pkg/mig/builder/balanced.go


class ConfigError(Exception):
    """The config file, the selected config or a profile in it is not usable; the message says which."""


class NoProfilesDiscovered(ConfigError):
    """No MIG profiles could be read for MIG-capable GPUs (older drivers with MIG off)."""


def parse(text, source="config"):
    """Parse and validate a mig-parted v1 config; returns {name: [entry, ...]}."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError("%s: not YAML: %s" % (source, err)) from err
    if not isinstance(doc, dict):
        raise ConfigError("%s: expected a mapping with version and mig-configs" % source)
    if doc.get("version") != "v1":
        raise ConfigError("%s: unknown version %r" % (source, doc.get("version")))
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise ConfigError("%s: mig-configs must be a non-empty mapping" % source)
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise ConfigError("%s: mig-config %s: needs at least one entry" % (source, name))
        for entry in entries:
            _check_entry(source, name, entry)
    return configs


def _check_entry(source, name, entry):
    where = "%s: mig-config %s" % (source, name)
    if not isinstance(entry, dict):
        raise ConfigError("%s: entry is not a mapping" % where)
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise ConfigError("%s: unexpected field(s) %s" % (where, ", ".join(sorted(unknown))))
    devices = entry.get("devices")
    if devices != "all" and not (isinstance(devices, list) and all(isinstance(d, int) for d in devices)):
        raise ConfigError("%s: devices must be 'all' or a list of GPU indexes" % where)
    if not isinstance(entry.get("mig-enabled"), bool):
        raise ConfigError("%s: mig-enabled must be true or false" % where)
    mig_devices = entry.get("mig-devices")
    if entry["mig-enabled"]:
        if not isinstance(mig_devices, dict):
            raise ConfigError("%s: mig-devices is required when mig-enabled is true" % where)
        for profile, count in mig_devices.items():
            if not PROFILE_RE.match(str(profile)):
                raise ConfigError("%s: invalid MIG profile name %r" % (where, profile))
            if not isinstance(count, int) or count < 0:
                raise ConfigError("%s: count for %s must be a non-negative integer" % (where, profile))
        if mig_devices and not any(mig_devices.values()):
            raise ConfigError("%s: all mig-devices counts are 0" % where)
    elif mig_devices:
        raise ConfigError("%s: mig-devices must be empty when mig-enabled is false" % where)


def _filters(entry):
    value = entry.get("device-filter")
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    return {str(v).split(":", maxsplit=1)[0].upper() for v in values}


def select(configs, name, gpus):
    """Per GPU index: (mig_enabled, {profile: count}) of config `name`; GPUs it does not match are absent."""
    if name not in configs:
        raise ConfigError("selected mig-config not present: %s" % name)
    plan = {}
    for entry in configs[name]:
        filters = _filters(entry)
        for gpu in gpus:
            if filters is not None and gpu.device_id.upper() not in filters:
                continue
            if entry["devices"] != "all" and gpu.index not in entry["devices"]:
                continue
            devices = {p: n for p, n in (entry.get("mig-devices") or {}).items() if n}
            plan[gpu.index] = (entry["mig-enabled"], devices)
    return plan


def mode_applied(plan, gpus):
    by_index = {g.index: g for g in gpus}
    return all(by_index[i].mig_current == wanted[0] and by_index[i].mig_pending == wanted[0] for i, wanted in plan.items())


def applied(plan, gpus):
    """True when mode and MIG devices already match (mig-parted assert)."""
    if not mode_applied(plan, gpus):
        return False
    by_index = {g.index: g for g in gpus}
    for index, (enabled, devices) in plan.items():
        if enabled and collections.Counter(d.profile for d in by_index[index].mig_devices) != collections.Counter(devices):
            return False
    return True


def wanted_devices(gpu, devices):
    """[(GiProfile, ci_slices), ...] for one GPU; ConfigError when a profile does not exist on it."""
    by_name = {p.name: p for p in gpu.gi_profiles}
    wanted = []
    for profile, count in devices.items():
        match = PROFILE_RE.match(profile)
        gi_name = profile.split(".", 1)[1] if match.group("c") else profile
        gi = by_name.get(gi_name)
        if gi is None:
            raise ConfigError("GPU %d (%s): MIG profile %s is not supported; valid: %s" % (
                gpu.index, gpu.name, profile, ", ".join(sorted(by_name)) or "none reported"))
        ci_slices = int(match.group("c") or gi.slices)
        wanted.extend([(gi, ci_slices)] * count)
    return wanted


def _profile_counts(gpu):
    if gpu.device_id.upper() == A30_DEVICE_ID:
        return dict(A30_PROFILES)
    return {p.name: p.instance_count for p in gpu.gi_profiles}


def _balanced(gpu):
    """all-balanced devices for one GPU type, or None when it lacks a needed base profile."""
    base = [p for p in gpu.gi_profiles if not re.search(r"[+-]", p.name)]
    if gpu.device_id.upper() == A30_DEVICE_ID:
        counts = {n: c for n, c in A30_PROFILES.items() if "+" not in n}
        base = [p for p in base if p.name in counts]
    slots = max((p.slices for p in gpu.gi_profiles), default=0)
    formula = BALANCED.get(slots)
    if not formula:
        return None
    devices = {}
    for g, count in formula.items():
        candidates = [p for p in base if p.slices == g]
        if not candidates:
            return None
        best = max(candidates, key=lambda p: p.instance_count)
        devices[best.name] = count
    return devices


def generate(gpus):
    """The config mig-parted >= v0.14 generates from the node's hardware (reference §4.3)."""
    capable = [g for g in gpus if g.mig_capable]
    if capable and not any(g.gi_profiles for g in capable):
        raise NoProfilesDiscovered("no MIG profiles discovered for MIG-capable GPUs")
    types = {}
    for gpu in capable:
        types.setdefault(gpu.device_id.upper(), gpu)
    several = len(types) > 1

    def entry(device_id, devices):
        e = {}
        if several:
            e["device-filter"] = device_id
        e.update({"devices": "all", "mig-enabled": True, "mig-devices": devices})
        return e

    configs = {
        "all-disabled": [{"devices": "all", "mig-enabled": False, "mig-devices": {}}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    balanced = [entry(d, b) for d, b in ((d, _balanced(g)) for d, g in types.items()) if b]
    if balanced:
        configs["all-balanced"] = balanced
    per_profile = collections.OrderedDict()
    for device_id, gpu in types.items():
        for name, count in _profile_counts(gpu).items():
            per_profile.setdefault("all-" + name.replace("+", "."), []).append(entry(device_id, {name: count}))
    configs.update(per_profile)
    return {"version": "v1", "mig-configs": configs}


def dump_generated(config):
    return GENERATED_HEADER + yaml.safe_dump(config, sort_keys=False)
