"""A stand-in container runtime for smoke pods on simulated GPU nodes.

kwok runs no containers, so on its own a smoke pod would never print anything. This process watches
pods labelled ``gpufleet.io/smoke-test=true`` that the scheduler bound to a simulated GPU node and
plays the container: it reads the node's simulated GPUs through the unmodified pynvml (the same
NVML state the agents serve), picks the device the device plugin would hand out for the requested
resource (first full GPU for ``nvidia.com/gpu``; under the single strategy the first MIG device; the
first MIG device of that profile for ``nvidia.com/mig-<profile>``), and finishes the pod with
``nvidia-smi -L``-style text for that one device as the container's termination message. A
resource the hardware has no device for ends like nvidia-smi without devices ("No devices were
found", exit 6). What is simulated: the device choice and the listing; nothing runs in a container
and MIG UUIDs are derived, not read. A real cluster's pod prints the same format to its log, which
the gpu_smoke_test module reads when the termination message is empty.

  python -m tests.testbed.sandbox.smoke_runtime run   --kubeconfig K --hosts-dir D [--nvml-lib-dir L]
  python -m tests.testbed.sandbox.smoke_runtime start --kubeconfig K --hosts-dir D [--pidfile P] [...]
  python -m tests.testbed.sandbox.smoke_runtime stop  [--pidfile P]
"""

import argparse
import datetime
import logging
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from tests.testbed import daemon

SMOKE_SELECTOR = "gpufleet.io/smoke-test=true"
STATE_ANNOTATION = "gpusim.gpufleet.io/state"  # the agents' per-node state file annotation
DEFAULT_PIDFILE = ".sandbox/smoke-runtime.pid"
LOG = logging.getLogger("smoke-runtime")


def nvidia_smi_listing(host, resource, strategy):
    """(exit code, text) of ``nvidia-smi -L`` inside a container granted one ``resource`` on ``host``."""
    if host is None:
        return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    if resource == "nvidia.com/gpu":
        if strategy == "single" and any(gpu.mig_current for gpu in host.gpus):
            # single: every MIG device is a nvidia.com/gpu (reference §6.3)
            for gpu in host.gpus:
                if gpu.mig_devices:
                    return 0, _mig_listing(gpu, gpu.mig_devices[0])
        else:
            for gpu in host.gpus:
                if strategy == "none" or not gpu.mig_current:  # none: MIG GPUs are exposed whole
                    return 0, "GPU 0: %s (UUID: %s)" % (gpu.name, gpu.uuid)
    elif resource.startswith("nvidia.com/mig-"):
        wanted = resource[len("nvidia.com/mig-"):]
        for gpu in host.gpus:
            for device in gpu.mig_devices if gpu.mig_current else []:
                if device.profile.replace("+", ".") == wanted:
                    return 0, _mig_listing(gpu, device)
    return 6, "No devices were found"


def _mig_listing(gpu, device):
    # A container sees its one MIG device as MIG device 0 of GPU 0; the UUID is derived (stable per GI/CI).
    mig_uuid = "MIG-%s" % uuid.uuid5(uuid.NAMESPACE_OID, "%s/%d/%d" % (gpu.uuid, device.gi_id, device.ci_id))
    return "GPU 0: %s (UUID: %s)\n  MIG %-12s Device  0: (UUID: %s)" % (gpu.name, gpu.uuid, device.profile, mig_uuid)


class SmokeRuntime(object):
    def __init__(self, kubeconfig, hosts_dir):
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.hosts_dir = Path(hosts_dir)
        self.done = set()
        self.stopping = threading.Event()

    def strategy(self):
        try:
            policy = self.custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        except Exception:  # pylint: disable=broad-except  # no policy yet: device plugin default
            return "none"
        return ((policy.get("spec") or {}).get("mig") or {}).get("strategy") or "none"

    def state_file(self, node_name):
        try:
            node = self.core.read_node(node_name)
        except Exception:  # pylint: disable=broad-except
            return None
        path = (node.metadata.annotations or {}).get(STATE_ANNOTATION)
        candidate = Path(path) if path else self.hosts_dir / ("%s.state" % node_name)
        return candidate if candidate.exists() else None

    def finish(self, pod):
        from tests.testbed.agents import hardware

        name, namespace = pod.metadata.name, pod.metadata.namespace
        container = pod.spec.containers[0]
        limits = (container.resources.limits or {}) if container.resources else {}
        resource = next((r for r in limits if r == "nvidia.com/gpu" or r.startswith("nvidia.com/mig-")), "nvidia.com/gpu")
        state = self.state_file(pod.spec.node_name)
        host = hardware.read_host(state) if state else None
        code, text = nvidia_smi_listing(host, resource, self.strategy())
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        phase = "Succeeded" if code == 0 else "Failed"
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": text + "\n",
                      "startedAt": now, "finishedAt": now}
        body = {"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}],
            "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "", "ready": False,
                                   "restartCount": 0, "started": False, "state": {"terminated": terminated}}],
        }}
        self.core.patch_namespaced_pod_status(name, namespace, body)
        LOG.info("%s/%s on %s: %s -> exit %d", namespace, name, pod.spec.node_name, resource, code)

    def handle(self, pod):
        key = pod.metadata.uid
        if key in self.done or not pod.spec.node_name or pod.metadata.deletion_timestamp:
            return
        if (pod.status.phase or "Pending") in ("Succeeded", "Failed"):
            self.done.add(key)
            return
        try:
            self.finish(pod)
            self.done.add(key)
        except Exception as exc:  # pylint: disable=broad-except  # retried on the next event
            LOG.warning("%s/%s: %s", pod.metadata.namespace, pod.metadata.name, exc)

    def run(self):
        from kubernetes import watch

        while not self.stopping.is_set():
            try:
                pods = self.core.list_pod_for_all_namespaces(label_selector=SMOKE_SELECTOR)
                for pod in pods.items:
                    self.handle(pod)
                stream = watch.Watch().stream(self.core.list_pod_for_all_namespaces, label_selector=SMOKE_SELECTOR,
                                              resource_version=pods.metadata.resource_version, timeout_seconds=30)
                for event in stream:
                    if self.stopping.is_set():
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle(event["object"])
            except Exception as exc:  # pylint: disable=broad-except  # API restarts: list and watch again
                LOG.warning("watch: %s", exc)
                time.sleep(1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.sandbox.smoke_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "start"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--kubeconfig", required=True)
        cmd.add_argument("--hosts-dir", required=True, help="directory of <node>.state files")
        cmd.add_argument("--nvml-lib-dir", help="directory of the simulated libnvidia-ml.so.1")
        cmd.add_argument("--pidfile", default=DEFAULT_PIDFILE)
    sub.add_parser("stop").add_argument("--pidfile", default=DEFAULT_PIDFILE)
    args = parser.parse_args(argv)
    if args.command == "run":
        daemon.reexec_with_library_dir(args.nvml_lib_dir, "tests.testbed.sandbox.smoke_runtime")
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        runtime = SmokeRuntime(args.kubeconfig, args.hosts_dir)

        def _stop(*_signal_args):
            runtime.stopping.set()
            sys.exit(0)

        signal.signal(signal.SIGTERM, _stop)
        runtime.run()
        return 0
    if args.command == "start":
        argv = [sys.executable, "-m", "tests.testbed.sandbox.smoke_runtime", "run", "--kubeconfig", args.kubeconfig,
                "--hosts-dir", args.hosts_dir, "--pidfile", args.pidfile]
        if args.nvml_lib_dir:
            argv += ["--nvml-lib-dir", args.nvml_lib_dir]
        return daemon.start("smoke runtime", argv, args.pidfile)
    return daemon.stop("smoke runtime", args.pidfile, grace_seconds=5)


if __name__ == "__main__":
    sys.exit(main())
