# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: chart_version_change
short_description: Whether a Helm chart version is an upgrade or a downgrade of the deployed one
version_added: 0.1.0
description:
  - Compares two Helm chart versions by SemVer 2 precedence (Helm's rule for chart versions; a leading C(v) as in
    NVIDIA's C(v26.7.0) is allowed, and the deployed side may be Helm's C(<chart name>-<version>) as
    C(kubernetes.core.helm_info) reports it).
  - Returns C(same), C(upgrade), C(downgrade), or C(unknown) when either side is not a SemVer version.
positional: _input
options:
  _input:
    description: The deployed chart, C(gpu-operator-v25.3.4) or C(v25.3.4).
    type: str
    required: true
  target:
    description: The target chart version, C(v26.7.0).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse a downgrade
  ansible.builtin.assert:
    that: "'gpu-operator-v26.7.0' | gpufleet.gpu_operator.chart_version_change('v25.3.4') != 'downgrade'"
"""

RETURN = r"""
_value:
  description: C(same), C(upgrade), C(downgrade) or C(unknown).
  type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.upgrade import version_change


def chart_version_change(deployed, target):
    return version_change(deployed, target)


class FilterModule(object):
    def filters(self):
        return {"chart_version_change": chart_version_change}
