# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: hardware_by_node
short_description: The GPUs gpu_info read on each host, keyed by Kubernetes node name
version_added: 0.1.0
description:
  - Collects, from every host whose registered M(gpufleet.gpu_operator.gpu_info) result lists GPUs, C({gpus})
    under the host's node name (host var C(gpu_node_name), else the host name) - the C(hardware) option of
    M(gpufleet.gpu_operator.mig_rollout). Hosts that were skipped, failed or unreachable are left out.
positional: hostvars, result_var
extends_documentation_fragment:
  - gpufleet.gpu_operator.inventory_hosts
options:
  result_var:
    description: Name of the variable each host registered the gpu_info result in.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Hardware facts by node name
  ansible.builtin.set_fact:
    hardware: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.hardware_by_node(hostvars, 'gpu_read') }}"
"""

RETURN = r"""
_value:
  description: Mapping of node name to C({gpus}) as gpu_info returned them.
  type: dict
"""


def hardware_by_node(hosts, hostvars, result_var):
    found = {}
    for host in hosts or []:
        variables = hostvars[host]
        result = variables.get(result_var) or {}
        if isinstance(result, dict) and result.get("gpus"):
            found[variables.get("gpu_node_name") or host] = {"gpus": result["gpus"]}
    return found


class FilterModule(object):
    def filters(self):
        return {"hardware_by_node": hardware_by_node}
