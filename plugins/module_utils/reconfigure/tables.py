# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's text: layouts, the plan table, the summary table and the ``--diff`` of a plan."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_MIG_CONFIG, labels_of
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import follow
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import table_lines

PLAN_COLUMNS = ("node", "model", "current", "target", "evict", "budgets", "reset/reboot", "status")
SUMMARY_COLUMNS = ("node", "model", "before", "after", "evicted", "back", "duration", "result")


def layout_text(per_gpu_targets):
    """'4x[1g.10gb:2 2g.20gb:1 3g.40gb:1]' style summary of per-GPU layouts (MIG off shown as 'disabled')."""
    groups = []
    for target in per_gpu_targets:
        text = "disabled" if target is None else (
            "[%s]" % " ".join("%s:%s" % (p, c) for p, c in sorted(target.items())) if target else "[enabled, empty]")
        if groups and groups[-1][0] == text:
            groups[-1][1] += 1
        else:
            groups.append([text, 1])
    return ", ".join("%dx%s" % (count, text) for text, count in groups) or "-"


def current_text(node, hardware):
    node_current = (hardware or {}).get("node_current") or {}
    if node_current:
        layout = " ".join("%s:%s" % (p, c) for p, c in sorted(node_current.items()))
    else:
        layout = "no MIG devices"
    return "%s (%s)" % (labels_of(node).get(LABEL_MIG_CONFIG) or "unset", layout)


def plan_status(entry):
    if entry["errors"]:
        return "INVALID"
    if entry.get("at_target"):
        return "at target"
    return "resume" if entry.get("half_done") else "change"


def plan_table(entries):
    return table_lines(PLAN_COLUMNS, [
        (e["node"], e.get("model") or "?", e.get("current") or "?", e.get("target") or "?",
         str(len(e.get("pods_to_evict") or [])), ", ".join(e.get("blocking_budgets") or []) or "-",
         e.get("reset_or_reboot") or "-", plan_status(e)) for e in entries])


def back_text(row):
    """'returned/evicted' of the row's followed pods, '-' when none were followed."""
    followed = row.get("follow")
    return "%d/%d" % (followed["returned"], followed["evicted"]) if followed else "-"


def summary_table(rows):
    """The aligned table, one line per row; then, per row whose evicted pods were followed, where they run
    again and each one still away with the reason (follow.lines)."""
    table = table_lines(SUMMARY_COLUMNS, [(r["node"], r.get("model") or "?", r.get("before") or "unset",
                                           r.get("after") or "unset", str(len(r.get("evicted") or [])),
                                           back_text(r), "%.1fs" % r.get("duration_s", 0), r["result"]) for r in rows])
    return table + [line for r in rows for line in follow.lines(r["node"], r.get("follow"))]


def plan_diff(plans):
    """Ansible ``--diff`` of a rollout plan: per node, the MIG config label and layout now and after, and the pods
    the change would evict (nodes already at the target and invalid nodes are left out)."""
    before, after = [], []
    for entry in plans:
        if entry.get("errors") or entry.get("at_target"):
            continue
        node = entry["node"]
        before.append("%s: %s=%s\n  layout: %s\n" % (node, LABEL_MIG_CONFIG, entry.get("current_config") or "unset",
                                                     entry.get("current") or "?"))
        pods = entry.get("pods_to_evict") or []
        after.append("%s: %s=%s\n  layout: %s\n  evicts: %s\n" % (node, LABEL_MIG_CONFIG, entry["target_config"],
                                                                  entry.get("target") or "?", ", ".join(pods) or "none"))
    return {"before": "".join(before), "after": "".join(after)}
