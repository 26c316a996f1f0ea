"""CLI of the simulated GPU Operator node agents.

  python -m tests.testbed.agents run   --kubeconfig K --hosts-dir D [--namespace gpu-operator] [timing flags]
  python -m tests.testbed.agents start --kubeconfig K --hosts-dir D [--pidfile .testbed/agents.pid] [...]
  python -m tests.testbed.agents stop  [--pidfile .testbed/agents.pid]
  python -m tests.testbed.agents status [--pidfile .testbed/agents.pid]

`run` stays in the foreground; `start` runs it in the background with a pidfile and a log file
next to it (for `make demo`); `stop` ends that process.
"""

import argparse
import ctypes
import signal
import sys

from tests.testbed import daemon

DEFAULT_PIDFILE = ".testbed/agents.pid"


def _parser():
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.agents")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "start"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--kubeconfig", required=True)
        cmd.add_argument("--hosts-dir", required=True, help="directory of <node>.state files and agent logs")
        cmd.add_argument("--namespace", default="gpu-operator", help="namespace of the operator and its operands")
        cmd.add_argument("--apply-seconds", type=float, default=0.0, help="simulated time per MIG apply")
        cmd.add_argument("--slow-seconds", type=float, default=10.0, help="extra apply time under fault 'slow'")
        cmd.add_argument("--reboot-seconds", type=float, default=3.0, help="NotReady time of a simulated reboot")
        cmd.add_argument("--pod-wait-seconds", type=float, default=300.0,
                         help="how long MIG Manager waits for operand pods to go")
        cmd.add_argument("--host-clients-seconds", type=float, default=30.0,
                         help="pause after stopping host GPU clients and kubelet for a mode change (upstream 30 s)")
        cmd.add_argument("--rescan-seconds", type=float, default=2.0,
                         help="how often GFD/device plugin re-read the hardware")
        cmd.add_argument("--nvml-lib-dir", help="directory of the simulated libnvidia-ml.so.1 "
                         "(default: LD_LIBRARY_PATH as given)")
        cmd.add_argument("--gfd-binary", help="NVIDIA's gpu-feature-discovery (tests/testbed/build-gfd.sh gfd): its labels "
                                              "instead of the re-implemented ones (operands.gfd_labels)")
        cmd.add_argument("--mig-manager", choices=("sim", "nvidia"), default="sim",
                         help="who plays MIG Manager: the simulator (default) or NVIDIA's nvidia-mig-manager process per "
                              "node (tests/testbed/agents/nvidia_mig.py); node annotation gpusim.gpufleet.io/mig-manager wins")
        cmd.add_argument("--device-plugin", choices=("sim", "nvidia"), default="sim",
                         help="who advertises the GPUs: the agents (default) or NVIDIA's nvidia-device-plugin process per "
                              "node with a kubelet endpoint (tests/testbed/agents/nvidia_plugin.py); node annotation "
                              "gpusim.gpufleet.io/device-plugin wins")
        cmd.add_argument("-v", "--verbose", action="store_true")
        if name == "start":
            cmd.add_argument("--pidfile", default=DEFAULT_PIDFILE)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--pidfile", default=DEFAULT_PIDFILE)
    return parser


def run(args):
    daemon.reexec_with_library_dir(args.nvml_lib_dir, "tests.testbed.agents")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as err:
        print("simulated NVML (libnvidia-ml.so.1) not loadable: %s; pass --nvml-lib-dir "
              "(tests/testbed/gpusim/build.sh prints it)" % err, file=sys.stderr)
        return 2
    from tests.testbed.agents.agent import Agents, Timing, configure_logging

    configure_logging(args.verbose)
    timing = Timing(apply_seconds=args.apply_seconds, slow_seconds=args.slow_seconds,
                    reboot_seconds=args.reboot_seconds, pod_wait_seconds=args.pod_wait_seconds,
                    rescan_seconds=args.rescan_seconds, host_clients_seconds=args.host_clients_seconds)
    agents = Agents(args.kubeconfig, args.hosts_dir, args.namespace, timing,
                    gfd_binary=args.gfd_binary, nvml_lib_dir=args.nvml_lib_dir, mig_manager=args.mig_manager,
                    device_plugin=args.device_plugin)
    signal.signal(signal.SIGTERM, lambda *_: agents.stop())
    signal.signal(signal.SIGINT, lambda *_: agents.stop())
    agents.start()
    agents.wait()
    return 0


def start(args):
    argv = [sys.executable, "-m", "tests.testbed.agents", "run"]
    for key, value in vars(args).items():
        if key in ("command", "pidfile") or value in (None, False):
            continue
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return daemon.start("agents", argv, args.pidfile)


def stop(args):
    return daemon.stop("agents", args.pidfile, grace_seconds=10)


def status(args):
    return daemon.status("agents", args.pidfile)


def main(argv=None):
    args = _parser().parse_args(argv)
    return {"run": run, "start": start, "stop": stop, "status": status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
