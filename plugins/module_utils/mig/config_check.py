# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Check a custom mig-parted config against the GPU models of an inventory before it is installed.

Uses the planning library (``module_utils/mig``): the config must parse as mig-parted v1, every
profile must exist on at least one inventory model its entry can select (device-filter), and each
entry's layout must fit on one GPU of such a model. Pure, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.catalog import find_profile, get_model
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.migparted import filter_matches, parse_config
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.placement import describe, solve


def _matches(entry, model):
    device_filter = entry.get("device-filter")
    if device_filter is None:
        return True
    return any(filter_matches(device_filter, pci_id) for pci_id in model["pci_device_ids"])


def _entry_problems(where, entry, models, unknown_models):
    wanted = dict((p, c) for p, c in (entry.get("mig-devices") or {}).items() if c)
    if not entry["mig-enabled"] or not wanted:
        return []
    candidates = [model for model in models if _matches(entry, model)]
    if not candidates:
        return []  # the entry selects no GPU of this inventory (its device-filter names other models)
    problems = []
    for profile in sorted(wanted):
        if not any(find_profile(model, profile) for model in candidates):
            problems.append("%s: profile %s exists on no GPU model of the inventory (%s)%s" % (
                where, profile, ", ".join(m["name"] for m in candidates),
                "; not in the catalog, so not checked: %s" % ", ".join(unknown_models) if unknown_models else ""))
    if problems:
        return problems
    reasons = []
    for model in candidates:
        if not all(find_profile(model, profile) for profile in wanted):
            continue
        solution = solve(model, wanted)
        if solution.feasible:
            return []
        reasons.append("%s: %s" % (model["name"], solution.reason))
    why = "; ".join(reasons) or "no model has all these profiles"
    return ["%s: %s fits on no GPU of the inventory (%s)" % (where, describe(wanted), why)]


def mig_config_findings(config, gpu_models):
    """(problems, config names, names of configs that put more than one profile on a model's GPUs).

    ``gpu_models``: NVML product names (or aliases) from the inventory. Models missing from the
    built-in catalog are named in messages; with no known model only the syntax is checked.
    """
    try:
        parsed = parse_config(config, source="mig_config")
    except PlanningError as exc:
        return [str(exc)], [], []
    models, unknown = [], []
    for name in sorted(set(gpu_models or [])):
        model = get_model(name=name)
        if model is None:
            unknown.append(name)
        elif model["name"] not in [m["name"] for m in models]:
            models.append(model)
    problems, mixed = [], []
    for config_name, entries in sorted(parsed["mig-configs"].items()):
        for index, entry in enumerate(entries):
            if models:
                problems.extend(_entry_problems("mig_config[%s][%d]" % (config_name, index), entry, models, unknown))
        for model in models:
            profiles = set()
            for entry in entries:
                if entry["mig-enabled"] and _matches(entry, model):
                    profiles.update(p for p, c in (entry.get("mig-devices") or {}).items() if c)
            if len(profiles) > 1:
                mixed.append(config_name)
                break
    return problems, sorted(parsed["mig-configs"]), mixed
