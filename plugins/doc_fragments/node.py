# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Modules that act on one Kubernetes node; each declares name=dict(type="str", required=True).
    DOCUMENTATION = r"""
options:
  name:
    description: Name of the node.
    type: str
    required: true
"""
