# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_report_counts
short_description: GPU resource counts of the fleet report as short text
version_added: 0.1.0
description:
  - Writes a map of extended resource names to counts (a report node's C(allocatable) or C(requested)) as
    C(gpu=1, mig-1g.10gb=7) - short names, sorted, zero counts left out - or C(-) when there is none.
  - For report page templates (the C(gpufleet.gpu_operator.gpu_report) role's C(gpu_report_html_template)).
options:
  _input:
    description: "Resource name to count, for example C({nvidia.com/mig-1g.10gb: 7})."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show what a node offers
  ansible.builtin.debug:
    msg: "{{ {'nvidia.com/mig-1g.10gb': 7, 'nvidia.com/gpu': 0} | gpufleet.gpu_operator.gpu_report_counts }}"  # mig-1g.10gb=7
"""

RETURN = r"""
_value:
  description: The counts as text.
  type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import resource_counts


def gpu_report_counts(counts):
    return resource_counts(dict(counts or {}))


class FilterModule(object):
    def filters(self):
        return {"gpu_report_counts": gpu_report_counts}
