"""NVIDIA's nvidia-device-plugin v0.20.0 against a simulated host, registered with the testbed's kubelet endpoint
(no API server here: the endpoint's node-status writes are recorded; tests with a cluster patch the node).

The oracle is NVIDIA's plugin: the resources and device counts it registers and lists over ListAndWatch, for the MIG
layout that NVML (the simulated libnvidia-ml.so.1) reports. MIG devices are made through NVML's own calls (what
nvidia-mig-parted calls), in a process of their own.
"""

import json
import subprocess
import sys
import textwrap
import time

import pytest

from tests.testbed.gpusim import hoststate
from tests.testbed.gpusim.simhost import library_dir, sim_env
from tests.testbed.kubelet_deviceplugin import HEALTHY, Kubelet
from tests.testbed.nvidia_device_plugin import CDI_ENV, NvidiaDevicePlugin

H100 = "H100-80GB-HBM3"
WAIT = 120  # seconds for the plugin to start, register and answer on this shared 2-core machine

# Seven 1g.10gb GPU instances, each with its one compute instance, on every GPU (MIG mode already on).
ALL_1G_10GB = textwrap.dedent("""
    import pynvml as n
    n.nvmlInit()
    for i in range(n.nvmlDeviceGetCount()):
        d = n.nvmlDeviceGetHandleByIndex(i)
        gip = n.nvmlDeviceGetGpuInstanceProfileInfo(d, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        for _ in range(7):
            gi = n.nvmlDeviceCreateGpuInstance(d, gip.id)
            cip = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            n.nvmlGpuInstanceCreateComputeInstance(gi, cip.id)
    n.nvmlShutdown()
""")


@pytest.fixture(scope="module")
def nvml_lib():
    return library_dir(build=True)


@pytest.fixture
def node(tmp_path, nvml_lib):
    """(kubelet endpoint, plugin factory) for one simulated node in tmp_path; both stopped afterwards."""
    statuses = []
    plugins = []
    kubelet = None

    def start(state, env):
        nonlocal kubelet
        plugin = NvidiaDevicePlugin("dp-node", state, tmp_path / "node", nvml_lib, env)
        plugin.plugin_dir.mkdir(parents=True, exist_ok=True)
        if kubelet is None:
            kubelet = Kubelet(plugin.plugin_dir, lambda *change: statuses.append(change), grace=3600).start()
        plugins.append(plugin.start())
        return kubelet, plugin

    start.statuses = statuses
    yield start
    for plugin in plugins:
        plugin.stop()
    if kubelet is not None:
        kubelet.stop()


def healthy(devices, resource):
    return sum(1 for health in devices.get(resource, {}).values() if health == HEALTHY)


def wait_for(kubelet, plugin, wanted):
    """Wait until the plugin lists exactly `wanted` ({resource: healthy count}) and nothing else healthy."""
    def done(devices):
        live = {r: healthy(devices, r) for r in devices if healthy(devices, r)}
        return live == wanted
    deadline = time.monotonic() + WAIT
    while not kubelet.wait(done, 1):
        assert plugin.running() and time.monotonic() < deadline, "plugin lists %s, not %s; its log:\n%s" % (
            {r: healthy(kubelet.devices, r) for r in kubelet.devices}, wanted, plugin.log_tail())


def make_mig_devices(state, nvml_lib):
    subprocess.run([sys.executable, "-c", ALL_1G_10GB], env=sim_env(state, nvml_lib, {"PATH": "/usr/bin:/bin"}),
                   check=True, capture_output=True, text=True)


def test_strategy_none_lists_every_gpu(tmp_path, node):
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 4)
    kubelet, plugin = node(state, {"MIG_STRATEGY": "none"})
    wait_for(kubelet, plugin, {"nvidia.com/gpu": 4})
    assert [r.resource_name for r in kubelet.registrations] == ["nvidia.com/gpu"]
    uuids = {gpu["uuid"] for gpu in hoststate.summary(state)["gpus"]}
    assert set(kubelet.devices["nvidia.com/gpu"]) == uuids  # DEVICE_ID_STRATEGY=uuid
    assert ("nvidia.com/gpu", 4, 4) in node.statuses


def test_mixed_strategy_lists_each_mig_profile(tmp_path, node, nvml_lib):
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    make_mig_devices(state, nvml_lib)
    kubelet, plugin = node(state, {"MIG_STRATEGY": "mixed"})
    wait_for(kubelet, plugin, {"nvidia.com/mig-1g.10gb": 14})
    assert "nvidia.com/gpu" not in {r.resource_name for r in kubelet.registrations}


def test_single_strategy_lists_mig_devices_as_gpus(tmp_path, node, nvml_lib):
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    make_mig_devices(state, nvml_lib)
    kubelet, plugin = node(state, {"MIG_STRATEGY": "single"})
    wait_for(kubelet, plugin, {"nvidia.com/gpu": 14})


def test_restart_with_another_strategy_replaces_the_resource(tmp_path, node, nvml_lib):
    """The plugin restarted with MIG_STRATEGY mixed (config-manager's SIGHUP or a new pod) registers the MIG resource;
    the GPU resource of the stopped one keeps no allocatable, as kubelet shows a stopped plugin's devices."""
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    make_mig_devices(state, nvml_lib)
    kubelet, plugin = node(state, {"MIG_STRATEGY": "single"})
    wait_for(kubelet, plugin, {"nvidia.com/gpu": 14})
    plugin.restart({"MIG_STRATEGY": "mixed"})
    wait_for(kubelet, plugin, {"nvidia.com/mig-1g.10gb": 14})
    assert ("nvidia.com/gpu", 14, 0) in node.statuses


def test_cdi_spec_names_each_device_and_its_nodes(tmp_path, node, nvml_lib):
    """With the operator's CDI settings the plugin writes its CDI spec from the fake driver root before it serves
    (tests/testbed/nvidia_device_plugin.py driver_root): a GPU without MIG by its UUID with its /dev/nvidia<minor>, a
    MIG device by its UUID with its GPU's node and its GPU- and compute-instance capability nodes, at the driver
    container's host paths."""
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    make_mig_devices(state, nvml_lib)
    kubelet, plugin = node(state, dict(CDI_ENV, MIG_STRATEGY="mixed"))
    wait_for(kubelet, plugin, {"nvidia.com/mig-1g.10gb": 14})
    spec = json.loads((plugin.work / "cdi" / "k8s.device-plugin.nvidia.com-gpu.json").read_text())
    assert {d["name"] for d in spec["devices"]} == set(kubelet.devices["nvidia.com/mig-1g.10gb"])
    for device in spec["devices"]:
        nodes = device["containerEdits"]["deviceNodes"]
        assert [n["path"].rsplit("/", 1)[0] for n in nodes] == ["/dev", "/dev/nvidia-caps", "/dev/nvidia-caps"]
        assert all(n["hostPath"] == "/run/nvidia/driver" + n["path"] for n in nodes)
    plugin.stop()
    hoststate.create_host(state, H100, 2)
    kubelet, plugin = node(state, dict(CDI_ENV, MIG_STRATEGY="none"))
    wait_for(kubelet, plugin, {"nvidia.com/gpu": 2})
    spec = json.loads((plugin.work / "cdi" / "k8s.device-plugin.nvidia.com-gpu.json").read_text())
    assert {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]} == {
        gpu["uuid"]: ["/dev/nvidia%d" % gpu["index"]] for gpu in hoststate.summary(state)["gpus"]}


def test_cdi_spec_without_devices_stops_the_plugin(tmp_path, node):
    """GPUs in MIG mode without MIG devices: nvcdi lists MIG devices, not GPUs in MIG mode, so the spec would be empty
    and NVIDIA's plugin with CDI exits (FAIL_ON_INIT_ERROR), where without CDI it serves the whole GPUs under none."""
    state = tmp_path / "host.state"
    hoststate.create_host(state, H100, 2, mig_enabled=True)
    _kubelet, plugin = node(state, dict(CDI_ENV, MIG_STRATEGY="none"))
    deadline = time.monotonic() + WAIT
    while plugin.running():
        assert time.monotonic() < deadline, "plugin still runs; its log:\n%s" % plugin.log_tail()
        time.sleep(0.5)
    assert "unable to create cdi spec file" in plugin.log_tail() and "invalid spec, no devices" in plugin.log_tail()
