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
  targets:
    description:
      - Return a list with one entry per host instead, C({name, hardware, hardware_error}) - the C(nodes) option of
        M(gpufleet.gpu_operator.gpu_node_validate). C(hardware) is C({gpus}) when gpu_info returned GPUs (an empty
        list included), else null; C(hardware_error) is gpu_info's message when its read failed, else null (a
        skipped, missing or unreachable read is not an error, as the node is then checked without its hardware).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Hardware facts by node name
  ansible.builtin.set_fact:
    hardware: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.hardware_by_node(hostvars, 'gpu_read') }}"
"""

RETURN = r"""
_value:
  description: Mapping of node name to C({gpus}) as gpu_info returned them; with O(targets), the list of nodes.
  type: raw
"""


def hardware_by_node(hosts, hostvars, result_var, targets=False):
    if targets:
        return [read_target(hostvars[host], host, result_var) for host in hosts or []]
    found = {}
    for host in hosts or []:
        variables = hostvars[host]
        result = variables.get(result_var) or {}
        if isinstance(result, dict) and result.get("gpus"):
            found[variables.get("gpu_node_name") or host] = {"gpus": result["gpus"]}
    return found


def read_target(variables, host, result_var):
    """One host's node name, its GPUs as gpu_info read them and why they could not be read."""
    result = variables.get(result_var)
    hardware = error = None
    if isinstance(result, dict) and not result.get("skipped"):
        if "gpus" in result:
            hardware = {"gpus": result["gpus"]}
        elif not result.get("unreachable"):
            error = result.get("msg") or "gpu_info returned no GPUs"
    return {"name": variables.get("gpu_node_name") or host, "hardware": hardware, "hardware_error": error}


class FilterModule(object):
    def filters(self):
        return {"hardware_by_node": hardware_by_node}
