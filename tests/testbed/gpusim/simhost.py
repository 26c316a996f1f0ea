# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Create and inspect a simulated GPU host (the state file the simulated NVML serves).

    python -m tests.testbed.gpusim.simhost create --state F --model "NVIDIA H200" --count 4 [--fault reset_unsupported]
    python -m tests.testbed.gpusim.simhost show --state F [--json]
    python -m tests.testbed.gpusim.simhost reset --state F [--gpu N]      # like nvidia-smi -r
    python -m tests.testbed.gpusim.simhost reboot --state F
    python -m tests.testbed.gpusim.simhost add-process --state F --gpu 0 --pid 4242 --used-mb 1024 [--gi 1 --ci 0]
    python -m tests.testbed.gpusim.simhost remove-processes --state F [--gpu N] [--pid P]
    python -m tests.testbed.gpusim.simhost fault --state F --name no_permission [--gpu N] [--clear]
    python -m tests.testbed.gpusim.simhost env --state F                  # shell exports for pynvml
    python -m tests.testbed.gpusim.simhost models
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tests.testbed.gpusim import hoststate

BUILD_SH = Path(__file__).with_name("build.sh")
STATE_ENV = "GPUFLEET_SIM_NVML_STATE"


def library_dir(build=True):
    """Directory holding the simulated libnvidia-ml.so.1 (built first unless build=False)."""
    args = [str(BUILD_SH)] + ([] if build else ["path"])
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()


def preload_library(lib_dir):
    """Load the simulated library into this process so pynvml's later dlopen("libnvidia-ml.so.1") finds it.

    The dynamic loader reads LD_LIBRARY_PATH only at process start; a library already loaded under the
    same soname is reused instead. Call before the process's first nvmlInit, then point
    GPUFLEET_SIM_NVML_STATE (os.environ) at a host before each nvmlInit.
    """
    import ctypes  # pylint: disable=import-outside-toplevel
    return ctypes.CDLL(str(Path(lib_dir) / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)


def sim_env(state_path, lib_dir, base=None):
    """Environment for a process that should see the simulated host through pynvml."""
    env = dict(base or {})
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (":" + old if old else "")
    env[STATE_ENV] = str(Path(state_path).resolve())
    return env


def _format(summary):
    lines = ["driver %s (NVML %s, CUDA %s), boot %s" % (
        summary["driver_version"], summary["nvml_version"], summary["cuda_driver_version"], summary["boot"])]
    for gpu in summary["gpus"]:
        mode = gpu["mig_mode"]
        lines.append("GPU %d: %s %s %s  MIG current=%d pending=%d%s" % (
            gpu["index"], gpu["name"], gpu["uuid"], gpu["pci_bus_id"], mode["current"], mode["pending"],
            ("  faults=" + ",".join(gpu["faults"])) if gpu["faults"] else ""))
        for gi in gpu["gpu_instances"]:
            lines.append("  GI %2d  %-12s profile %2d  placement %d:%d  CIs: %s" % (
                gi["id"], gi["profile"], gi["profile_id"], gi["placement"]["start"], gi["placement"]["size"],
                ", ".join("%d (%s)" % (ci["id"], ci["name"]) for ci in gi["compute_instances"]) or "-"))
        for proc in gpu["processes"]:
            where = "" if proc["gi_id"] is None else "  on GI %s CI %s" % (proc["gi_id"], proc["ci_id"])
            lines.append("  pid %d %s %d MiB%s" % (proc["pid"], proc["name"], proc["used_mb"], where))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.gpusim.simhost", description=__doc__.split("\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def cmd(name, help_text):
        p = sub.add_parser(name, help=help_text)
        if name != "models":
            p.add_argument("--state", required=True, help="host state file")
        return p

    p = cmd("create", "create (overwrite) a simulated host")
    p.add_argument("--model", required=True, help="catalog key or NVML name, e.g. H200 or 'NVIDIA H200'")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--fault", action="append", default=[], choices=hoststate.FAULTS, help="host-wide fault (repeat)")
    p.add_argument("--driver", default=hoststate.DEFAULT_DRIVER, help="driver version, e.g. 535.183.01")
    p.add_argument("--mig-enabled", action="store_true", help="GPUs start with MIG mode on")
    p.add_argument("--seed", type=int, help="seed for UUIDs and serials (reproducible hosts)")
    p = cmd("show", "print the host")
    p.add_argument("--json", action="store_true")
    p = cmd("reset", "GPU reset (nvidia-smi -r): applies a pending MIG mode")
    p.add_argument("--gpu", type=int, help="one GPU (default: all)")
    cmd("reboot", "host reboot: processes end, pending modes apply, MIG devices are gone")
    p = cmd("add-process", "a compute process holding a GPU")
    p.add_argument("--gpu", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--used-mb", type=int, default=1024)
    p.add_argument("--gi", type=int, help="GPU instance id (MIG)")
    p.add_argument("--ci", type=int, help="compute instance id (MIG)")
    p.add_argument("--name", default="python3")
    p = cmd("remove-processes", "remove processes")
    p.add_argument("--gpu", type=int)
    p.add_argument("--pid", type=int)
    p = cmd("fault", "set or clear a fault")
    p.add_argument("--name", required=True, choices=hoststate.FAULTS)
    p.add_argument("--gpu", type=int, help="one GPU (default: host-wide)")
    p.add_argument("--clear", action="store_true")
    cmd("env", "print shell exports that make pynvml see this host (builds the library if needed)")
    cmd("models", "list catalog models")
    args = parser.parse_args(argv)

    try:
        if args.command == "create":
            result = hoststate.create_host(args.state, args.model, args.count, faults=args.fault,
                                           driver_version=args.driver, mig_enabled=args.mig_enabled, seed=args.seed)
            print(_format(result))
        elif args.command == "show":
            result = hoststate.summary(args.state)
            print(json.dumps(result, indent=2) if args.json else _format(result))
        elif args.command == "reset":
            indexes = [args.gpu] if args.gpu is not None else [g["index"] for g in hoststate.summary(args.state)["gpus"]]
            for index in indexes:
                hoststate.reset_gpu(args.state, index)
            print(_format(hoststate.summary(args.state)))
        elif args.command == "reboot":
            print(_format(hoststate.reboot(args.state)))
        elif args.command == "add-process":
            hoststate.add_process(args.state, args.gpu, args.pid, args.used_mb, args.gi, args.ci, args.name)
        elif args.command == "remove-processes":
            print("removed %d" % hoststate.remove_processes(args.state, args.gpu, args.pid))
        elif args.command == "fault":
            hoststate.set_fault(args.state, args.gpu, args.name, 0 if args.clear else 1)
        elif args.command == "env":
            env = sim_env(args.state, library_dir(), {})
            for key in ("LD_LIBRARY_PATH", STATE_ENV):
                print("export %s=%s" % (key, shlex.quote(env[key])))
        elif args.command == "models":
            for key, entry in hoststate.catalog()["models"].items():
                print("%-16s %-24s %s  %d GI profiles"
                      % (key, entry["nvml_name"], entry["pci_device_id"], len(entry["gi_profiles"])))
    except hoststate.SimHostError as err:
        print("simhost: %s" % err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
