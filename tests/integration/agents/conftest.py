"""These tests check the simulator's MIG Manager (tests/testbed/agents/migmanager.py), which the benchmarks and the
upgrade tests' v25.3.4 start still use, against what NVIDIA's does: their nodes run it instead of NVIDIA's
nvidia-mig-manager, the session's default."""

import functools

import pytest


@pytest.fixture
def add_gpu_node(add_gpu_node):
    """The session's add_gpu_node, with the simulator's MIG Manager unless a test names another."""
    return functools.partial(add_gpu_node, mig_manager="sim")
