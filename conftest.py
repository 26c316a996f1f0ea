"""Shared pytest plugins: the testbed cluster, the simulated NVML and the simulated node agents."""

pytest_plugins = [
    "tests.testbed.pytest_cluster",
    "tests.testbed.gpusim.pytest_gpusim",
    "tests.testbed.agents.pytest_agents",
]
