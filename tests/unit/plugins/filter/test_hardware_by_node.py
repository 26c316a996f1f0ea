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


def test_targets_list_every_host_with_its_hardware_or_why_it_was_not_read():
    gpus = [{"index": 0, "name": "NVIDIA H200"}]
    hostvars = {
        "h1": {"gpu_node_name": "node-1", "gpu_read": {"gpus": gpus}},
        "h2": {"gpu_read": {"failed": True, "msg": "NVML library not found"}},
        "h3": {"gpu_read": {"failed": True}},
        "h4": {"gpu_read": {"unreachable": True, "msg": "ssh: connect refused"}},
        "h5": {"gpu_read": {"skipped": True, "changed": False}},
        "h6": {},
        "h7": {"gpu_read": {"gpus": []}},
    }
    got = hardware_by_node(["h1", "h2", "h3", "h4", "h5", "h6", "h7"], hostvars, "gpu_read", targets=True)
    assert got == [
        {"name": "node-1", "hardware": {"gpus": gpus}, "hardware_error": None},
        {"name": "h2", "hardware": None, "hardware_error": "NVML library not found"},
        {"name": "h3", "hardware": None, "hardware_error": "gpu_info returned no GPUs"},
        {"name": "h4", "hardware": None, "hardware_error": None},
        {"name": "h5", "hardware": None, "hardware_error": None},
        {"name": "h6", "hardware": None, "hardware_error": None},
        {"name": "h7", "hardware": {"gpus": []}, "hardware_error": None},
    ]
