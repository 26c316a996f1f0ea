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

# The slowest test files (paths under tests/integration, measured single-process on 2 cores, minutes), run first:
# with `make integration`'s parallel workers (pytest-xdist, one file per worker at a time) a long file started last
# would leave one worker running alone at the end.
LONGEST_FIRST = (
    "nvidia_mig_manager/test_matrix.py",  # 10.0 (the matrix 4.3, the simulator against NVIDIA's 5.7)
    "reconfigure/test_rollout.py",  # 8.0
    "reliability/control_plane/",  # 6.5, several files
    "operator/test_operator.py",  # 4.7
    "operator/test_upgrade.py",  # 3.1
    "modules/test_unreachable_api_server.py",  # 2.7
    "reconfigure/test_board_names.py",  # 2.1
    "oracle/test_gfd_matrix.py",  # 2.1
    "collection/test_readme_real_cluster.py",  # 2.0
    "reconfigure/test_faults.py",  # 2.0
    "agents/test_protocol.py",  # 1.8
)


def _rank(item):
    path = Path(str(item.fspath)).resolve()
    if INTEGRATION_DIR not in path.parents:
        return len(LONGEST_FIRST)
    relative = path.relative_to(INTEGRATION_DIR).as_posix()
    return next((rank for rank, prefix in enumerate(LONGEST_FIRST) if relative.startswith(prefix)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items):
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
    items.sort(key=_rank)  # stable: a file's tests, and the other files, keep their order
