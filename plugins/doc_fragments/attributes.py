# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The standard descriptions of the attributes. A module extending this fragment states its own
    # support (and details), which are merged in:
    #   attributes:
    #     check_mode:
    #       support: full
    #       details: What check mode does here.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    # gpufleet.gpu_operator.attributes.no_diff: full check mode support and no diff, for modules that
    # report (or render) rather than change, with nothing to add to the standard descriptions.
    NO_DIFF = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""
