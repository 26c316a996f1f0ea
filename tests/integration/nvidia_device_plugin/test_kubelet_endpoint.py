"""The testbed's kubelet endpoint as kubelet's device manager behaves: API version check, a stopped plugin's grace."""

import time

import grpc
import pytest

from tests.testbed.gpusim import hoststate
from tests.testbed.gpusim.simhost import library_dir
from tests.testbed.kubelet_deviceplugin import Kubelet, stubs
from tests.testbed.nvidia_device_plugin import NvidiaDevicePlugin

from .test_plugin_answer import H100, WAIT


def test_register_refuses_another_api_version(tmp_path):
    pb, pb_grpc = stubs()
    kubelet = Kubelet(tmp_path / "dp", lambda *change: None).start()
    try:
        with grpc.insecure_channel("unix://%s" % kubelet.socket) as channel:
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.RegistrationStub(channel).Register(
                    pb.RegisterRequest(version="v1alpha", endpoint="x.sock", resource_name="nvidia.com/gpu"), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "v1alpha" in err.value.details()
        assert not kubelet.registrations
    finally:
        kubelet.stop()


def test_stopped_plugin_loses_allocatable_then_capacity_after_the_grace(tmp_path):
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2)
    statuses = []
    plugin = NvidiaDevicePlugin("dp-node", state, tmp_path / "node", library_dir(build=True), {"MIG_STRATEGY": "none"})
    plugin.prepare()
    kubelet = Kubelet(plugin.plugin_dir, lambda *change: statuses.append(change), grace=2).start()
    try:
        plugin.start()
        assert kubelet.wait(lambda devices: len(devices.get("nvidia.com/gpu", {})) == 2, WAIT), plugin.log_tail()
        plugin.stop()
        assert kubelet.wait(lambda devices: "nvidia.com/gpu" not in devices, WAIT)
        deadline = time.monotonic() + 10
        while statuses[-1] != ("nvidia.com/gpu", 0, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert statuses == [("nvidia.com/gpu", 2, 2), ("nvidia.com/gpu", 2, 0), ("nvidia.com/gpu", 0, 0)]
    finally:
        plugin.stop()
        kubelet.stop()
