"""Integration tests run against the testbed cluster (tests/testbed/pytest_cluster.py) and the simulators.

Every test under tests/integration gets the ``integration`` marker, so ``-m "not integration"``
deselects the lot.
"""

from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
