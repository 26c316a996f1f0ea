"""NVIDIA's nvidia-device-plugin (k8s-device-plugin v0.20.0) for one simulated GPU node, as its DaemonSet pod runs it.

  python -m tests.testbed.nvidia_device_plugin run --node N --state S --work-dir D --kubeconfig K
      [--env NAME=VALUE ...] [--grace SECONDS]

``run`` starts the node's kubelet device-plugin endpoint (tests/testbed/kubelet_deviceplugin.py, which writes the
node's capacity/allocatable from the plugin's ListAndWatch answers) and NVIDIA's plugin beside it.

The binary is built offline from NVIDIA's release source by tests/testbed/build-nvidia.sh and runs against the
simulated NVML (LD_LIBRARY_PATH, GPUFLEET_SIM_NVML_STATE). Only the host's OS boundary is faked (docs/testbed.md,
"NVIDIA's device plugin"):

* a private mount namespace (``unshare --mount``; we are root) in which ``/var/lib`` is an overlay whose upper layer is
  in the node's work dir, with the node's ``<work-dir>/device-plugins`` bound at ``/var/lib/kubelet/device-plugins``:
  the plugin serves its sockets in pluginapi.DevicePluginPath, a path fixed in its source (internal/plugin/server.go
  getPluginSocketPath), and finds kubelet.sock there (KUBELET_SOCKET's default), as the pod's hostPath volume
  ``device-plugin`` gives it on a real node. The host's /var/lib is not written;
* ``/proc/driver``: ``<work-dir>/proc-driver``, holding ``nvidia-caps/mig-minors``, the driver's MIG capability table
  (tests/testbed/fakehost/nvidia_caps.py); the plugin reads it to build each MIG device's device-node paths;
* on PATH, ``nvidia-cuda-mps-control`` (tests/testbed/fakehost/mps-bin): under MPS sharing the plugin asks it whether
  the node's MPS control daemon is healthy before it serves; the testbed runs no MPS daemon, and the stand-in answers
  as a healthy one does.

Logs: ``<work-dir>/device-plugin.log`` (NVIDIA's process, stdout and stderr, as the container log) and, for ``run``,
``<work-dir>/kubelet.log`` (the endpoint).
"""

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed.node_process import NodeProcess, spawn, stop_group
from tests.testbed.nvidia_mig_manager import binary

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MPS_CONTROL_DIR = REPO_ROOT / "tests" / "testbed" / "fakehost" / "mps-bin"  # nvidia-cuda-mps-control's stand-in
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"  # pluginapi.DevicePluginPath

# The nvidia-device-plugin container's environment as GPU Operator v26.7.0 sets it with the chart's defaults:
# assets/state-device-plugin/0500_daemonset.yaml, then controllers/object_controls.go TransformDevicePlugin
# (applyMIGConfiguration with values.yaml mig.strategy "single"). CDI (values.yaml cdi.enabled) is not part of this:
# transformDevicePluginCtrForCDI's CDI_ENABLED and DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri make the plugin write CDI
# specs from the driver's files, which the simulated host does not have; DEVICE_LIST_STRATEGY stays the DaemonSet's.
CHART_ENV = {
    "PASS_DEVICE_SPECS": "true",
    "FAIL_ON_INIT_ERROR": "true",
    "DEVICE_LIST_STRATEGY": "envvar",
    "DEVICE_ID_STRATEGY": "uuid",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "all",
    "MPS_ROOT": "/run/nvidia/mps",
    "MIG_STRATEGY": "single",
    "NVIDIA_MIG_MONITOR_DEVICES": "all",
}

NAMESPACE_SCRIPT = r"""
set -eu
work=$1; shift
mkdir -p "$work/upper/var-lib" "$work/overlay-work/var-lib"
mount -t overlay gpufleet-var-lib -o "lowerdir=/var/lib,upperdir=$work/upper/var-lib,workdir=$work/overlay-work/var-lib" /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$work/device-plugins" /var/lib/kubelet/device-plugins
mount --bind "$work/proc-driver" /proc/driver
exec "$@"
"""


class NvidiaDevicePlugin(NodeProcess):
    """One node's nvidia-device-plugin process. Its kubelet is whatever serves `<work-dir>/device-plugins/kubelet.sock`
    (tests/testbed/kubelet_deviceplugin.Kubelet on `plugin_dir`)."""

    def __init__(self, node, state_path, work_dir, nvml_lib_dir, env=None, log_path=None):
        self.node = node
        self.state_path = Path(state_path).resolve()
        self.work = Path(work_dir).resolve()
        self.nvml_lib_dir = Path(nvml_lib_dir).resolve()
        self.env = dict(CHART_ENV, **(env or {}))
        self.log_path = Path(log_path) if log_path else self.work / "device-plugin.log"
        self.proc = None

    @property
    def plugin_dir(self):
        """The node's device-plugin directory on the host (the plugin's /var/lib/kubelet/device-plugins)."""
        return self.work / "device-plugins"

    def environment(self):
        env = {"PATH": "%s:%s" % (MPS_CONTROL_DIR, SYSTEM_PATH), "HOME": "/root", "NODE_NAME": self.node,
               "LD_LIBRARY_PATH": str(self.nvml_lib_dir), "GPUFLEET_SIM_NVML_STATE": str(self.state_path)}
        env.update(self.env)
        return env

    def command(self):
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", NAMESPACE_SCRIPT,
                "gpufleet-device-plugin-ns", str(self.work), str(binary("nvidia-device-plugin"))]

    def prepare(self):
        from tests.testbed.fakehost.nvidia_caps import mig_minors

        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        caps = self.work / "proc-driver" / "nvidia-caps"
        caps.mkdir(parents=True, exist_ok=True)
        (caps / "mig-minors").write_text(mig_minors())

    def start(self):
        self.prepare()
        self.proc = spawn(self.command(), self.log_path, env=self.environment())
        return self

    def stop(self):
        proc, self.proc = self.proc, None
        stop_group(proc, 15)  # the health check's NVML event wait returns every 5 s

    def restart(self, env=None):
        """Stop and start again, with `env` over the current environment (a new MIG_STRATEGY, say)."""
        self.stop()
        self.env.update(env or {})
        return self.start()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run the plugin and its kubelet endpoint in the foreground until interrupted")
    run.add_argument("--node", required=True)
    run.add_argument("--state", required=True, help="the simulated host's state file")
    run.add_argument("--work-dir", required=True)
    run.add_argument("--kubeconfig", required=True)
    run.add_argument("--nvml-lib-dir", default=None)
    run.add_argument("--grace", type=float, default=None, help="kubelet's grace for a stopped plugin's capacity")
    run.add_argument("--env", action="append", default=[], help="NAME=VALUE over the chart's (MIG_STRATEGY...)")
    args = parser.parse_args(argv)
    lib = args.nvml_lib_dir
    if lib is None:
        from tests.testbed.gpusim.simhost import library_dir

        lib = library_dir(build=True)
    plugin = NvidiaDevicePlugin(args.node, args.state, args.work_dir, lib, dict(e.split("=", 1) for e in args.env))
    plugin.plugin_dir.mkdir(parents=True, exist_ok=True)
    kubelet_cmd = [sys.executable, "-m", "tests.testbed.kubelet_deviceplugin", "serve", "--node", args.node,
                   "--dir", str(plugin.plugin_dir), "--kubeconfig", args.kubeconfig]
    if args.grace is not None:
        kubelet_cmd += ["--grace", str(args.grace)]
    with open(plugin.work / "kubelet.log", "ab") as log:
        kubelet = subprocess.Popen(kubelet_cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT))  # pylint: disable=consider-using-with
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        deadline = time.monotonic() + 30
        while not (plugin.plugin_dir / "kubelet.sock").exists():
            if kubelet.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("kubelet endpoint did not start; see %s" % (plugin.work / "kubelet.log"))
            time.sleep(0.1)
        plugin.start()
        print("nvidia-device-plugin for %s: pid %d, log %s" % (args.node, plugin.proc.pid, plugin.log_path), flush=True)
        while plugin.running() and kubelet.poll() is None:
            time.sleep(1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        plugin.stop()
        kubelet.terminate()
        kubelet.wait(15)


if __name__ == "__main__":
    main()
