"""The stand-in for the driver's nvidia-smi (tests/testbed/fakehost/bin/nvidia-smi) that NVIDIA's nvidia-mig-parted runs
to reset GPUs after a MIG mode change: it resets the simulated host's GPUs by hoststate's rules and, like the real
one, lists the GPUs it could not reset with NVML's reason and exits 255."""

import os
import subprocess
from pathlib import Path

from tests.testbed.gpusim import hoststate

NVIDIA_SMI = Path(__file__).resolve().parents[2] / "testbed" / "fakehost" / "bin" / "nvidia-smi"


def reset(host, *bus_ids):
    env = dict(os.environ, GPUFLEET_SIM_NVML_STATE=host.state_path)
    return subprocess.run([str(NVIDIA_SMI), "-r", "-i", ",".join(bus_ids)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_busy_gpu_is_not_reset_and_a_free_one_is(sim_host):
    host = sim_host("H100-80GB-HBM3", 2)
    busy, free = (g["pci_bus_id"] for g in host.summary()["gpus"])
    hoststate.set_fault(host.state_path, None, "mig_mode_needs_reset")
    for index in (0, 1):
        host.run_python("import pynvml as n\nn.nvmlInit()\nn.nvmlDeviceSetMigMode(n.nvmlDeviceGetHandleByIndex(%d), 1)"
                        % index)
    host.add_process(0, 4321, 2048)
    out = reset(host, busy, free)
    assert out.returncode == 255, out
    assert "GPU %s was successfully reset." % free in out.stdout
    assert "The following GPUs could not be reset:\n  GPU %s: In use by another client\n" % busy in out.stdout
    modes = [g["mig_mode"] for g in host.summary()["gpus"]]
    assert modes == [{"current": 0, "pending": 1}, {"current": 1, "pending": 1}]
    host.remove_processes(0, 4321)
    again = reset(host, busy)
    assert again.returncode == 0 and again.stdout.endswith("All done.\n"), again
    assert host.summary()["gpus"][0]["mig_mode"] == {"current": 1, "pending": 1}


def test_no_reset_in_a_vm_and_an_unknown_bus_id(sim_host):
    host = sim_host("A100-SXM4-40GB", 1, faults=["reset_unsupported"])
    bus = host.summary()["gpus"][0]["pci_bus_id"]
    out = reset(host, bus)
    assert out.returncode == 255 and "  GPU %s: Not Supported\n" % bus in out.stdout, out
    missing = reset(host, "00000000:99:00.0")
    assert missing.returncode == 6 and "No devices were found matching 00000000:99:00.0" in missing.stdout, missing
