# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Named MIG configs per GPU model: the static default config, configs generated from profile
tables the way MIG Manager >= v0.14 generates them, and resolution of a config name to a per-GPU
target with clear errors for unknown configs and profiles.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, catalog_data, migparted
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import (
    PlanningError,
    ProfileNameError,
    UnknownConfigError,
    UnknownProfileError,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import (
    canonical_profile_name,
    compute_slice_options,
    count_problem,
    config_name_for,
    gpu_instance_profile,
    is_base_profile,
    parse_profile,
)

# all-balanced per compute-slice count: NVIDIA/mig-parted pkg/mig/builder/balanced.go.
BALANCED_FORMULA = {7: {1: 2, 2: 1, 3: 1}, 4: {1: 2, 2: 1}}
GENERATED_SOURCE = "generated from the GPUs' profile tables (as MIG Manager >= v0.14)"
BUILTIN_SOURCE = "built-in default config (static default-mig-parted-config)"


def _model_filter(model):
    return list(model.get("pci_device_ids") or [model["pci_device_id"]])


def _gi_profiles(model):
    """GPU-instance profiles (C == G); compute-instance profiles are skipped, as in NVIDIA/mig-parted pkg/mig/builder/builder.go."""
    result = []
    for profile in model.get("profiles", []):
        parsed = parse_profile(profile["name"])
        if parsed.c == parsed.g:
            result.append(profile)
    return result


def balanced_layout(model):
    """all-balanced for one model: per G the base profile with the highest instance count; None when
    the model lacks a 1g/2g/3g base profile the formula needs."""
    formula = BALANCED_FORMULA.get(model.get("compute_slices"))
    if not formula:
        return None
    layout = {}
    for g, count in sorted(formula.items()):
        candidates = [p for p in _gi_profiles(model)
                      if is_base_profile(p["name"]) and parse_profile(p["name"]).g == g]
        if not candidates:
            return None
        best = max(candidates, key=lambda p: p.get("instance_count") or 0)  # first wins a tie
        layout[best["name"]] = count
    return layout


def _add(configs, name, entry):
    configs.setdefault(name, []).append(entry)


def generate_config(gpu_models, always_filter=False):
    """mig-parted config for these models (catalog or live tables), as MIG Manager >= v0.14 writes
    it: all-disabled, all-enabled, all-balanced, and all-<profile> with each GI profile's maximum
    count. ``device-filter`` only when the models have more than one PCI id (or always_filter)."""
    models = []
    seen = set()
    for model in gpu_models:
        key = tuple(_model_filter(model))
        if key not in seen:
            seen.add(key)
            models.append(model)
    ids = set(i for m in models for i in _model_filter(m))
    use_filter = always_filter or len(ids) > 1
    configs = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for model in models:
        base = {"devices": "all", "mig-enabled": True}
        if use_filter:
            filters = _model_filter(model)
            base = dict(base, **{"device-filter": filters if len(filters) > 1 else filters[0]})
        layout = balanced_layout(model)
        if layout:
            _add(configs, "all-balanced", dict(base, **{"mig-devices": layout}))
        for profile in _gi_profiles(model):
            count = profile.get("instance_count") or 1
            _add(configs, config_name_for(profile["name"]), dict(base, **{"mig-devices": {profile["name"]: count}}))
    # Reorder entries so each entry has its keys in mig-parted's usual order.
    ordered = {}
    for name, entries in configs.items():
        ordered[name] = [dict((k, e[k]) for k in migparted.ENTRY_FIELDS if k in e) for e in entries]
    return {"version": "v1", "mig-configs": ordered}


def builtin_config():
    """NVIDIA's static default config (ConfigMap default-mig-parted-config of gpu-operator v26.7.0,
    assets/state-mig-manager/0400_configmap.yaml), every named config and device filter as published;
    the data is catalog_data.STATIC_DEFAULT_CONFIG."""
    configs = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for name, entries in catalog_data.STATIC_DEFAULT_CONFIG:
        configs[name] = []
        for device_filter, devices in entries:
            entry = {"devices": "all", "mig-enabled": True, "mig-devices": dict(devices)}
            if device_filter is not None:
                entry = dict({"device-filter": list(device_filter) if isinstance(device_filter, tuple)
                              else device_filter}, **entry)
            configs[name].append(entry)
    return {"version": "v1", "mig-configs": configs}


def named_configs(models=None):
    """Sorted config names available for these models (all catalog models when None)."""
    return sorted(generate_config(models if models is not None else catalog.all_models())["mig-configs"])


def _profile_sort_key(profile_name):
    parsed = parse_profile(profile_name)
    return (parsed.g, parsed.gb, parsed.attrs, parsed.negattrs, profile_name)


def unknown_profile_error(profile_name, model, gpu_index=None):
    """UnknownProfileError listing the model's profiles with the same slice count (all if none)."""
    names = sorted((p["name"] for p in model.get("profiles", [])), key=_profile_sort_key)
    try:
        g = parse_profile(profile_name).g
        same = [n for n in names if parse_profile(n).g == g]
    except ProfileNameError:
        g, same = None, []
    where = " (GPU %s)" % gpu_index if gpu_index is not None else ""
    if same:
        message = "%s is not a profile of %s%s; its %d-slice profiles are %s" % (
            profile_name, model["name"], where, g, ", ".join(same))
    else:
        message = "%s is not a profile of %s%s; its profiles are %s" % (
            profile_name, model["name"], where, ", ".join(names))
    return UnknownProfileError(message, profile=profile_name, model=model["name"], gpu_index=gpu_index,
                               alternatives=same or names)


def check_profiles(mig_devices, model, gpu_index=None):
    """Canonicalise profile names (``1g.5gb.me`` -> ``1g.5gb+me``) and make sure each is one of the
    model's: a GPU-instance profile of its table, or a compute-instance form ``<C>c.<G>g.<GB>gb`` of one with a
    compute-slice count that instance offers (as mig-parted accepts them in mig-devices); raises
    UnknownProfileError / ProfileNameError. Returns the cleaned mapping."""
    known = set(p["name"] for p in model.get("profiles", []))
    cleaned = {}
    for name, count in (mig_devices or {}).items():
        canonical = canonical_profile_name(name)
        problem = count_problem(count)
        if problem:
            where = " (GPU %s)" % gpu_index if gpu_index is not None else ""
            raise PlanningError("MIG profile '%s'%s: %s" % (canonical, where, problem))
        if canonical not in known:
            parsed = parse_profile(canonical)
            if parsed.c == parsed.g or gpu_instance_profile(canonical) not in known:
                raise unknown_profile_error(canonical, model, gpu_index)
            if parsed.c not in compute_slice_options(parsed.g):
                raise UnknownProfileError(
                    "MIG profile '%s' is not offered by %s%s: a %dg instance holds compute instances of %s slices"
                    % (canonical, model["name"], " (GPU %s)" % gpu_index if gpu_index is not None else "", parsed.g,
                       ", ".join(str(c) for c in compute_slice_options(parsed.g))),
                    profile=canonical, model=model["name"], gpu_index=gpu_index,
                    alternatives=["%dc.%s" % (c, gpu_instance_profile(canonical)) if c != parsed.g
                                  else gpu_instance_profile(canonical) for c in compute_slice_options(parsed.g)])
        cleaned[canonical] = cleaned.get(canonical, 0) + count
    return cleaned


def _unknown_config(config_name, config, source, gpus):
    """Explain a missing config: a profile the hardware lacks, or a name the source lacks."""
    if config_name.startswith("all-"):
        try:
            profile = canonical_profile_name(config_name)
        except ProfileNameError:
            profile = None
        if profile:
            for gpu in gpus:
                check_profiles({profile: 1}, gpu["model"], gpu.get("index"))
    known = sorted(config["mig-configs"])
    close = difflib.get_close_matches(config_name, known, n=3)
    hint = "; did you mean %s?" % ", ".join(close) if close else ""
    return UnknownConfigError(
        "MIG config '%s' is not defined in %s%s (it defines %d configs: %s)"
        % (config_name, source, hint, len(known), ", ".join(known)),
        config_name=config_name, source=source, known=known)


def resolve(config_name, gpus, config=None, source=None):
    """Per-GPU target of ``config_name``.

    ``gpus``: [{index, name, pci_device_id, model?}] where ``model`` is the profile table to use (a
    live table or a catalog entry; looked up in the catalog when absent). ``config``: a mig-parted
    config (dict/text, validated here) or None for the config MIG Manager generates from these
    GPUs. Returns [{index, selected, mig_enabled, mig_devices}] in ``gpus`` order; ``selected`` is
    False when no entry of the config covers that GPU (MIG Manager would leave it unchanged).
    Raises UnknownConfigError, UnknownProfileError, MigConfigError, UnknownModelError.
    """
    gpus = [dict(g, model=g.get("model") or catalog.require_model(g.get("name"), g.get("pci_device_id")))
            for g in gpus]
    # A GPU known by model name alone (mig_plan gpu_model=...) stands for the model's first PCI id, so
    # that device filters of a model with several ids select it (and a generated config needs none).
    gpus = [dict(g, pci_device_id=g.get("pci_device_id") or g["model"].get("pci_device_id")) for g in gpus]
    if config is None:
        # Like MIG Manager on the node: filters only when the node's GPUs have several PCI ids.
        config = generate_config([dict(g["model"], pci_device_ids=[catalog.normalize_pci_device_id(g["pci_device_id"])])
                                  if g.get("pci_device_id") else g["model"] for g in gpus])
        source = source or GENERATED_SOURCE
    else:
        source = source or "<config>"
        config = migparted.parse_config(config, source)
    if config_name not in config["mig-configs"]:
        raise _unknown_config(config_name, config, source, gpus)
    result = []
    for gpu in gpus:
        selected = migparted.select_for_gpu(config, config_name, gpu["index"], gpu.get("pci_device_id"),
                                            gpu.get("pci_subsystem_id"))
        if selected is None and config_name.startswith("all-"):
            # e.g. the static config's all-1g.10gb has no H200 entry: say the profile is wrong.
            try:
                check_profiles({canonical_profile_name(config_name): 1}, gpu["model"], gpu["index"])
            except ProfileNameError:
                pass
        if selected is None:
            result.append({"index": gpu["index"], "selected": False, "mig_enabled": None, "mig_devices": {}})
            continue
        devices = check_profiles(selected["mig_devices"], gpu["model"], gpu["index"])
        result.append({"index": gpu["index"], "selected": True, "mig_enabled": selected["mig_enabled"],
                       "mig_devices": devices})
    return result
