# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_hosts_to_read
short_description: The GPU hosts whose GPUs gpu_info should read before a MIG rollout
version_added: 0.1.0
description:
  - Keeps, in order, the hosts whose node (host var C(gpu_node_name), else the host name) is one of O(targets) and
    that gpu_info can read from - a connection other than C(local), or a non-empty host var
    C(mig_reconfigure_host_environment) (a local connection reads the controller's own GPUs, unless NVML is pointed
    elsewhere). One pass over the hosts, so that the hosts that need no read cost no task (1000 hosts).
positional: hostvars, targets
extends_documentation_fragment:
  - gpufleet.gpu_operator.inventory_hosts
options:
  targets:
    description: Kubernetes node names to reconfigure.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Group the hosts to read
  ansible.builtin.add_host:
    name: "{{ item }}"
    groups: to_read
  loop: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.gpu_hosts_to_read(hostvars, targets) }}"
"""

RETURN = r"""
_value:
  description: Inventory host names, in the order given.
  type: list
  elements: str
"""


def gpu_hosts_to_read(hosts, hostvars, targets):
    wanted = set(targets or [])
    out = []
    for host in hosts or []:
        variables = hostvars[host]
        if (variables.get("gpu_node_name") or host) not in wanted:
            continue
        if (variables.get("ansible_connection") or "ssh") != "local" or variables.get("mig_reconfigure_host_environment"):
            out.append(host)
    return out


class FilterModule(object):
    def filters(self):
        return {"gpu_hosts_to_read": gpu_hosts_to_read}
