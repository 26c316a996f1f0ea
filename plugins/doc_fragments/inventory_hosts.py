# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Filters that look GPU hosts up in hostvars (host var gpu_node_name names the Kubernetes node).
    DOCUMENTATION = r"""
options:
  _input:
    description: Inventory host names.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: raw
    required: true
"""
