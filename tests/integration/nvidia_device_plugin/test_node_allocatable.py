"""A kwok node's GPU capacity and allocatable come from NVIDIA's nvidia-device-plugin: the testbed's kubelet endpoint
writes the plugin's ListAndWatch answer into the node's status on the testbed's API server."""

import time

from tests.testbed.gpusim import hoststate
from tests.testbed.gpusim.simhost import library_dir
from tests.testbed.kubelet_deviceplugin import Kubelet, NodeStatus
from tests.testbed.nvidia_device_plugin import NvidiaDevicePlugin

from .test_plugin_answer import H100, WAIT, make_mig_devices


def wait_node(testbed, node, plugin, wanted):
    """Wait until the node's capacity and allocatable hold `wanted` for the resources named in it."""
    deadline = time.monotonic() + WAIT
    while True:
        status = testbed.core.read_node(node).status
        seen = ({k: (status.capacity or {}).get(k) for k in wanted}, {k: (status.allocatable or {}).get(k) for k in wanted})
        if seen == (wanted, wanted):
            return
        assert plugin.running() and time.monotonic() < deadline, "node %s shows %s, not %s; plugin log:\n%s" % (
            node, seen, wanted, plugin.log_tail())
        time.sleep(0.5)


def test_node_status_follows_the_plugin(testbed, testbed_node, tmp_path):
    node = testbed_node("dp-h100").metadata.name
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    lib = library_dir(build=True)
    plugin = NvidiaDevicePlugin(node, state, tmp_path / "node", lib, {"MIG_STRATEGY": "none"})
    plugin.prepare()
    kubelet = Kubelet(plugin.plugin_dir, NodeStatus(node, testbed.kubeconfig).set, grace=3600).start()
    try:
        plugin.start()
        wait_node(testbed, node, plugin, {"nvidia.com/gpu": "2"})  # MIG mode on, no MIG devices: whole GPUs
        make_mig_devices(state, lib)
        plugin.restart({"MIG_STRATEGY": "mixed"})
        wait_node(testbed, node, plugin, {"nvidia.com/mig-1g.10gb": "14"})
        status = testbed.core.read_node(node).status
        assert (status.allocatable["nvidia.com/gpu"], status.capacity["nvidia.com/gpu"]) == ("0", "2")
        plugin.restart({"MIG_STRATEGY": "single"})
        wait_node(testbed, node, plugin, {"nvidia.com/gpu": "14"})
    finally:
        plugin.stop()
        kubelet.stop()
