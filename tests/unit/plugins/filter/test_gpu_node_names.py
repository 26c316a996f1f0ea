"""The gpu_node_names filter: Kubernetes node name to inventory host, refusing two hosts for one node."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_node_names import FilterModule, gpu_node_names


def test_node_name_defaults_to_the_host_and_keeps_host_order():
    hostvars = {"h2": {"gpu_node_name": "node-b"}, "h1": {}, "h3": {"gpu_node_name": ""}}
    assert list(gpu_node_names(["h2", "h1", "h3"], hostvars).items()) == [("node-b", "h2"), ("h1", "h1"), ("h3", "h3")]
    assert gpu_node_names(None, hostvars) == {}
    assert FilterModule().filters()["gpu_node_names"] is gpu_node_names


def test_two_hosts_naming_one_node_are_refused_naming_both():
    hostvars = {"a": {"gpu_node_name": "n1"}, "b": {"gpu_node_name": "n1"}}
    with pytest.raises(AnsibleFilterError) as err:
        gpu_node_names(["a", "b"], hostvars)
    assert str(err.value) == "hosts a and b both name Kubernetes node n1 (gpu_node_name)"
