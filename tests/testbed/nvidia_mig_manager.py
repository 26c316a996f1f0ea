"""NVIDIA's nvidia-mig-manager (mig-parted v0.15.0) for one simulated GPU node, as its DaemonSet pod runs it.

  python -m tests.testbed.nvidia_mig_manager run --node N --state S --work-dir D --kubeconfig K
      [--namespace gpu-operator] [--env NAME=VALUE ...] [--pod-name P]

The binary is built offline from NVIDIA's release source by tests/testbed/build-nvidia.sh. It runs against the
testbed's API server and the simulated NVML (LD_LIBRARY_PATH, GPUFLEET_SIM_NVML_STATE); only the host's OS boundary
is faked (docs/testbed.md, "NVIDIA's MIG Manager"; docs/nvidia-mig-manager.md):

* a private mount namespace (``unshare --mount``; we are root) whose root is a tmpfs with the host's system
  directories bound in (as tests/testbed/operator.py does for NVIDIA's controller), plus
  - ``/usr`` and ``/etc`` as overlays whose upper layers are in the node's work dir: the image's
    ``/usr/bin/nvidia-mig-parted`` and ``/usr/bin/nvidia-mig-manager`` (mig-manager copies the former from that fixed
    path to the host), and mig-manager's ``/etc/nvidia-mig-manager/generated-config.yaml`` land there, not on the host;
  - ``/proc``: the host's entries as links into a procfs mounted at ``/.proc``, and a ``modules`` file naming
    ``nvidia`` (nvidia-mig-parted reads /proc/modules to decide that the driver is loaded; the development VM's kernel
    has no /proc/modules at all);
  - ``/sys/bus/pci/devices``: one directory per simulated GPU with the sysfs attributes go-nvlib's nvpci reads
    (vendor, class, device, subsystem ids, numa_node, resource), from the simulated host's state;
  - ``/host``: the node's "host root" (HOST_ROOT_MOUNT's default), holding the D-Bus system bus socket of
    tests/testbed/fakehost/systemd_dbus.py;
* on PATH first: tests/testbed/fakehost/bin (``nvidia-smi -r``, ``chroot``), then the image's /usr/bin.

Logs: ``<work-dir>/mig-manager.log`` (NVIDIA's process, stdout and stderr, as the container log) and
``<work-dir>/systemd.log``.
"""

import argparse
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed.node_process import NodeProcess, spawn, stop_group

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_NVIDIA = REPO_ROOT / "tests" / "testbed" / "build-nvidia.sh"
FAKEHOST_BIN = REPO_ROOT / "tests" / "testbed" / "fakehost" / "bin"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUS_SOCKET = "run/dbus/system_bus_socket"  # under the host root (mig-parted pkg/mig/reconfigure New)
PCI_CLASS_3D_CONTROLLER = "0x030200"
DRIVER_ROOT = "run/nvidia/driver"  # where the driver container publishes its root on the host (the validator's default)
LIB_DIR = "usr/lib/x86_64-linux-gnu"
NVIDIA_MODULE_LINE = "nvidia 16384 0 - Live 0x0000000000000000\n"

# Mount-namespace setup; argv: root work binaries-dir binds... -- command argv. A bind is a host path (mounted at the
# same path) or SOURCE=TARGET (a pod volume: a directory kubelet would mount at the container's mountPath).
NAMESPACE_SCRIPT = r"""
set -eu
root=$1; work=$2; bins=$3; shift 3
binds=""
while [ "$1" != "--" ]; do binds="$binds $1"; shift; done
shift
mount -t tmpfs -o mode=0755 gpufleet-mig-manager "$root"
for d in bin sbin lib lib32 lib64 libx32 dev sys tmp; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then mkdir -p "$root/$d"; mount --rbind "/$d" "$root/$d"; fi
done
for d in usr etc; do
  mkdir -p "$root/$d" "$work/upper/$d" "$work/overlay-work/$d"
  mount -t overlay "gpufleet-$d" -o "lowerdir=/$d,upperdir=$work/upper/$d,workdir=$work/overlay-work/$d" "$root/$d"
done
for p in nvidia-mig-parted nvidia-mig-manager; do
  : > "$root/usr/bin/$p"; mount --bind "$bins/$p" "$root/usr/bin/$p"
done
mkdir -p "$root/.proc" "$root/proc"
mount -t proc proc "$root/.proc"
for e in /proc/*; do
  n=${e#/proc/}
  case $n in [0-9]*|modules) continue ;; esac
  ln -s "/.proc/$n" "$root/proc/$n"
done
cp "$work/proc-modules" "$root/proc/modules"
mount --bind "$work/pci-devices" "$root/sys/bus/pci/devices"
mkdir -p "$root/host"
mount --bind "$work/host" "$root/host"
for b in $binds; do
  src=${b%%=*}; dst=${b#*=}
  mkdir -p "$root$dst"; mount --bind "$src" "$root$dst"
done
cd /
exec /usr/sbin/chroot "$root" "$@"
"""


def driver_ready_env(host_driver):
    """What NVIDIA's validator writes into /run/nvidia/validations/driver-ready, which the operator's mig-manager
    entrypoint exports (GPU Operator v26.7.0 cmd/nvidia-validator driver.go getDriverInfo, main.go): with the driver on
    the host, every root is the host's; with the driver container, its root /run/nvidia/driver (a dev root: it has
    /dev) at /driver-root. The entrypoint adds WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER."""
    if host_driver:
        env = {"IS_HOST_DRIVER": "true", "NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/host",
               "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "/host"}
    else:
        env = {"IS_HOST_DRIVER": "false", "NVIDIA_DRIVER_ROOT": "/" + DRIVER_ROOT, "DRIVER_ROOT_CTR_PATH": "/driver-root",
               "NVIDIA_DEV_ROOT": "/" + DRIVER_ROOT, "DEV_ROOT_CTR_PATH": "/driver-root"}
    env["WITH_SHUTDOWN_HOST_GPU_CLIENTS"] = env["IS_HOST_DRIVER"]
    return env


def binary(program):
    """Path of NVIDIA's `program` (nvidia-mig-manager, nvidia-mig-parted), built by build-nvidia.sh if missing."""
    proc = subprocess.run([str(BUILD_NVIDIA), "bin", program], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("build-nvidia.sh bin %s failed:\n%s%s" % (program, proc.stdout, proc.stderr[-4000:]))
    return Path(proc.stdout.strip().splitlines()[-1])


def write_pci_devices(state_path, directory):
    """The simulated host's GPUs as sysfs PCI device directories (what nvpci reads), in `directory`."""
    from tests.testbed.gpusim import hoststate

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for gpu in hoststate.load(state_path)["gpus"]:
        address = "0000:%02x:00.0" % int(gpu["bus"])
        wanted.add(address)
        device_id, subsystem_id = int(str(gpu["pci_device_id"]), 16), int(str(gpu["pci_subsystem_id"]), 16)
        dev = directory / address
        dev.mkdir(exist_ok=True)
        files = {"vendor": "0x%04x" % (device_id & 0xFFFF), "device": "0x%04x" % (device_id >> 16),
                 "subsystem_vendor": "0x%04x" % (subsystem_id & 0xFFFF),
                 "subsystem_device": "0x%04x" % (subsystem_id >> 16), "class": PCI_CLASS_3D_CONTROLLER,
                 "numa_node": "-1",
                 # BAR0 (16 MiB registers) and BAR1 as a real GPU lists them; unused BARs are zero lines.
                 "resource": "0x%016x 0x%016x 0x0000000000040200\n0x0000000000000000 0x0000000000000000 "
                             "0x0000000000000000" % (0xA0000000 + int(gpu["bus"]) * 0x1000000,
                                                     0xA0000000 + int(gpu["bus"]) * 0x1000000 + 0xFFFFFF)}
        for name, value in files.items():
            (dev / name).write_text(value + "\n")
    for stale in directory.iterdir():
        if stale.name not in wanted:
            for f in stale.iterdir():
                f.unlink()
            stale.rmdir()


class NvidiaMigManager(NodeProcess):
    """One node's nvidia-mig-manager process and its fake systemd, started and stopped together."""

    def __init__(self, node, state_path, work_dir, kubeconfig, nvml_lib_dir, namespace="gpu-operator", env=None,
                 pod_name=None, extra_binds=(), volumes=(), log_path=None, host_driver=False, reboot_request=None,
                 kubelet_requests=None):
        self.node = node
        self.state_path = Path(state_path).resolve()
        self.work = Path(work_dir).resolve()
        self.kubeconfig = Path(kubeconfig).resolve()
        self.nvml_lib_dir = Path(nvml_lib_dir).resolve()
        self.namespace = namespace
        self.env = dict(env or {})
        self.pod_name = pod_name
        self.extra_binds = [str(Path(b).resolve()) for b in extra_binds]
        self.volumes = [(str(Path(src).resolve()), dst) for src, dst in volumes]  # (host dir, container mountPath)
        self.proc = None
        self.systemd = None
        self.log_path = Path(log_path) if log_path else self.work / "mig-manager.log"
        self.cri_log_path = self.log_path.with_name(self.log_path.name + ".cri")  # what `kubectl logs` serves
        self.host_driver = host_driver
        # `chroot /host reboot` (WITH_REBOOT) creates this file for whoever plays the host's reboot (the agents:
        # nvidia_mig.py); None: the reboot is not simulated (fakehost/bin/chroot exits 1).
        self.reboot_request = Path(reboot_request).resolve() if reboot_request else None
        # kubelet.service stopped or started through the fake systemd leaves a request in this directory for whoever
        # plays kubelet's node status (tests/testbed/fakehost/unit_change.py); None: the unit table only.
        self.kubelet_requests = Path(kubelet_requests).resolve() if kubelet_requests else None

    # -- files -----------------------------------------------------------------------------
    def prepare(self):
        from tests.testbed.operator import flatten_kubeconfig

        (self.work / "host" / "run" / "dbus").mkdir(parents=True, exist_ok=True)
        (self.work / "root").mkdir(parents=True, exist_ok=True)
        (self.work / "proc-modules").write_text(NVIDIA_MODULE_LINE)
        self.driver_files()
        write_pci_devices(self.state_path, self.work / "pci-devices")
        flatten_kubeconfig(self.kubeconfig, self.work / "kubeconfig")

    def driver_files(self):
        """The driver's files on the simulated host, where NVIDIA's programs look for them: nvidia-smi (the stand-in)
        and libnvidia-ml.so.1 (the simulated one), under the host root or the driver container's root, and its /dev."""
        root = self.work / "host" / ("" if self.host_driver else DRIVER_ROOT)
        for rel, target in (("usr/bin/nvidia-smi", FAKEHOST_BIN / "nvidia-smi"),
                            (LIB_DIR + "/libnvidia-ml.so.1", self.nvml_lib_dir / "libnvidia-ml.so.1")):
            link = root / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
        (root / "dev").mkdir(parents=True, exist_ok=True)

    @property
    def faults_file(self):
        """The OS-boundary faults the fake host programs honour (tests/testbed/fakehost/bin/nvidia-ctk), one a line."""
        return self.work / "fakehost-faults"

    def environment(self):
        env = {"PATH": "%s:%s" % (FAKEHOST_BIN, SYSTEM_PATH), "HOME": "/root", "KUBECONFIG": str(self.work / "kubeconfig"),
               "NODE_NAME": self.node, "POD_NAMESPACE": self.namespace, "DEFAULT_GPU_CLIENTS_NAMESPACE": self.namespace,
               "LD_LIBRARY_PATH": str(self.nvml_lib_dir), "GPUFLEET_SIM_NVML_STATE": str(self.state_path),
               "GPUFLEET_FAKEHOST_FAULTS": str(self.faults_file)}
        if self.pod_name:
            env["POD_NAME"] = self.pod_name
        if self.reboot_request:
            env["GPUFLEET_FAKEHOST_REBOOT"] = shlex.join(["touch", str(self.reboot_request)])
        env.update(self.env)
        return env

    def command(self):
        bins = binary("nvidia-mig-manager").parent
        binds = sorted({str(self.work), str(self.state_path.parent), str(self.nvml_lib_dir), str(bins),
                        str(REPO_ROOT), *self.extra_binds})
        binds += ["%s=%s" % (src, dst) for src, dst in self.volumes]
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", NAMESPACE_SCRIPT,
                "gpufleet-mig-manager-ns", str(self.work / "root"), str(self.work), str(bins), *binds, "--",
                "/usr/bin/nvidia-mig-manager"]

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        self.work.mkdir(parents=True, exist_ok=True)
        self.prepare()
        socket_path = self.work / "host" / BUS_SOCKET
        systemd = [sys.executable, "-m", "tests.testbed.fakehost.systemd_dbus", "--socket", str(socket_path),
                   "--units", str(self.work / "systemd-units.json")]
        if self.kubelet_requests:
            # by its file: the fake systemd runs it from the bus socket's directory (AF_UNIX path length)
            systemd += ["--on-change", shlex.join([sys.executable, str(FAKEHOST_BIN.parent / "unit_change.py"),
                                                   str(self.kubelet_requests)])]
        self.systemd = spawn(systemd, self.work / "systemd.log", cwd=str(REPO_ROOT))
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            if self.systemd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("fake systemd did not start: %s" % (self.work / "systemd.log").read_text()[-2000:])
            time.sleep(0.05)
        self.proc = spawn(self.command(), self.log_path, env=self.environment(), cri_path=self.cri_log_path)
        return self

    def stop(self):
        for proc in (self.proc, self.systemd):
            stop_group(proc, 10)
        self.proc = self.systemd = None

    def units(self):
        try:
            return json.loads((self.work / "systemd-units.json").read_text())
        except (OSError, ValueError):
            return {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run in the foreground until interrupted")
    run.add_argument("--node", required=True)
    run.add_argument("--state", required=True, help="the simulated host's state file")
    run.add_argument("--work-dir", required=True)
    run.add_argument("--kubeconfig", required=True)
    run.add_argument("--namespace", default="gpu-operator")
    run.add_argument("--pod-name", default=None)
    run.add_argument("--nvml-lib-dir", default=None)
    run.add_argument("--env", action="append", default=[], help="NAME=VALUE for the process (CONFIG_FILE, WITH_REBOOT...)")
    args = parser.parse_args(argv)
    lib = args.nvml_lib_dir
    if lib is None:
        from tests.testbed.gpusim.simhost import library_dir

        lib = library_dir(build=True)
    env = dict(item.split("=", 1) for item in args.env)
    manager = NvidiaMigManager(args.node, args.state, args.work_dir, args.kubeconfig, lib, args.namespace, env,
                               args.pod_name).start()
    print("nvidia-mig-manager for %s: pid %d, log %s" % (args.node, manager.proc.pid, manager.log_path), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop both processes on SIGTERM too (finally below)
    try:
        while manager.running():
            time.sleep(1)
        print("nvidia-mig-manager exited with %s" % manager.proc.returncode, flush=True)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        manager.stop()


if __name__ == "__main__":
    main()
