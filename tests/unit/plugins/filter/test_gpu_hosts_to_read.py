"""The gpu_hosts_to_read filter: which GPU hosts the playbook's read play runs gpu_info on."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_hosts_to_read import FilterModule, gpu_hosts_to_read


def test_only_targeted_hosts_that_can_be_read_in_order():
    env = {"LD_LIBRARY_PATH": "/opt/nvml"}
    hostvars = {
        "h1": {"gpu_node_name": "node-1"},                                         # ssh by default
        "h2": {"ansible_connection": "local"},                                     # the controller's own GPUs
        "h3": {"ansible_connection": "local", "mig_reconfigure_host_environment": env},
        "h4": {"ansible_connection": "ssh"},                                       # not a target
        "h5": {"ansible_connection": "local", "mig_reconfigure_host_environment": {}},
    }
    hosts = ["h3", "h1", "h2", "h4", "h5"]
    assert gpu_hosts_to_read(hosts, hostvars, ["node-1", "h2", "h3", "h5"]) == ["h3", "h1"]
    assert gpu_hosts_to_read(hosts, hostvars, []) == []
    assert gpu_hosts_to_read(None, hostvars, ["node-1"]) == []
    assert FilterModule().filters()["gpu_hosts_to_read"] is gpu_hosts_to_read
