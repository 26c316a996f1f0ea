# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure MIG planning: profile names, model catalog, mig-parted configs, placement solver, plans.

Nothing in this package does I/O; NVML lives in ``module_utils/nvml/``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
