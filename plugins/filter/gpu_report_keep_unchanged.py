# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_report_keep_unchanged
short_description: The fleet report to write - the one written before when only its time differs
version_added: 0.1.0
description:
  - Compares a fleet report just built (M(gpufleet.gpu_operator.gpu_cluster_info)'s C(report)) with the one written
    before (the content of report.json) and returns the previous one when both say the same about the fleet, else
    the new one. What changes with time alone is left out of the comparison - C(generated_at), each node's
    C(state_seconds) and the C(seconds) in a stuck finding's details - so writing the result with
    M(ansible.builtin.copy) or M(ansible.builtin.template) reports C(changed) only when the fleet changed, and the
    file's C(generated_at) says when this content was first seen.
  - Metrics are content - with Prometheus or dcgm-exporter, new activity or memory readings make a new report.
  - The result has its keys in order, so a page rendered from it is the same whether the report was built now or
    read back from report.json.
  - The C(gpufleet.gpu_operator.gpu_report) role writes report.json and report.html this way.
positional: previous
options:
  _input:
    description: The report just built.
    type: dict
    required: true
  previous:
    description:
      - The report written before - a dict, or the text of report.json. Empty, unreadable JSON, another schema
        version or another shape count as none.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the fleet report
  gpufleet.gpu_operator.gpu_cluster_info:
  delegate_to: localhost
  run_once: true
  register: fleet

- name: Write report.json only when the fleet changed
  ansible.builtin.copy:
    content: "{{ fleet.report | gpufleet.gpu_operator.gpu_report_keep_unchanged(previous_text) | to_nice_json(indent=2) }}\n"
    dest: /srv/reports/report.json
    mode: "0644"
  vars:
    previous_text: "{{ lookup('ansible.builtin.file', '/srv/reports/report.json', errors='ignore') | default('', true) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
_value:
  description: The report to write - the previous one when only time-dependent values differ, else the new one.
  type: dict
"""

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.build import keep_unchanged


def _previous(previous):
    if isinstance(previous, dict):
        return previous
    if isinstance(previous, (bytes, bytearray)):
        previous = previous.decode("utf-8", "replace")
    if isinstance(previous, str) and previous.strip():
        try:
            loaded = json.loads(previous)
        except ValueError:
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


def gpu_report_keep_unchanged(report, previous):
    if not isinstance(report, dict) or "nodes" not in report or "findings" not in report:
        raise AnsibleFilterError("gpu_report_keep_unchanged expects a fleet report (gpu_cluster_info's report, a dict "
                                 "with nodes and findings), got %s" % type(report).__name__)
    return keep_unchanged(report, _previous(previous))


class FilterModule(object):
    def filters(self):
        return {"gpu_report_keep_unchanged": gpu_report_keep_unchanged}
