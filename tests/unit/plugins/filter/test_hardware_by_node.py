"""The hardware_by_node filter: gpu_info results registered per host, keyed by Kubernetes node name."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.hardware_by_node import FilterModule, hardware_by_node


def test_hosts_with_gpus_are_keyed_by_node_name_others_left_out():
    gpus = [{"index": 0, "name": "NVIDIA H200"}]
    hostvars = {
        "h1": {"gpu_node_name": "node-1", "gpu_read": {"gpus": gpus, "changed": False}},
        "h2": {"gpu_read": {"gpus": gpus}},
        "h3": {"gpu_read": {"failed": True, "msg": "NVML library not found"}},
        "h4": {"gpu_read": {"gpus": []}},
        "h5": {"gpu_read": "skipped"},
        "h6": {},
    }
    found = hardware_by_node(["h1", "h2", "h3", "h4", "h5", "h6"], hostvars, "gpu_read")
    assert found == {"node-1": {"gpus": gpus}, "h2": {"gpus": gpus}}
    assert hardware_by_node(None, hostvars, "gpu_read") == {}
    assert FilterModule().filters()["hardware_by_node"] is hardware_by_node
