# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: mig_rollout_summary
short_description: Fleet summary table of a MIG rollout
version_added: 0.1.0
description:
  - Turns the per-node rows of M(gpufleet.gpu_operator.mig_rollout) batches, plus the nodes the plan found
    already at the target, into text lines - node, model, before, after, evicted pods, back (their replacements
    running again, of those evicted), duration, result - followed per node by where its evicted pods run again and
    each one still Pending (the scheduler's reason) or not recreated, then one line per failed node with its message
    and diagnostic hints.
positional: plan
options:
  _input:
    description: Rows of all batches (the C(rows) of each M(gpufleet.gpu_operator.mig_rollout) result, concatenated).
    type: list
    elements: dict
    required: true
  plan:
    description: The C(plan) list of the planning run; nodes at the target that no batch touched appear as unchanged.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Plan all-balanced on the GPU nodes
  gpufleet.gpu_operator.mig_rollout:
    nodes: [gpu-node-01, gpu-node-02]
    config: all-balanced
    phase: plan
  delegate_to: localhost
  run_once: true
  register: plan_result

- name: Roll it out
  gpufleet.gpu_operator.mig_rollout:
    nodes: [gpu-node-01, gpu-node-02]
    config: all-balanced
  delegate_to: localhost
  run_once: true
  register: rollout

- name: Print the fleet summary
  ansible.builtin.debug:
    msg: "{{ rollout.rows | gpufleet.gpu_operator.mig_rollout_summary(plan_result.plan) }}"
"""

RETURN = r"""
_value:
  description: Lines of the table, then one line per failed node.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.tables import summary_table


def mig_rollout_summary(rows, plan=None):
    rows = list(rows or [])
    seen = set(r["node"] for r in rows)
    for entry in plan or []:
        if entry["node"] not in seen:
            rows.append({"node": entry["node"], "model": entry.get("model"), "before": entry.get("current_config"),
                         "after": entry.get("current_config"), "evicted": [], "duration_s": 0.0,
                         "result": "unchanged" if entry.get("at_target") else "not started"})
    rows.sort(key=lambda r: r["node"])
    lines = summary_table(rows)
    for row in rows:
        if row["result"] in ("failed", "invalid"):
            lines.append("%s: %s" % (row["node"], row.get("message", "")))
            for hint in (row.get("diagnostics") or {}).get("hints") or []:
                lines.append("%s: hint: %s" % (row["node"], hint))
    return lines


class FilterModule(object):
    def filters(self):
        return {"mig_rollout_summary": mig_rollout_summary}
