# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_node_hosts
short_description: Kubernetes node name of each GPU host, and the hosts whose GPUs gpu_info can read
version_added: 0.1.0
description:
  - In one pass over the hosts (reading a host's variables is the cost on a large fleet), maps the Kubernetes node
    names - host var C(gpu_node_name), else the host name - to their hosts, keeping the order of the input (the
    first is the rollout's canary), and lists the hosts gpu_info can read from - a connection other than C(local),
    or a non-empty host var C(mig_reconfigure_host_environment) (a local connection reads the controller's own GPUs,
    unless NVML is pointed elsewhere).
positional: hostvars
extends_documentation_fragment:
  - gpufleet.gpu_operator.inventory_hosts
"""

EXAMPLES = r"""
- name: Name the GPU hosts' nodes and find the hosts to read
  ansible.builtin.set_fact:
    gpu_hosts: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.gpu_node_hosts(hostvars) }}"
"""

RETURN = r"""
host_of:
  description: Ordered mapping of node name to inventory host name.
  type: dict
readable:
  description: Inventory host names whose GPUs gpu_info can read, in the order given.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


def gpu_node_hosts(hosts, hostvars):
    host_of, readable = {}, []
    for host in hosts or []:
        variables = hostvars[host]
        node = variables.get("gpu_node_name") or host
        if node in host_of:
            raise AnsibleFilterError("hosts %s and %s both name Kubernetes node %s (gpu_node_name)" % (
                host_of[node], host, node))
        host_of[node] = host
        if (variables.get("ansible_connection") or "ssh") != "local" or variables.get("mig_reconfigure_host_environment"):
            readable.append(host)
    return {"host_of": host_of, "readable": readable}


class FilterModule(object):
    def filters(self):
        return {"gpu_node_hosts": gpu_node_hosts}
