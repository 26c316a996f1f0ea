"""The GFD matrix: every catalog model x MIG layout x MIG strategy x time-slicing, as hosts of the simulated NVML.

The MIG configs are the ones NVIDIA's ``nvidia-mig-parted generate-config`` writes for the model's simulated host.
Builds each host through NVML (the agents' hardware module on the simulated libnvidia-ml.so.1, as MIG Manager
would), then runs NVIDIA's GFD on it (tests/testbed/oracle). Shared by test_gfd_matrix.py.
"""

import collections
import functools
import tempfile
from pathlib import Path

import yaml

from tests.integration.agents.test_agent_logic import make_gpu
from tests.testbed.agents import hardware, migconfig
from tests.testbed.gpusim import hoststate, simhost
from tests.testbed.gpusim.pytest_gpusim import SimHost, mig_parted_binary

GPUS_PER_HOST = 2
STRATEGIES = ("none", "single", "mixed")
SHARING = {
    "off": None,
    "ts-2": {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}},
    "ts-4": {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
    "ts-4-rename": {"version": "v1", "sharing": {"timeSlicing": {"renameByDefault": True,
                                                                 "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
}
# MPS: whole GPUs only (NVIDIA's GFD fails on a node with a GPU in MIG mode, the device plugin refuses MIG devices
# and the mixed strategy), so the MIG resources are never listed.
MPS_SHARING = {
    "mps-%d%s" % (replicas, "-rename" if rename else ""): {
        "version": "v1", "sharing": {"mps": dict({"renameByDefault": True} if rename else {},
                                                 resources=[{"name": "nvidia.com/gpu", "replicas": replicas}])}}
    for replicas in (2, 4) for rename in (False, True)
}
# The MIG strategies under which NVIDIA's device plugin accepts MPS (mixed: "using --mig-strategy=mixed is not
# supported with MPS", cmd/nvidia-device-plugin/main.go; the dpconfig oracle agrees).
MPS_STRATEGIES = ("none", "single")


def sharing_config(name, layout_devices):
    """The time-slicing config of ``name`` for a layout: nvidia.com/gpu, plus every MIG resource of the layout
    (they exist under mixed), all with the same replicas."""
    if name in MPS_SHARING:
        return yaml.safe_load(yaml.safe_dump(MPS_SHARING[name]))
    config = SHARING[name]
    if config is None:
        return None
    config = yaml.safe_load(yaml.safe_dump(config))
    block = config["sharing"]["timeSlicing"]
    replicas = block["resources"][0]["replicas"]
    for profile in sorted(layout_devices):
        block["resources"].append({"name": "nvidia.com/mig-" + profile.replace("+", "."), "replicas": replicas})
    return config


@functools.lru_cache(maxsize=None)
def nvidia_configs(model):
    """The ``mig-configs`` NVIDIA's ``nvidia-mig-parted generate-config`` (mig-parted v0.15.0) writes for a
    2-GPU simulated host of ``model``."""
    with tempfile.TemporaryDirectory(prefix="gfd-matrix-") as tmp:
        state = Path(tmp) / "host.state"
        hoststate.create_host(state, model, GPUS_PER_HOST, seed=7)
        proc = SimHost(state, simhost.library_dir()).run([mig_parted_binary(), "generate-config"])
    if proc.returncode != 0:
        raise RuntimeError("nvidia-mig-parted generate-config on a simulated %s exited %d: %s"
                           % (model, proc.returncode, proc.stderr))
    return yaml.safe_load(proc.stdout)["mig-configs"]


def layouts(model):
    """{layout name: {gpu index: None (MIG off) | {profile: count}}} for a 2-GPU host of ``model``: MIG off, every
    config NVIDIA's generator writes for the host, and one GPU with the balanced layout beside one with MIG off."""
    gpus = [make_gpu(model, i) for i in range(GPUS_PER_HOST)]
    out = {"mig-off": {i: None for i in range(GPUS_PER_HOST)}}
    if not gpus[0].mig_capable:
        return out
    configs = nvidia_configs(model)
    for name in configs:
        if name == "all-disabled":
            continue
        plan = migconfig.select(configs, name, gpus)
        out[name] = {i: dict(plan[i][1]) for i in plan}
    balanced = out.get("all-balanced") or next(v for k, v in out.items() if k.startswith("all-") and k != "all-enabled")
    out["mixed-layout"] = {0: dict(balanced[0]), 1: None}
    return out


def build_host(path, model, layout):
    """A simulated host of ``model`` with ``layout`` applied through NVML (mode set, GPU reset, devices created)."""
    hoststate.create_host(path, model, GPUS_PER_HOST, seed=7)
    enabled = [i for i, devices in layout.items() if devices is not None]
    if enabled:
        hardware.set_mig_mode(path, enabled, True)
        for index in enabled:
            hoststate.reset_gpu(path, index)
    host = hardware.read_host(path)
    for index in enabled:
        gpu = host.gpus[index]
        hardware.apply_mig_devices(path, index, migconfig.wanted_devices(gpu, layout[index]))
    return hardware.read_host(path)


def layout_devices(layout):
    return collections.Counter(p for devices in layout.values() if devices for p, n in devices.items() for _copy in range(n))
