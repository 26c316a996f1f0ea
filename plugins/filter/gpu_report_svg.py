# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_report_svg
short_description: One GPU of the fleet report drawn as an inline SVG picture of its MIG slices
version_added: 0.1.0
description:
  - Draws a GPU of a fleet report (a C(gpus) item of a C(report.nodes) entry, as M(gpufleet.gpu_operator.gpu_cluster_info)
    returns it) as a strip of memory slices with one box per MIG instance, coloured by state (free, allocated,
    busy, idle), each box a C(<g class="slice">) with C(data-node), C(data-gpu), C(data-profile), C(data-state)
    and C(data-pod) attributes.
  - For report page templates (the C(gpufleet.gpu_operator.gpu_report) role's C(gpu_report_html_template)); the
    markup is escaped already, print it as is.
positional: node
options:
  _input:
    description: The GPU (an item of a node's C(gpus)).
    type: dict
    required: true
  node:
    description: The node the GPU belongs to (its report entry, or its name).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the fleet report
  gpufleet.gpu_operator.gpu_cluster_info:
  delegate_to: localhost
  run_once: true
  register: fleet

- name: A page of the fleet's GPUs
  ansible.builtin.copy:
    content: |
      {% for node in fleet.report.nodes %}{% for gpu in node.gpus %}{{ gpu | gpufleet.gpu_operator.gpu_report_svg(node) }}{% endfor %}{% endfor %}
    dest: /tmp/gpus.html
    mode: "0644"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
_value:
  description: SVG markup.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.render import gpu_svg


def gpu_report_svg(gpu, node):
    if not isinstance(gpu, dict) or "slices" not in gpu:
        raise AnsibleFilterError("gpu_report_svg expects a GPU of a fleet report (a dict with slices), got %r" % (gpu,))
    return gpu_svg(node if isinstance(node, dict) else {"name": str(node)}, gpu)


class FilterModule(object):
    def filters(self):
        return {"gpu_report_svg": gpu_report_svg}
