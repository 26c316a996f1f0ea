"""What kubelet does for a DaemonSet pod whose container is one of NVIDIA's programs run here as a process per node
(nvidia_mig.py: MIG Manager; nvidia_plugin.py: the device plugin): while the node's pod is Running one process runs
for it; a new pod (another uid) restarts it; a pod that is gone stops it; a process that exits is started again after
a back-off (CrashLoopBackOff). Which nodes get NVIDIA's process is chosen per agents process, or per node by an
annotation (``mode_annotation``: nvidia|sim), which wins."""

import threading
import time

from tests.testbed.agents.kube import LOG

MODES = ("sim", "nvidia")
BACKOFF_SECONDS = (2, 5, 10, 20, 40)


def pod_env(pod, container, node):
    """The container's env as kubelet gives it: values, and the fieldRefs NVIDIA's DaemonSets use."""
    meta = pod["metadata"]
    fields = {"spec.nodeName": node, "metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
              "metadata.uid": meta["uid"], "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "")}
    env = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"] or ""
        else:
            ref = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if ref in fields:
                env[var["name"]] = fields[ref]
    return env


def container_of(pod, name):
    return next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), None)


class NodeEntry:
    def __init__(self):
        self.pod_uid = None
        self.process = None  # a tests.testbed.node_process.NodeProcess, or None
        self.failures = 0
        self.next_start = 0.0
        self.waiting = None  # why the container cannot start (a missing ConfigMap), logged once
        self.logs_served = None  # the pod uid whose `kubectl logs` serve the process's output
        self.lock = threading.Lock()


class PodProcesses:
    """Every node's process for one DaemonSet's pod. Subclasses name the program (``program``), the pod's container it
    plays, the annotation that picks the mode per node and the agents' attribute with the default mode, and
    ``start(entry, name, node, pod, container, state_path)``, which sets ``entry.process`` (a started NodeProcess) or ``entry.next_start`` (try again later)."""

    program = None
    container = None  # the name of the pod's container the process plays
    mode_annotation = None
    default_mode_attribute = None

    def __init__(self, agents):
        self.agents = agents
        self.nodes = {}
        self.lock = threading.Lock()

    def node_mode(self, node):
        value = ((node.get("metadata", {}).get("annotations") or {}).get(self.mode_annotation) or "").strip()
        return value if value in MODES else getattr(self.agents, self.default_mode_attribute)

    def entry(self, name):
        with self.lock:
            return self.nodes.setdefault(name, NodeEntry())

    def to_retry(self):
        """Nodes whose process should be (re)started without a new event: crashed, or waiting on a ConfigMap."""
        now = time.monotonic()
        return {name for name, entry in list(self.nodes.items())
                if entry.pod_uid and (entry.process is None or not entry.process.running()) and entry.next_start <= now}

    def sync(self, name, node, pod, state_path):
        entry = self.entry(name)
        with entry.lock:
            if name in self.agents.nodes_down:  # the host is rebooting: no container runs until kubelet is back
                self._stop(entry)
                return
            if pod is None:
                if entry.process is not None:
                    LOG.info("[%s] %s: pod gone, stopping the process", name, self.program)
                self._stop(entry)
                entry.pod_uid = None
                return
            uid = pod["metadata"]["uid"]
            if entry.pod_uid != uid:
                if entry.process is not None:
                    LOG.info("[%s] %s: new pod %s, restarting the process", name, self.program, pod["metadata"]["name"])
                self._stop(entry)
                entry.pod_uid, entry.failures, entry.next_start, entry.waiting = uid, 0, 0.0, None
            if entry.process is not None and entry.process.running():
                return
            if entry.process is not None:  # it exited: a container restart after a back-off
                rc = entry.process.proc.returncode if entry.process.proc else None
                self._stop(entry)
                entry.failures += 1
                delay = BACKOFF_SECONDS[min(entry.failures, len(BACKOFF_SECONDS)) - 1]
                entry.next_start = time.monotonic() + delay
                LOG.warning("[%s] %s exited (rc %s); restarting in %ss", name, self.program, rc, delay)
                return
            if time.monotonic() < entry.next_start:
                return
            container = container_of(pod, self.container)
            if container is None:
                LOG.warning("[%s] pod %s has no container %s", name, pod["metadata"]["name"], self.container)
                entry.next_start = time.monotonic() + 30
                return
            self.start(entry, name, node, pod, container, state_path)

    def start(self, entry, name, node, pod, container, state_path):
        raise NotImplementedError

    @staticmethod
    def _stop(entry):
        if entry.process is not None:
            entry.process.stop()
            entry.process = None

    def stop_all(self):
        for entry in list(self.nodes.values()):
            with entry.lock:
                self._stop(entry)
