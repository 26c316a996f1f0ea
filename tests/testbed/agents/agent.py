"""The agents process: for every simulated GPU node, what the GPU Operator's operand pods do on a real node.

NVIDIA's real controller (tests/testbed/operator.py) labels the nodes (gpu.present, the gpu.deploy.*
defaults, the default nvidia.com/mig.config), creates the operand DaemonSets and writes the
ClusterPolicy status; kwok "runs" the operand pods. What cannot run here is played by this process,
each part only while its real DaemonSet has a Running pod on the node: GPU Feature Discovery's labels,
the device plugin's capacity/allocatable, MIG Manager's hardware actions and label sequence, and
dcgm-exporter's metrics (see docs/DEVELOPING.md, "Simulated GPU Operator node agents").
"""

import concurrent.futures
import dataclasses
import datetime
import json
import logging
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import yaml

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.testbed import oracle
from tests.testbed.oracle import config_manager
from tests.testbed.agents import hardware, metrics, operands
from tests.testbed.agents.kube import (LOG, Cache,
                                       api_client, ignore_missing)
from tests.testbed.agents.migmanager import (CONFIG_LABEL, HOST_DRIVER_ANNOTATION, KUBELET_STOPPED_ANNOTATION,
                                             REBOOTING_ANNOTATION, STATE_LABEL, MigManager)
from tests.testbed.agents.nvidia_mig import NvidiaMigManagers
from tests.testbed.agents.nvidia_plugin import NvidiaDevicePlugins
from tests.testbed.agents.pod_processes import MODES
from tests.testbed.gpusim import hoststate

STATE_ANNOTATION = "gpusim.gpufleet.io/state"
FAULT_ANNOTATION = "gpusim.gpufleet.io/fault"
METRICS_ANNOTATION = "gpusim.gpufleet.io/metrics-url"
PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
LAG_STATS_FILE = "agents-lag.json"
RECONCILE_THREADS = 8
# slow-start: MIG Manager acts on a label change only after Timing.slow_seconds; stale-plugin: the device plugin
# keeps advertising what it did (allocatable does not follow the hardware); kubelet-not-ready: after a host-client
# shutdown kubelet comes back but the node stays NotReady until the fault is cleared (NVIDIA's MIG Manager: its
# kubelet.service start through the fake systemd leaves the node NotReady).
# Made real in the node's simulated hardware, for either MIG Manager (sync_hardware_faults): reset-unsupported (no GPU
# reset), fail and fail-once (the driver refuses new GPU instances: always, or until MIG Manager has reported failed
# once), gpu-held (a compute process outside Kubernetes holds GPU 0), and for NVIDIA's MIG Manager (mode nvidia)
# wedge-pending and wedge-once (a MIG change in the driver never returns: every time, or once) and slow (a process's
# first MIG change in the driver takes Timing.slow_seconds longer); the simulator keeps its own wedge (a hang in this
# process could not be ended by restarting the pod) and slow.
# cdi-generate-fails: at the OS boundary, for NVIDIA's MIG Manager (mode nvidia): the host's nvidia-ctk cannot generate
# the CDI spec (tests/testbed/fakehost/bin/nvidia-ctk), so MIG Manager's CDI step fails after the MIG change.
HOST_FAULTS = ("cdi-generate-fails",)
# gpu-held: the process the simulated host lists on GPU 0 (a CUDA program started on the host, outside Kubernetes).
HELD_PID = 4321
HELD_PROCESS = "cuda-app"
HELD_MB = 2048
FAULTS = ("fail", "fail-once", "wedge-pending", "wedge-once", "slow", "reset-unsupported", "gpu-held", "slow-start",
          "stale-plugin", "kubelet-not-ready") + HOST_FAULTS


@dataclasses.dataclass
class Timing:
    apply_seconds: float = 0.0      # extra time each MIG apply takes
    slow_seconds: float = 10.0      # added by the `slow` fault
    reboot_seconds: float = 3.0     # node NotReady during a simulated reboot
    pod_wait_seconds: float = 300.0  # MIG Manager's wait for operand pods to go (upstream: 5 min)
    rescan_seconds: float = 2.0     # how often GFD/the device plugin look at the hardware again
    host_clients_seconds: float = 30.0  # MIG Manager's sleep after stopping host clients and kubelet (upstream 30 s)


class LagStats:
    """How far behind the cluster the agents run: seconds from a node's first change (watch event) to the end of
    its reconcile. Cumulative counters in a JSON file (rewritten at most once a second) so that a benchmark can
    take differences between two reads; `buckets` counts lags up to each bound (seconds)."""

    BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

    def __init__(self, path):
        self.path = Path(path)
        self.data = {"count": 0, "sum_s": 0.0, "max_s": 0.0, "buckets": dict((str(b), 0) for b in self.BOUNDS)}
        self.written = 0.0
        self.lock = threading.Lock()

    def record(self, lag):
        with self.lock:
            self._record(lag)

    def _record(self, lag):
        data = self.data
        data["count"] += 1
        data["sum_s"] += lag
        data["max_s"] = max(data["max_s"], lag)
        for bound in self.BOUNDS:
            if lag <= bound:
                data["buckets"][str(bound)] += 1

    def write_if_due(self):
        now = time.monotonic()
        if now - self.written < 1.0:
            return
        self.written = now
        tmp = self.path.with_suffix(".tmp")
        try:
            with self.lock:
                text = json.dumps(dict(self.data, written_unix=time.time()))
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError as err:
            LOG.warning("lag stats %s: %s", self.path, err)


class Agents:
    def __init__(self, kubeconfig, hosts_dir, namespace="gpu-operator", timing=None, gfd_binary=None, nvml_lib_dir=None,
                 mig_manager="sim", device_plugin="sim"):
        for what, mode in (("mig_manager", mig_manager), ("device_plugin", device_plugin)):
            if mode not in MODES:
                raise ValueError("%s must be one of %s, not %r" % (what, ", ".join(MODES), mode))
        self.api = api_client(kubeconfig)
        self.kubeconfig = Path(kubeconfig).resolve()
        self.config_choices = {}  # (config keys, label, default) -> NVIDIA's config-manager's (key, error)
        self.last_choice = {}  # node -> its last (key, error)
        self.config_lock = threading.Lock()
        self.cache = Cache(self.api)
        self.hosts_dir = Path(hosts_dir)
        self.namespace = namespace
        self.timing = timing or Timing()
        self.managers = {}
        self.advertised = {}   # node -> resources last advertised by us
        self.mtimes = {}
        self.thread = None
        self.exporters = {}    # node -> metrics.Exporter
        self.metrics_server = None  # every node's dcgm-exporter endpoint (started by start())
        self.logs_crd = None  # whether kwok serves Logs objects (unknown until tried)
        self.gfd_binary = gfd_binary  # NVIDIA's GFD: its labels win over the re-implementation
        self.nvml_lib_dir = nvml_lib_dir
        self.gfd_runs = {}  # node -> (inputs, labels) of its last GFD run
        self.host_reads = {}  # node -> (state file version, hardware.Host): NVML is read again only after a change
        self.lag = LagStats(self.hosts_dir / LAG_STATS_FILE)
        self.pool = concurrent.futures.ThreadPoolExecutor(RECONCILE_THREADS, thread_name_prefix="reconcile")
        # MIG Manager: the simulator (default) or NVIDIA's process per node (nvidia_mig.py; a node annotation wins)
        self.mig_manager_mode = mig_manager
        self.nvidia = NvidiaMigManagers(self, kubeconfig)
        # The device plugin: the agents' own allocatable (default) or NVIDIA's process per node (nvidia_plugin.py)
        self.device_plugin_mode = device_plugin
        self.plugins = NvidiaDevicePlugins(self)
        self.hardware_faults = {}  # node -> {simulated-NVML fault: times} set by sync_hardware_faults
        self.fail_once_spent = set()  # nodes whose fail-once has failed MIG Manager's apply
        self.held_nodes = set()  # nodes with the gpu-held process
        self.nodes_down = set()  # nodes rebooting: kubelet is down, no pod's process runs (nvidia_mig.py)

    # -- node classification ---------------------------------------------------------------
    def state_file(self, node):
        meta = node.get("metadata", {})
        path = (meta.get("annotations") or {}).get(STATE_ANNOTATION)
        if path:
            return Path(path)
        candidate = self.hosts_dir / ("%s.state" % meta.get("name"))
        return candidate if candidate.exists() else None

    @staticmethod
    def faults(node):
        value = ((node.get("metadata", {}).get("annotations") or {}).get(FAULT_ANNOTATION) or "")
        return {f.strip() for f in value.split(",") if f.strip()}

    @staticmethod
    def is_gpu_resource(name):
        return operands.is_gpu_resource(name)

    def log_path(self, node, component):
        return self.hosts_dir / ("%s.%s.log" % (node, component))

    def with_reboot(self):
        env = (self.cache.policy_spec().get("migManager") or {}).get("env") or []
        return any(e.get("name") == "WITH_REBOOT" and str(e.get("value", "")).lower() == "true" for e in env)

    def strategy(self):
        return (self.cache.policy_spec().get("mig") or {}).get("strategy") or "none"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_server = metrics.MetricsServer()
        self.cache.start()
        self.thread = threading.Thread(target=self._reconcile_loop, daemon=True, name="reconcile")
        self.thread.start()

    def stop(self):
        self.cache.stop()
        self.nvidia.stop_all()
        self.plugins.stop_all()

    def wait(self):
        while self.thread.is_alive():
            self.thread.join(1.0)

    def _reconcile_loop(self):
        cache = self.cache
        while not cache.stopping.is_set():
            with cache.cond:
                cache.cond.wait_for(lambda: cache.dirty or cache.stopping.is_set(), self.timing.rescan_seconds)
                names, since = cache.dirty.take()
                cache.policy_changed = False
                ready = all(cache.synced.values())
            if not ready:
                with cache.cond:
                    cache.dirty |= names
                    for name, first in since.items():
                        cache.dirty.since[name] = min(first, cache.dirty.since.get(name, first))
                continue
            names |= self._hardware_changed() | self._mounts_to_retry()
            # Nodes in parallel (each node by one thread per pass): a reconcile mostly waits on the API server, and
            # one at a time the agents fell minutes behind 200 nodes on a loaded machine.
            list(self.pool.map(lambda name: self._reconcile_one(name, since.get(name)), sorted(names)))
            self.lag.write_if_due()

    def _reconcile_one(self, name, first_marked):
        try:
            self.reconcile_node(name)
        except Exception as err:  # pylint: disable=broad-except  # one bad node must not stop the rest
            LOG.warning("[%s] reconcile failed: %s", name, err)
        if first_marked is not None:
            self.lag.record(time.monotonic() - first_marked)

    def _mounts_to_retry(self):
        """Nodes whose mig-manager pod waits on a missing ConfigMap: kubelet's volume manager retries the mount on
        its own (with backoff), not only when the node or pod changes, so the pod starts once the ConfigMap exists."""
        return ({name for name, manager in list(self.managers.items()) if manager.not_started is not None}
                | self.nvidia.to_retry() | self.plugins.to_retry() | self.nvidia.reboots_requested()
                | self.nvidia.kubelet_requests())

    def _hardware_changed(self):
        """Nodes whose state file changed since the last look (GFD re-labels on an interval too)."""
        changed = set()
        for name, node in list(self.cache.nodes.items()):
            path = self.state_file(node)
            if path is None:
                continue
            try:
                mtime = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if self.mtimes.get(name) != mtime:
                self.mtimes[name] = mtime
                changed.add(name)
        return changed

    # -- per node --------------------------------------------------------------------------
    def reconcile_node(self, name):
        node = self.cache.nodes.get(name)
        if node is None:
            self.advertised.pop(name, None)
            self.host_reads.pop(name, None)
            self.hardware_faults.pop(name, None)
            self.fail_once_spent.discard(name)
            self.held_nodes.discard(name)
            self.nvidia.configs_seen.pop(name, None)
            if name in self.exporters:
                self.exporters.pop(name).stop()
            if name in self.nvidia.nodes:
                self.nvidia.sync(name, None, None, None)  # the node (and its pods) is gone
            if name in self.plugins.nodes:
                self.plugins.forget(name)
            return
        path = self.state_file(node)
        if path is None or not path.exists():
            return
        self.sync_hardware_faults(name, node, path)
        if self.nvidia.node_mode(node) == "nvidia":
            self.nvidia.observe_config(name, node, self.faults(node))
        if self.plugins.node_mode(node) == "nvidia":
            # kubelet posts the node's status: not while fault stale-plugin holds it back, nor while kubelet.service is
            # stopped (MIG Manager's host-client shutdown, fault kubelet-not-ready); what was kept is posted on its start
            self.plugins.set_stale(name, "stale-plugin" in self.faults(node) or self.kubelet_stopped(node))
        self.sync_kubelet(name, node)
        host = self.read_host(name, path)
        labels = dict(node["metadata"].get("labels") or {})
        patch = {}
        config = self.plugin_config(name, labels)
        shared = operands.time_slicing(config)
        if self.cache.running_pod(name, self.namespace, "gpu-feature-discovery"):
            wanted = self.nvidia_gfd_labels(name, path, config) if self.gfd_binary else None
            if wanted is not None or not self.gfd_binary:
                patch.update(self.gfd_patch(labels, host, shared, wanted))
        if patch:
            self.cache.core.patch_node(name, {"metadata": {"labels": patch}})
            for key, value in patch.items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
        if self.plugins.node_mode(node) == "nvidia":
            pod = self.cache.running_pod(name, self.namespace, "nvidia-device-plugin-daemonset")
            self.plugins.sync_config(name, node, pod, path, config)
        else:
            self.device_plugin(name, node, host, shared)
        self.dcgm_exporter(name, node, path)
        self.mig_manager(name, node, labels, path)

    def read_host(self, name, path):
        """The node's simulated hardware, read through NVML again only when its state file is a new version (both
        writers, the simulated NVML and hoststate, rename a new file into place). One NVML session at a time
        serves every node, so re-reading unchanged hardware on each of a node's events held the others up."""
        stat = os.stat(path)
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        last = self.host_reads.get(name)
        if last and last[0] == version:
            return last[1]
        host = hardware.read_host(path)
        self.host_reads[name] = (version, host)
        return host

    def plugin_config(self, node, labels):
        """The device-plugin config this node uses: ClusterPolicy spec.devicePlugin.config.name ConfigMap, the key
        NVIDIA's config-manager picks for the node (its label, else config.default, else none)."""
        spec = (self.cache.policy_spec().get("devicePlugin") or {}).get("config") or {}
        if not spec.get("name"):
            return None
        cm = ignore_missing(self.cache.core.read_namespaced_config_map, spec["name"], self.namespace)
        data = (cm.data if cm else None) or {}
        key, error = self.config_choice(node, sorted(data), labels.get(PLUGIN_CONFIG_LABEL), spec.get("default"))
        if error:
            LOG.warning("[%s] device-plugin config manager: %s", node, error)
        if key is None:
            return None
        try:
            return yaml.safe_load(data[key])
        except yaml.YAMLError as err:
            LOG.warning("[%s] device-plugin config %s/%s: %s", node, spec["name"], key, err)
            return None

    def config_choice(self, node, keys, label, default):
        """(key or None, error or None) of NVIDIA's config-manager (tests/testbed/oracle/config_manager.py) run for
        ``node``, which carries ``label``. Its choice depends only on the keys, the label and the default, so one run
        serves every node with the same three; a run that could not finish (the node changed meanwhile) is tried
        again on the node's next event, and the node keeps its config until then."""
        inputs = (tuple(keys), label or None, default or "")
        with self.config_lock:
            known = self.config_choices.get(inputs)
        if known is not None:
            return known
        try:
            choice = config_manager.choose(self.kubeconfig, node, dict((k, "") for k in keys), label or None,
                                           default=default or "", timeout=10)
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:
            LOG.warning("[%s] device-plugin config manager: %s", node, err)
            return self.last_choice.get(node, (None, None))
        LOG.info("[%s] config-manager: keys %s, label %r, default %r -> %s", node, ",".join(keys), label, default, choice)
        with self.config_lock:
            self.config_choices[inputs] = choice
            self.last_choice[node] = choice
        return choice

    def nvidia_gfd_labels(self, name, path, config):
        """NVIDIA's GFD (--oneshot) on this node's simulated host, under the operator's MIG strategy and the node's
        device-plugin config; re-run only when the hardware, strategy or config changed. None when GFD failed
        (as a crashing GFD pod, it leaves the labels as they are; the error goes to <node>.gfd.log)."""
        text = yaml.safe_dump(config) if config else None
        inputs = (os.stat(path).st_mtime_ns, self.strategy(), text)
        last = self.gfd_runs.get(name)
        if last and last[0] == inputs:
            return dict(last[1])
        try:
            labels = oracle.run_gfd(path, self.nvml_lib_dir, inputs[1], text, gfd_binary=self.gfd_binary)
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:
            with open(self.log_path(name, "gfd"), "a", encoding="utf-8") as fh:
                fh.write("%s %s\n" % (datetime.datetime.now().isoformat(), err))
            return None
        # GFD reads gpu.mode from the PCI class in sysfs, which the simulated host lacks: a real host says compute.
        labels["nvidia.com/gpu.mode"] = "compute"
        self.gfd_runs[name] = (inputs, labels)
        return dict(labels)

    def gfd_patch(self, labels, host, shared, wanted=None):
        if wanted is None:
            if operands.gfd_error(host, shared):
                return {}  # GFD exits before labelling (a crashing pod): the labels stay as they are
            wanted = operands.apply_time_slicing_labels(operands.gfd_labels(host, self.strategy()), shared)
        patch = {k: v for k, v in wanted.items() if labels.get(k) != v}
        patch.update({k: None for k in labels if operands.is_gfd_label(k) and k not in wanted
                      and k != "nvidia.com/gfd.timestamp"})
        if patch or "nvidia.com/gfd.timestamp" not in labels:
            patch["nvidia.com/gfd.timestamp"] = str(int(datetime.datetime.now().timestamp()))
        return patch

    def device_plugin(self, name, node, host, shared):
        """Node capacity/allocatable of GPU resources, as kubelet shows what the plugin advertises (§6.3)."""
        if "stale-plugin" in self.faults(node) or self.kubelet_stopped(node):
            return  # the plugin does not re-advertise / no kubelet posts the node's status
        status = node.get("status") or {}
        current = {k: v for k, v in (status.get("allocatable") or {}).items() if operands.is_gpu_resource(k)}
        current_cap = {k: v for k, v in (status.get("capacity") or {}).items() if operands.is_gpu_resource(k)}
        if self.cache.running_pod(name, self.namespace, "nvidia-device-plugin-daemonset"):
            resources, error = operands.device_plugin_resources(host, self.strategy())
            resources = operands.apply_time_slicing(resources, shared)
            sharing_error = operands.sharing_error(host, self.strategy(), shared)
            if sharing_error:
                resources, error = {}, sharing_error
            if error and self.advertised.get(name) != ("error", error):
                with open(self.log_path(name, "device-plugin"), "a", encoding="utf-8") as fh:
                    fh.write("%s error starting plugins: %s\n" % (datetime.datetime.now().isoformat(), error))
                self.advertised[name] = ("error", error)
        else:
            resources = {}
        wanted = {k: "0" for k in set(current) | set(current_cap)}
        wanted.update({k: str(v) for k, v in resources.items()})
        if wanted != current or wanted != current_cap:
            self.cache.core.patch_node_status(name, {"status": {"capacity": wanted, "allocatable": wanted}})

    def dcgm_exporter(self, name, node, path):
        """A metrics endpoint while the node's nvidia-dcgm-exporter pod runs; its URL in METRICS_ANNOTATION."""
        running = self.cache.running_pod(name, self.namespace, "nvidia-dcgm-exporter") is not None
        exporter = self.exporters.get(name)
        if running and exporter is None:
            values = self.hosts_dir / ("%s.metrics.json" % name)
            exporter = self.exporters[name] = self.metrics_server.start(name, path, values)
        elif not running and exporter is not None:
            self.exporters.pop(name).stop()  # a new exporter pod gets a new endpoint
            exporter = None
        url = exporter.url if exporter else None
        if (node["metadata"].get("annotations") or {}).get(METRICS_ANNOTATION) != url:
            self.cache.core.patch_node(name, {"metadata": {"annotations": {METRICS_ANNOTATION: url}}})

    def mig_manager(self, name, node, labels, state_path):
        pod = self.cache.running_pod(name, self.namespace, "nvidia-mig-manager")
        if self.nvidia.node_mode(node) == "nvidia":
            self.nvidia.set_host_faults(name, self.faults(node) & set(HOST_FAULTS))
            if self.nvidia.reboot_request(name).exists():
                self.nvidia.reboot(name, state_path)
            change = self.nvidia.take_kubelet_request(name)
            while change is not None:
                if change == "inactive":
                    self.stop_kubelet(name, "kubelet.service stopped on the host by nvidia-mig-manager")
                elif "kubelet-not-ready" not in self.faults(node):
                    self.start_kubelet(name)
                change = self.nvidia.take_kubelet_request(name)
            self.nvidia.sync(name, node, pod, state_path)
            if pod is not None and self.nvidia.entry(name).logs_served != pod["metadata"]["uid"]:
                # kubectl logs: the process's output in CRI format (NvidiaMigManager.cri_log_path)
                self.serve_logs(pod, self.log_path(name, "mig-manager").with_suffix(".log.cri"))
                self.nvidia.entry(name).logs_served = pod["metadata"]["uid"]
            return
        if pod is None:
            return
        manager = self.managers.get(name)
        if manager is None:
            manager = self.managers[name] = MigManager(self, name)
        if manager.pod_uid != pod["metadata"]["uid"]:
            self.serve_logs(pod, self.log_path(name, "mig-manager.cri"))
        manager.observe(pod["metadata"]["uid"], labels.get(CONFIG_LABEL, ""))

    def serve_logs(self, pod, path):
        """Make `kubectl logs <pod>` return `path` through a kwok Logs object, where kwok serves that CRD.

        kwok answers container-log requests for the nodes it manages; it reads Logs objects only when
        its Logs CRD is enabled (kwokctl --enable-crds / options.enableCRDs). Without it: the log file.
        """
        if self.logs_crd is False:
            return
        meta = pod["metadata"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"logs": [{"containers": containers, "logsFile": str(path), "follow": True}]}}
        path.touch()
        try:
            self.cache.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", body)
            self.logs_crd = True
        except ApiException as err:
            if err.status == 404:
                self.logs_crd = False
                LOG.info("kwok Logs CRD not served: MIG Manager logs only in %s/<node>.mig-manager.log", self.hosts_dir)
            elif err.status != 409:
                LOG.warning("kwok Logs for %s: %s", meta["name"], err.reason)

    def set_node_ready(self, name, ready, message):
        node = self.cache.core.read_node(name)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = []
        for cond in self.api.sanitize_for_serialization(node.status.conditions or []):
            if cond["type"] == "Ready":
                cond.update({"status": "True" if ready else "False", "lastTransitionTime": now,
                             "lastHeartbeatTime": now, "message": message,
                             "reason": "KubeletReady" if ready else "KubeletNotReady"})
            conditions.append(cond)
        self.cache.core.patch_node_status(name, {"status": {"conditions": conditions}})

    @staticmethod
    def host_driver(node):
        """The node's driver is on the host (the validator's IS_HOST_DRIVER): see migmanager.HOST_DRIVER_ANNOTATION."""
        return ((node.get("metadata", {}).get("annotations") or {}).get(HOST_DRIVER_ANNOTATION) or "").lower() == "true"

    @staticmethod
    def kubelet_stopped(node):
        return KUBELET_STOPPED_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})

    def stop_kubelet(self, name, message):
        """kubelet.service stopped: the node reports NotReady (kwok leaves it so while annotated, kwok-stages.yaml)."""
        self.cache.core.patch_node(name, {"metadata": {"annotations": {KUBELET_STOPPED_ANNOTATION: "true"}}})
        self.set_node_ready(name, False, message)

    def start_kubelet(self, name):
        self.set_node_ready(name, True, "kubelet is posting ready status")
        self.cache.core.patch_node(name, {"metadata": {"annotations": {KUBELET_STOPPED_ANNOTATION: None}}})

    def reboot_host(self, name, state_file, message, while_down=None):
        """The node's host reboots: kubelet is down (node NotReady, no pod's process runs: ``nodes_down``) for
        Timing.reboot_seconds, the simulated host reboots (hoststate.reboot: processes end, pending MIG modes apply,
        MIG devices are gone), then a new status.nodeInfo.bootID, the `Rebooted` event kubelet emits after a boot-id
        change, and kubelet back. Annotation REBOOTING_ANNOTATION marks it while it lasts. ``while_down`` runs once
        kubelet is down (stopping the node's processes)."""
        self.cache.core.patch_node(name, {"metadata": {"annotations": {REBOOTING_ANNOTATION: "true"}}})
        self.nodes_down.add(name)
        try:
            self.stop_kubelet(name, message)
            if while_down is not None:
                while_down()
            summary = hoststate.reboot(state_file)
            time.sleep(self.timing.reboot_seconds)
            boot_id = str(uuid.uuid4())
            self.cache.core.patch_node_status(name, {"status": {"nodeInfo": {"bootID": boot_id}}})
            self.node_event(name, "Rebooted", "Node %s has been rebooted, boot id: %s (simulated boot %d)"
                            % (name, boot_id, summary["boot"]), "Warning")
            self.start_kubelet(name)
        finally:
            self.nodes_down.discard(name)
            self.cache.core.patch_node(name, {"metadata": {"annotations": {REBOOTING_ANNOTATION: None}}})

    def sync_kubelet(self, name, node):
        """A node left NotReady by fault kubelet-not-ready gets Ready once the fault is cleared (and, with NVIDIA's
        MIG Manager, once its kubelet.service is active again)."""
        if not self.kubelet_stopped(node) or "kubelet-not-ready" in self.faults(node) or name in self.nodes_down:
            return
        if self.nvidia.node_mode(node) == "nvidia":
            if self.nvidia.kubelet_active(name) and not self.nvidia.kubelet_request_waiting(name):
                self.start_kubelet(name)
            return
        manager = self.managers.get(name)
        if manager is not None and not manager.busy:
            self.start_kubelet(name)

    def pod_event(self, pod_uid, reason, message):
        """A Warning event on a pod, as kubelet posts them (e.g. FailedMount)."""
        pod = next((p for p in list(self.cache.pods.values()) if p["metadata"]["uid"] == pod_uid), None)
        if pod is None:
            return
        meta = pod["metadata"]
        now = datetime.datetime.now(datetime.timezone.utc)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="%s." % meta["name"], namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(kind="Pod", name=meta["name"], namespace=meta["namespace"],
                                                     uid=pod_uid, api_version="v1"),
            reason=reason, message=message, type="Warning", first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="kubelet", host=(pod.get("spec") or {}).get("nodeName")))
        try:
            self.cache.core.create_namespaced_event(meta["namespace"], event)
        except ApiException as err:
            LOG.warning("event for pod %s: %s", meta["name"], err.reason)

    def node_event(self, name, reason, message, kind="Normal"):
        now = datetime.datetime.now(datetime.timezone.utc)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="%s." % name, namespace="default"),
            involved_object=client.V1ObjectReference(kind="Node", name=name, uid=name, api_version="v1"),
            reason=reason, message=message, type=kind, first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="kubelet", host=name))
        self.cache.core.create_namespaced_event("default", event)

    def sync_hardware_faults(self, name, node, path):
        """The agent faults that are a state of the node's GPUs (see HOST_FAULTS' comment), in its simulated host:
        set while the fault is on the node, cleared when it goes (only what this process set)."""
        faults = self.faults(node)
        labels = node["metadata"].get("labels") or {}
        armed = self.hardware_faults.get(name, {})
        if "fail-once" in faults and "gi_create_fails" in armed and labels.get(STATE_LABEL) == "failed":
            self.fail_once_spent.add(name)  # the transient condition ends with the failed apply it caused
        wanted = {}
        if "reset-unsupported" in faults:
            wanted["reset_unsupported"] = None
        if "fail" in faults or ("fail-once" in faults and name not in self.fail_once_spent):
            wanted["gi_create_fails"] = None
        values = {}
        if self.nvidia.node_mode(node) == "nvidia":
            if "wedge-pending" in faults:
                wanted["mig_change_hangs"] = None
            elif "wedge-once" in faults:
                wanted["mig_change_hangs"] = 1
            if "slow" in faults:
                wanted["mig_change_slow"] = None
                values["mig_change_slow"] = int(self.timing.slow_seconds * 1000)
        held = "gpu-held" in faults
        if not wanted and not armed and not held and name not in self.held_nodes:
            return
        summary = hoststate.summary(path)
        present = {f["name"]: f for f in summary["faults"] if f["gpu"] == -1}
        for fault, times in wanted.items():
            record = present.get(fault)
            if times is not None:
                if record is None:  # once: a spent record (value 0) stays, so it is not set again
                    hoststate.set_fault(path, None, fault, 1, times=times)
            elif record is None or record["value"] != values.get(fault, 1) or record.get("times") is not None:
                hoststate.set_fault(path, None, fault, values.get(fault, 1))
        for fault in set(armed) - set(wanted):
            hoststate.set_fault(path, None, fault, 0)
        self.hardware_faults[name] = wanted
        self.sync_held_process(name, path, summary, held)

    def sync_held_process(self, name, path, summary, held):
        """Fault gpu-held: a compute process on GPU 0 (on its first MIG device when MIG is on), gone with the fault."""
        gpu = summary["gpus"][0]
        listed = any(p["pid"] == HELD_PID for p in gpu["processes"])
        if held and not listed:
            where = {}
            if gpu["mig_mode"]["current"]:
                devices = [(gi["id"], ci["id"]) for gi in gpu["gpu_instances"] for ci in gi["compute_instances"]]
                if not devices:
                    return  # MIG on without a MIG device: nothing a process can run on
                where = {"gi_id": devices[0][0], "ci_id": devices[0][1]}
            hoststate.add_process(path, 0, HELD_PID, HELD_MB, name=HELD_PROCESS, **where)
        elif not held and listed:
            hoststate.remove_processes(path, 0, HELD_PID)
        if held:
            self.held_nodes.add(name)
        else:
            self.held_nodes.discard(name)


def configure_logging(verbose=False):
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
