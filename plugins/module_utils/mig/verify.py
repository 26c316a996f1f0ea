# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Where the GPUs themselves differ from a plan's target (pure; the one comparison of hardware and target).

Used after a change by ``mig_apply`` (NVML re-read on the host) and by the rollout's hardware check before
uncordon (gpu_info facts read on the host). A GPU matches when its current and pending MIG mode are the
target's and its GPU instances, counted per profile, are the target layout (MIG off: none).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _layout_text(enabled, counts):
    if not enabled:
        return "MIG off"
    return "MIG on with %s" % (" ".join("%s:%s" % kv for kv in sorted(counts.items())) or "no MIG devices")


def gpu_counts(gpu):
    """{profile: count} of a GPU's instances as the hardware facts list them."""
    counts = {}
    for instance in gpu.get("instances") or []:
        counts[instance["profile"]] = counts.get(instance["profile"], 0) + 1
    return counts


def mismatches(hardware, plan, indices=None):
    """GPUs of ``hardware`` (gpu_info facts: gpus with index, mig {current, pending}, instances) that are not
    in the target of ``plan`` (plan.plan_node's output). ``indices`` limits the check to those GPUs.

    Returns [{index, mig_enabled, mig_pending, current, target_mig_enabled, target, text}] ([] = matches);
    GPUs the plan leaves alone (no entry in the config) are not compared."""
    by_index = dict((gpu["index"], gpu) for gpu in (hardware or {}).get("gpus") or [])
    found = []
    for entry in plan["gpus"]:
        index = entry["index"]
        if entry.get("mig_enabled") is None or (indices is not None and index not in indices):
            continue
        want_enabled = bool(entry["mig_enabled"])
        want = dict((k, v) for k, v in (entry.get("target") or {}).items() if v) if want_enabled else {}
        gpu = by_index.get(index)
        if gpu is None:
            found.append({"index": index, "mig_enabled": None, "mig_pending": None, "current": None,
                          "target_mig_enabled": want_enabled, "target": want,
                          "text": "GPU %s is missing from the hardware facts" % index})
            continue
        mig = gpu.get("mig") or {}
        enabled = bool(mig.get("current"))
        pending = bool(mig.get("pending", mig.get("current")))
        have = gpu_counts(gpu)
        if enabled == want_enabled and pending == want_enabled and have == want:
            continue
        has = _layout_text(enabled, have)
        if pending != enabled:
            has += " (MIG mode change pending a GPU reset)"
        found.append({"index": index, "mig_enabled": enabled, "mig_pending": pending, "current": have,
                      "target_mig_enabled": want_enabled, "target": want,
                      "text": "GPU %s has %s, wants %s" % (index, has, _layout_text(want_enabled, want))})
    return found
