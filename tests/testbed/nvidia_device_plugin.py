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
  as a healthy one does;
* the driver's files, for CDI (CDI_ENV: GPU Operator v26.7.0 renders ``CDI_ENABLED=true``,
  ``DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri``): before it serves, the plugin writes a CDI spec of the node's
  devices (internal/cdi/cdi.go ``CreateSpecFile``, through the vendored nvidia-container-toolkit's pkg/nvcdi) from the
  driver's libraries and device nodes under its driver root (``DRIVER_ROOT_CTR_PATH``) into ``/var/run/cdi`` (fixed in
  cdi.go), and exits (FAIL_ON_INIT_ERROR) when nvcdi finds no library of NVML's driver version there. So ``/run`` is an
  overlay as well (upper layer in the work dir; ``/var/run`` links to it), with ``<work-dir>/cdi`` bound at
  ``/run/cdi`` (the pod's hostPath volume ``cdi-root``) and ``<work-dir>/driver-root`` (``driver_root``) at
  ``/run/nvidia/driver``, where the driver container publishes its root. ``DRIVER_ROOT_CTR_PATH`` names that path
  rather than the pod's ``/driver-root`` mount, which would need a directory in the host's ``/``; the other variables
  of the validator's driver-ready file, which the operator's entrypoint exports, are the validator's (``host_driver``:
  the driver container's ``/run/nvidia/driver`` or the host's ``/``) and only decide the host paths the plugin names
  (in the spec, and in Allocate's device specs).

The CDI spec (with CDI_ENV): ``<work-dir>/cdi/k8s.device-plugin.nvidia.com-gpu.json``. Logs:
``<work-dir>/device-plugin.log`` (NVIDIA's process, stdout and stderr, as the container log) and, for ``run``,
``<work-dir>/kubelet.log`` (the endpoint).
"""

import argparse
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed.node_process import NodeProcess, spawn, stop_group
from tests.testbed.nvidia_mig_manager import LIB_DIR, binary, driver_ready_env

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MPS_CONTROL_DIR = REPO_ROOT / "tests" / "testbed" / "fakehost" / "mps-bin"  # nvidia-cuda-mps-control's stand-in
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"  # pluginapi.DevicePluginPath
DRIVER_ROOT_MOUNT = "/run/nvidia/driver"  # the fake driver root in the namespace (the plugin's DRIVER_ROOT_CTR_PATH)
# Char-device majors: the GPU nodes' is the driver's fixed 195 (nvidia-container-toolkit internal/devices); nvidia-uvm
# and nvidia-caps get dynamic ones from the kernel (/proc/devices), any unused number does here.
NVIDIA_MAJOR, NVIDIA_UVM_MAJOR, NVIDIA_CAPS_MAJOR = 195, 510, 511

# The nvidia-device-plugin container's environment as GPU Operator v26.7.0 sets it with the chart's defaults:
# assets/state-device-plugin/0500_daemonset.yaml, then controllers/object_controls.go TransformDevicePlugin
# (applyMIGConfiguration with values.yaml mig.strategy "single"), without CDI: CDI_ENV below.
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
# What transformDevicePluginCtrForCDI adds with the chart's cdi.enabled (true in v26.7.0) and the toolkit's installDir
# (/usr/local/nvidia); the agents get it from the rendered pod, tests and the runner ask for it (env=, --env).
# NVIDIA_CDI_HOOK_PATH is only written into the CDI spec, never run.
CDI_ENV = {
    "CDI_ENABLED": "true",
    "DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri",
    "CDI_ANNOTATION_PREFIX": "cdi.k8s.io/",
    "NVIDIA_CDI_HOOK_PATH": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
}

NAMESPACE_SCRIPT = r"""
set -eu
work=$1; shift
mkdir -p "$work/upper/var-lib" "$work/overlay-work/var-lib"
mount -t overlay gpufleet-var-lib -o "lowerdir=/var/lib,upperdir=$work/upper/var-lib,workdir=$work/overlay-work/var-lib" /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$work/device-plugins" /var/lib/kubelet/device-plugins
mount --bind "$work/proc-driver" /proc/driver
[ "$(readlink -f /var/run)" = /run ] || { echo "gpufleet: /var/run is not a link to /run" >&2; exit 1; }
mkdir -p "$work/upper/run" "$work/overlay-work/run"
mount -t overlay gpufleet-run -o "lowerdir=/run,upperdir=$work/upper/run,workdir=$work/overlay-work/run" /run
mkdir -p /run/cdi /run/nvidia/driver
mount --bind "$work/cdi" /run/cdi
mount --bind "$work/driver-root" /run/nvidia/driver
exec "$@"
"""


class NvidiaDevicePlugin(NodeProcess):
    """One node's nvidia-device-plugin process. Its kubelet is whatever serves `<work-dir>/device-plugins/kubelet.sock`
    (tests/testbed/kubelet_deviceplugin.Kubelet on `plugin_dir`)."""

    def __init__(self, node, state_path, work_dir, nvml_lib_dir, env=None, log_path=None, host_driver=False):
        self.node = node
        self.state_path = Path(state_path).resolve()
        self.work = Path(work_dir).resolve()
        self.nvml_lib_dir = Path(nvml_lib_dir).resolve()
        self.env = dict(CHART_ENV, **(env or {}))
        self.log_path = Path(log_path) if log_path else self.work / "device-plugin.log"
        self.host_driver = host_driver
        self.proc = None

    @property
    def plugin_dir(self):
        """The node's device-plugin directory on the host (the plugin's /var/lib/kubelet/device-plugins)."""
        return self.work / "device-plugins"

    def environment(self):
        env = {"PATH": "%s:%s" % (MPS_CONTROL_DIR, SYSTEM_PATH), "HOME": "/root", "NODE_NAME": self.node,
               "LD_LIBRARY_PATH": str(self.nvml_lib_dir), "GPUFLEET_SIM_NVML_STATE": str(self.state_path)}
        env.update(self.env)
        # The operator's entrypoint (assets state-device-plugin/0400_configmap.yaml) exports the validator's driver-ready
        # file over the container's env; the driver root is the fake one (module docstring).
        env.update(driver_ready_env(self.host_driver))
        env.pop("WITH_SHUTDOWN_HOST_GPU_CLIENTS", None)  # mig-manager's entrypoint's, not this one's
        env["DRIVER_ROOT_CTR_PATH"] = DRIVER_ROOT_MOUNT
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
        (self.work / "cdi").mkdir(exist_ok=True)
        self.driver_root()

    def driver_root(self):
        """``<work-dir>/driver-root``, the driver's files nvcdi reads (its pkg/nvcdi driver-nvml.go, common-nvml.go,
        full-gpu-nvml.go, mig-device-nvml.go; internal/lookup/root/root.go). Without a library named for NVML's driver
        version the plugin cannot start (``failed to locate "libcuda.so.": libcuda.so.<version>: not found``); without
        the GPUs' device nodes every device's spec entry is empty and no spec is written ("Ignoring empty CDI specs").
        Made, from the simulated host's state:

        * ``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<driver version>``, a copy of the simulated library (a real file:
          nvcdi resolves links on the host, and a link out of the root is not found in it), and ``libnvidia-ml.so.1``
          linking to it, as the driver installs them; the plugin loads NVML from there too (main.go
          ``tryResolveLibrary``);
        * ``dev/``, which makes the root its own dev root (as the validator finds for the driver container), with char
          device nodes (mknod; we are root) nothing opens: ``nvidia<minor>`` per GPU (the simulated NVML's minor is
          the index); ``nvidiactl``, ``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-uvm-tools`` (the validator creates
          them on every node); ``nvidia-caps/nvidia-cap<minor>`` for config, monitor and every GPU-instance and
          compute-instance capability mig-minors lists for the host's GPUs (a MIG device's entry names its two, and
          lists only its GPU's node without them).

        nvcdi's other lookups (ld.so.cache, libcuda and the other libraries, graphics and firmware files, nvidia-smi and
        other binaries, sockets) are optional: each absence is a warning in the log and leaves it out of the spec."""
        from tests.testbed.fakehost.nvidia_caps import mig_minors
        from tests.testbed.gpusim import hoststate

        host = hoststate.load(self.state_path)
        root = self.work / "driver-root"
        lib = root / LIB_DIR
        lib.mkdir(parents=True, exist_ok=True)
        versioned = lib / ("libnvidia-ml.so." + host["host"]["driver"])
        for old in lib.glob("libnvidia-ml.so.*"):
            if old not in (versioned, lib / "libnvidia-ml.so.1"):
                old.unlink()
        source = (self.nvml_lib_dir / "libnvidia-ml.so.1").stat()
        copied = versioned.stat() if versioned.exists() else None
        if copied is None or (copied.st_size, copied.st_mtime_ns) != (source.st_size, source.st_mtime_ns):
            tmp = versioned.with_name(versioned.name + ".new")
            shutil.copy2(self.nvml_lib_dir / "libnvidia-ml.so.1", tmp)  # copy2 keeps the mtime compared above
            os.replace(tmp, versioned)  # a running plugin keeps the file it mapped
        link = lib / "libnvidia-ml.so.1"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(versioned.name)
        nodes = {"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-modeset": (NVIDIA_MAJOR, 254),
                 "nvidia-uvm": (NVIDIA_UVM_MAJOR, 0), "nvidia-uvm-tools": (NVIDIA_UVM_MAJOR, 1)}
        gpus = {"gpu%d/" % gpu["index"] for gpu in host["gpus"]}
        for gpu in host["gpus"]:
            nodes["nvidia%d" % gpu["index"]] = (NVIDIA_MAJOR, gpu["index"])
        for line in mig_minors().splitlines():
            name, minor = line.rsplit(" ", 1)
            if name in ("config", "monitor") or name[:name.find("/") + 1] in gpus:
                nodes["nvidia-caps/nvidia-cap" + minor] = (NVIDIA_CAPS_MAJOR, int(minor))
        (root / "dev" / "nvidia-caps").mkdir(parents=True, exist_ok=True)
        for name, (major, minor) in nodes.items():
            path = root / "dev" / name
            if not path.exists():
                os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
                os.chmod(path, 0o444 if name.startswith("nvidia-caps/") else 0o666)

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
