"""The gpu_node_hosts filter: node names of the GPU hosts and the hosts gpu_info can read, in one pass."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_node_hosts import FilterModule, gpu_node_hosts


def test_names_in_order_and_readable_hosts():
    env = {"LD_LIBRARY_PATH": "/opt/nvml"}
    hostvars = {
        "h1": {"gpu_node_name": "node-1"},                                         # ssh by default
        "h2": {"ansible_connection": "local"},                                     # the controller's own GPUs
        "h3": {"ansible_connection": "local", "mig_reconfigure_host_environment": env},
        "h4": {"ansible_connection": "ssh"},
        "h5": {"ansible_connection": "local", "mig_reconfigure_host_environment": {}},
    }
    found = gpu_node_hosts(["h3", "h1", "h2", "h4", "h5"], hostvars)
    assert list(found["host_of"].items()) == [("h3", "h3"), ("node-1", "h1"), ("h2", "h2"), ("h4", "h4"), ("h5", "h5")]
    assert found["readable"] == ["h3", "h1", "h4"]
    assert gpu_node_hosts(None, hostvars) == {"host_of": {}, "readable": []}
    assert FilterModule().filters()["gpu_node_hosts"] is gpu_node_hosts


def test_two_hosts_naming_one_node_are_refused():
    with pytest.raises(AnsibleFilterError, match="hosts a and b both name Kubernetes node n"):
        gpu_node_hosts(["a", "b"], {"a": {"gpu_node_name": "n"}, "b": {"gpu_node_name": "n"}})
