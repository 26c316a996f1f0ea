# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Integration tests run against the testbed cluster (tests/testbed/pytest_cluster.py) and the simulators.

Every test under tests/integration gets the ``integration`` marker, so ``-m "not integration"``
deselects the lot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
