# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_node_names
short_description: Kubernetes node name of each GPU host, in host order
version_added: 0.1.0
description:
  - Maps inventory hosts to their Kubernetes node names - host var C(gpu_node_name), else the host name - keeping
    the order of the input (the first is the rollout's canary). One pass over the hosts instead of a looped
    C(set_fact), which costs a task result per host on a large fleet.
positional: hostvars
extends_documentation_fragment:
  - gpufleet.gpu_operator.inventory_hosts
"""

EXAMPLES = r"""
- name: Map the node names of the play's GPU hosts to their hosts
  ansible.builtin.set_fact:
    host_of: "{{ ansible_play_hosts_all | gpufleet.gpu_operator.gpu_node_names(hostvars) }}"
"""

RETURN = r"""
_value:
  description: Ordered mapping of node name to inventory host name.
  type: dict
"""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_node_hosts import gpu_node_hosts


def gpu_node_names(hosts, hostvars):
    return gpu_node_hosts(hosts, hostvars)["host_of"]  # the one pass over the hosts, kept in one place


class FilterModule(object):
    def filters(self):
        return {"gpu_node_names": gpu_node_names}
