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
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
        cmd.add_argument("--rescan-seconds", type=float, default=2.0,
                         help="how often GFD/device plugin re-read the hardware")
        cmd.add_argument("--nvml-lib-dir", help="directory of the simulated libnvidia-ml.so.1 "
                         "(default: LD_LIBRARY_PATH as given)")
        cmd.add_argument("-v", "--verbose", action="store_true")
        if name == "start":
            cmd.add_argument("--pidfile", default=DEFAULT_PIDFILE)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--pidfile", default=DEFAULT_PIDFILE)
    return parser


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _read_pid(pidfile):
    try:
        return int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None


def _with_nvml_lib(args):
    """Re-exec with the simulated NVML on LD_LIBRARY_PATH: the loader reads it only at process start."""
    if not args.nvml_lib_dir:
        return
    lib_dir = str(Path(args.nvml_lib_dir).resolve())
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    if lib_dir in paths:
        return
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([lib_dir] + [p for p in paths if p]))
    os.execve(sys.executable, [sys.executable, "-m", "tests.testbed.agents"] + sys.argv[1:], env)


def run(args):
    _with_nvml_lib(args)
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
                    rescan_seconds=args.rescan_seconds)
    agents = Agents(args.kubeconfig, args.hosts_dir, args.namespace, timing)
    signal.signal(signal.SIGTERM, lambda *_: agents.stop())
    signal.signal(signal.SIGINT, lambda *_: agents.stop())
    agents.start()
    agents.wait()
    return 0


def start(args):
    pidfile = Path(args.pidfile)
    pid = _read_pid(pidfile)
    if pid and _alive(pid):
        print("agents already running (pid %d)" % pid)
        return 0
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "tests.testbed.agents", "run"]
    for key, value in vars(args).items():
        if key in ("command", "pidfile") or value in (None, False):
            continue
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    log = open(pidfile.with_suffix(".log"), "ab")  # pylint: disable=consider-using-with  # child keeps it
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=os.getcwd())
    pidfile.write_text("%d\n" % proc.pid)
    time.sleep(1.0)
    if proc.poll() is not None:
        print("agents exited at once (rc %s); see %s" % (proc.returncode, pidfile.with_suffix(".log")))
        return 1
    print("agents started (pid %d, log %s)" % (proc.pid, pidfile.with_suffix(".log")))
    return 0


def stop(args):
    pidfile = Path(args.pidfile)
    pid = _read_pid(pidfile)
    if not pid or not _alive(pid):
        print("agents not running")
        pidfile.unlink(missing_ok=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    print("agents stopped (pid %d)" % pid)
    return 0


def status(args):
    pid = _read_pid(args.pidfile)
    running = bool(pid and _alive(pid))
    print("agents %s" % ("running (pid %d)" % pid if running else "not running"))
    return 0 if running else 3


def main(argv=None):
    args = _parser().parse_args(argv)
    return {"run": run, "start": start, "stop": stop, "status": status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
