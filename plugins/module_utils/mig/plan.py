# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Plan one node's MIG layout before anything changes, and derive what Kubernetes should then show.

``plan_node`` takes the node's hardware (from gpu_info, or from GFD labels via facts.py) and a
layout (named config, custom mig-parted config, or profile counts for every GPU). It never does I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, placement, resolve
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import (
    parse_profile,
    profile_to_config_suffix,
    resource_name,
)

STRATEGIES = ("none", "single", "mixed")


def model_for_gpu(gpu):
    """Profile table for one GPU: the live NVML table when present (it wins), else the catalog. The model's
    ``name`` is the GPU's NVML name (catalog.nvml_name). Live profiles without placements borrow them from the
    catalog entry of the same name."""
    known = catalog.get_model(name=gpu.get("name"), pci_device_id=gpu.get("pci_device_id"))
    live = gpu.get("profiles") or []
    if not live:
        if known is None:
            catalog.require_model(gpu.get("name"), gpu.get("pci_device_id"))
        # Named as the GPU itself is (its NVML name, which GFD's product label is built from), not as the
        # catalog's family: an H100 PCIe plans with the H100 80GB HBM3 table and stays an H100 PCIe.
        return dict(known, name=catalog.nvml_name(gpu.get("name"), gpu.get("pci_device_id")) or known["name"])
    profiles = []
    for profile in live:
        profile = dict(profile)
        if not profile.get("placements") and known:
            borrowed = catalog.find_profile(known, profile["name"])
            profile["placements"] = list(borrowed["placements"]) if borrowed else []
        if "memory_slices" not in profile:
            profile["memory_slices"] = max([p["size"] for p in profile["placements"]] or [0])
        profiles.append(profile)
    pci = catalog.normalize_pci_device_id(gpu.get("pci_device_id")) if gpu.get("pci_device_id") else None
    return {
        "name": gpu.get("name") or (known or {}).get("name") or "unknown GPU",
        "pci_device_id": pci,
        "pci_device_ids": [pci] if pci else list((known or {}).get("pci_device_ids", [])),
        "memory_mb": gpu.get("memory_mb") or (known or {}).get("memory_mb"),
        "memory_slices": max([p["start"] + p["size"] for prof in profiles for p in prof["placements"]] or [0]),
        "compute_slices": max([prof.get("slices", 0) for prof in profiles] or [0]),
        "mig_capable": True,
        "source": "live",
        "profiles": profiles,
    }


def _counts(instances):
    counts = collections.Counter(i["profile"] for i in instances or [])
    return dict(counts)


def _incremental(model, target, instances):
    """Keep current instances that the target still wants, where the rest still fits around them.
    Returns (keep, create) or None when everything must be recreated."""
    wanted = collections.Counter(target)
    keep = []
    for instance in sorted(instances, key=lambda i: (i["start"], i["profile"])):
        if wanted[instance["profile"]] > 0 and "start" in instance and "size" in instance:
            wanted[instance["profile"]] -= 1
            keep.append({"profile": instance["profile"], "start": instance["start"], "size": instance["size"]})
    remaining = dict((k, v) for k, v in wanted.items() if v > 0)
    solution = placement.solve(model, remaining, fixed=keep)
    if not solution.feasible:
        return None
    return keep, solution.placements


def _in_creation_order(placements, order):
    """Placements listed in creation order; among equal profiles the highest start first, which is
    what the modelled driver picks (placement.simulate_driver)."""
    left = sorted(placements, key=lambda p: -p["start"])
    ordered = []
    for name in order:
        for item in left:
            if item["profile"] == name:
                ordered.append(item)
                left.remove(item)
                break
    return ordered + left


def _plan_gpu(gpu, model, target):
    """One GPU's plan entry. ``target``: {selected, mig_enabled, mig_devices}."""
    mig = gpu.get("mig") or {}
    current_enabled = bool(mig.get("current"))
    pending_enabled = bool(mig.get("pending", mig.get("current")))
    instances = gpu.get("instances") or []
    entry = {
        "index": gpu["index"],
        "model": model["name"],
        "pci_device_id": gpu.get("pci_device_id") or model.get("pci_device_id"),
        "profiles_source": model.get("source", "catalog"),
        "mig_enabled": target["mig_enabled"],
        "current_mig_enabled": current_enabled,
        "pending_mig_enabled": pending_enabled,
        "target": dict(target["mig_devices"]) if target["mig_enabled"] else {},
        "current": _counts(instances),
        "placements": [],
        "creation_order": [],
        "keep": [],
        "destroy": [],
        "create": [],
        "mode_change_required": False,
        "mode_write_required": False,
        "reset_pending": False,
        "feasible": True,
        "reason": None,
        "alternatives": [],
        "changed": False,
    }
    if not target.get("selected", True):
        entry.update(feasible=False, mig_enabled=None, reason=(
            "the config has no entry for GPU %s (%s, %s); MIG Manager would leave it as it is"
            % (gpu["index"], model["name"], entry["pci_device_id"])))
        return entry
    if target["mig_enabled"] and not model.get("mig_capable", True):
        entry.update(feasible=False, reason="GPU %s (%s) is not MIG-capable" % (gpu["index"], model["name"]))
        return entry
    # A reset is needed while the current mode differs; a write only while the pending mode differs
    # (a mode already pending waits for the reset, a pending change we do not want is cancelled).
    entry["mode_change_required"] = target["mig_enabled"] != current_enabled
    entry["mode_write_required"] = target["mig_enabled"] != pending_enabled
    entry["reset_pending"] = entry["mode_change_required"] and not entry["mode_write_required"]
    mode_write = entry["mode_change_required"] or entry["mode_write_required"]
    if not target["mig_enabled"]:
        entry["destroy"] = [dict(i) for i in instances]
        entry["changed"] = mode_write or bool(instances)
        return entry
    solution = placement.solve(model, entry["target"])
    if not solution.feasible:
        entry.update(feasible=False, reason="GPU %s (%s): %s" % (gpu["index"], model["name"], solution.reason),
                     alternatives=placement.alternatives(model, entry["target"]))
        return entry
    entry["placements"] = solution.placements
    entry["creation_order"] = solution.creation_order
    layout_changed = entry["current"] != dict((k, v) for k, v in entry["target"].items() if v)
    if not entry["mode_change_required"] and layout_changed and instances:
        kept = _incremental(model, entry["target"], instances)
        if kept is not None:
            keep, create = kept
            kept_ids = set((k["profile"], k["start"]) for k in keep)
            entry["keep"] = keep
            entry["destroy"] = [dict(i) for i in instances if (i["profile"], i.get("start")) not in kept_ids]
            entry["create"] = create
    if layout_changed and not entry["keep"] and not entry["create"]:
        entry["destroy"] = [dict(i) for i in instances]
        entry["create"] = _in_creation_order(solution.placements, solution.creation_order)
    if not layout_changed:
        entry["keep"] = [dict(i) for i in instances]
    entry["changed"] = mode_write or layout_changed
    return entry


def _targets(gpus, config_name, config, mig_devices, config_source):
    if (config_name is None) == (mig_devices is None):
        raise PlanningError("give exactly one of config_name (with an optional config) or mig_devices")
    if config_name is not None:
        return resolve.resolve(config_name, gpus, config=config, source=config_source)
    targets = []
    for gpu in gpus:
        devices = resolve.check_profiles(mig_devices, gpu["model"], gpu["index"])
        targets.append({"index": gpu["index"], "selected": True, "mig_enabled": True,
                        "mig_devices": dict((k, v) for k, v in devices.items() if v)})
    return targets


def plan_node(hardware, config_name=None, config=None, mig_devices=None, config_source=None):
    """Plan the layout for every GPU of one node.

    ``hardware``: {"gpus": [{index, name, pci_device_id, mig: {current, pending}, profiles?,
    instances?: [{profile, start, size}]}], "node_current"?: {profile: count}}.
    Returns {feasible, reason, mode_change_required, reset_gpus, changed, config_name, gpus: [...]}; see
    docs/DEVELOPING.md (Planning) for the per-GPU keys. Raises PlanningError subclasses for input
    that cannot be planned at all (unknown config, profile, model; malformed config).
    """
    if not (hardware or {}).get("gpus"):
        raise PlanningError("the hardware facts list no GPU; there is nothing to plan")
    gpus = []
    for gpu in sorted(hardware["gpus"], key=lambda g: g["index"]):
        gpus.append(dict(gpu, model=model_for_gpu(gpu)))
    targets = _targets(gpus, config_name, config, mig_devices, config_source)
    entries = [_plan_gpu(gpu, gpu["model"], target) for gpu, target in zip(gpus, targets)]
    node_current = (hardware or {}).get("node_current")
    if node_current is not None and not any(g.get("instances") for g in gpus):
        # Facts from labels: only node totals are known, so compare those instead of per-GPU lists.
        totals = collections.Counter()
        for entry in entries:
            totals.update(entry["target"])
        differs = dict(totals) != dict((k, v) for k, v in node_current.items() if v)
        for entry in entries:
            entry["changed"] = entry["mode_write_required"] or (differs and bool(entry["mig_enabled"]))
        if differs and not any(e["changed"] for e in entries):
            entries[0]["changed"] = bool(entries)
    changed = any(e["changed"] for e in entries)
    reasons = [e["reason"] for e in entries if e["reason"]]
    # MIG Manager's nvidia-mig-parted resets every GPU of the node together once any GPU's MIG mode is pending
    # (NVIDIA/mig-parted cmd/nvidia-mig-parted/apply/mode.go, util.ResetAllGPUs), not only the GPUs that change mode.
    reset_gpus = [e["index"] for e in entries] if any(e["mode_change_required"] for e in entries) else []
    for entry in entries:
        entry["reset"] = entry["index"] in reset_gpus
    return {
        "feasible": all(e["feasible"] for e in entries),
        "reason": "; ".join(reasons) if reasons else None,
        "mode_change_required": any(e["mode_change_required"] for e in entries),
        "reset_gpus": reset_gpus,
        "changed": changed,
        "config_name": config_name,
        "gpus": entries,
    }


def _check_strategy(strategy):
    if strategy not in STRATEGIES:
        raise PlanningError("MIG strategy '%s' is not one of %s" % (strategy, ", ".join(STRATEGIES)))


def _gi_counts(entry):
    """MIG devices the device plugin advertises on one GPU under the mixed strategy: GI profiles with C == G
    (NVIDIA/k8s-device-plugin internal/rm/rm.go skips the others)."""
    return dict((p, c) for p, c in entry["target"].items() if c and parse_profile(p).c == parse_profile(p).g)


def _mig_devices(entry):
    """Every MIG device of one GPU, compute-instance profiles (``1c.3g.40gb``) included: under the single strategy the
    device plugin advertises them all as nvidia.com/gpu (NVIDIA/k8s-device-plugin internal/rm/rm.go, AddMIGResource("*"))."""
    return dict((p, c) for p, c in entry["target"].items() if c)


def strategy_conflict(plan, strategy):
    """Why GFD would label the node ``-MIG-INVALID`` / the device plugin would refuse it, or None.

    Under ``single``: a MIG-enabled GPU without MIG devices, MIG-enabled mixed with disabled GPUs,
    or more than one profile on the node (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go, device_map.go).
    """
    _check_strategy(strategy)
    if strategy != "single":
        return None
    enabled = [e for e in plan["gpus"] if e["mig_enabled"]]
    if not enabled:
        return None
    if len(enabled) != len(plan["gpus"]):
        return ("mig-strategy=single needs every GPU of the node in the same MIG mode; GPUs %s would be "
                "MIG-enabled and %s not" % ([e["index"] for e in enabled],
                                            [e["index"] for e in plan["gpus"] if not e["mig_enabled"]]))
    empty = [e["index"] for e in enabled if not _mig_devices(e)]
    if empty:
        return "mig-strategy=single: MIG-enabled GPUs %s would have no MIG devices" % empty
    profiles = sorted(set(p for e in enabled for p in _mig_devices(e)))
    if len(profiles) > 1:
        return ("mig-strategy=single needs one MIG profile per node; the plan has %s (use mixed, or one "
                "all-<profile> config)" % ", ".join(profiles))
    return None


def sharing_conflict(plan, sharing_strategy):
    """Why the node's GPU sharing refuses the plan's layout, or None. ``sharing_strategy``: the node's
    ``nvidia.com/gpu.sharing-strategy`` (none, time-slicing or mps).

    MPS with any GPU in MIG mode: NVIDIA's GFD exits before labelling, whatever the MIG strategy
    (NVIDIA/k8s-device-plugin internal/lm/nvml.go isMPSCapable), and the device plugin refuses MIG devices
    under MPS (internal/plugin/mps.go getMPSOptions), so the change could never be verified.
    """
    if sharing_strategy != "mps":
        return None
    enabled = [e["index"] for e in plan["gpus"] if e["mig_enabled"]]
    if not enabled:
        return None
    return ("the node shares its GPUs with MPS (nvidia.com/gpu.sharing-strategy=mps) and the plan puts GPUs %s in MIG "
            "mode: MPS is not supported on MIG-enabled GPUs (GFD and the device plugin refuse); give the node a "
            "device-plugin config without MPS first" % enabled)


def expected_resources(plan, strategy):
    """Extended resources the device plugin would advertise after the plan (NVIDIA/k8s-device-plugin README)."""
    _check_strategy(strategy)
    enabled = [e for e in plan["gpus"] if e["mig_enabled"]]
    if strategy == "none" or not enabled:
        return {gpu_labels.RESOURCE_GPU: len(plan["gpus"])}
    if strategy == "single":
        if strategy_conflict(plan, strategy):
            return {gpu_labels.RESOURCE_GPU: 0}
        return {gpu_labels.RESOURCE_GPU: sum(sum(_mig_devices(e).values()) for e in enabled)}
    resources = collections.Counter()
    for entry in plan["gpus"]:
        if entry["mig_enabled"]:
            for profile, count in _gi_counts(entry).items():
                resources[resource_name(profile)] += count
        else:
            resources[gpu_labels.RESOURCE_GPU] += 1
    return dict(resources)


def expected_gfd_labels(plan, strategy):
    """The MIG-related GFD labels the node would carry after the plan (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go).

    mixed: ``nvidia.com/mig-<profile>.count`` per profile (``+`` written as ``.``, as label keys
    cannot hold ``+``); single: ``gpu.product`` ``<model>-MIG-<profile>`` (or ``-MIG-INVALID``) and
    ``gpu.count``; none (or no MIG-enabled GPU): ``gpu.product`` and ``gpu.count`` of whole GPUs.
    """
    _check_strategy(strategy)
    models = [e["model"] for e in plan["gpus"]]
    product = gpu_labels.product_label(models[0]) if models else ""
    labels = {}
    enabled = [e for e in plan["gpus"] if e["mig_enabled"]]
    if strategy != "none":
        labels[gpu_labels.LABEL_MIG_STRATEGY] = strategy
    if strategy == "none" or not enabled:
        labels.update({gpu_labels.LABEL_PRODUCT: product, gpu_labels.LABEL_COUNT: str(len(plan["gpus"]))})
        return labels
    if strategy == "single":
        if strategy_conflict(plan, strategy):
            labels.update({gpu_labels.LABEL_PRODUCT: product + gpu_labels.PRODUCT_MIG_INFIX + gpu_labels.PRODUCT_MIG_INVALID,
                           gpu_labels.LABEL_COUNT: "0"})
            return labels
        profile = list(_mig_devices(enabled[0]))[0]
        labels.update({
            gpu_labels.LABEL_PRODUCT: gpu_labels.single_mig_product_label(models[0], profile),
            gpu_labels.LABEL_COUNT: str(sum(sum(_mig_devices(e).values()) for e in enabled)),
        })
        return labels
    counts = collections.Counter()
    for entry in enabled:
        counts.update(_gi_counts(entry))
    for profile, count in counts.items():
        labels[gpu_labels.mig_count_label(profile_to_config_suffix(profile))] = str(count)
    return labels


def _layout_text(counts):
    return "".join("  %s: %d\n" % (name, count) for name, count in sorted(counts.items()) if count) or "  {}\n"


def plan_diff(plan):
    """Ansible diff ({before, after}) of each GPU's MIG mode and instances."""
    before, after = [], []
    for gpu in plan["gpus"]:
        before.append("GPU %d (%s): mig %s\n%s" % (gpu["index"], gpu["model"], "on" if gpu["current_mig_enabled"] else "off",
                                                   _layout_text(gpu["current"])))
        target_on = gpu["mig_enabled"] if gpu["mig_enabled"] is not None else gpu["current_mig_enabled"]
        after.append("GPU %d (%s): mig %s\n%s" % (gpu["index"], gpu["model"], "on" if target_on else "off",
                                                  _layout_text(gpu["target"] if gpu["mig_enabled"] is not None else gpu["current"])))
    return {"before": "".join(before), "after": "".join(after)}
