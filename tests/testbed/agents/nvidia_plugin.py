"""The agents' device-plugin mode "nvidia": NVIDIA's nvidia-device-plugin plays a node's device-plugin pod.

Chosen per agents process (``--device-plugin nvidia``; GpuAgents(device_plugin="nvidia"), the pytest fixtures'
default, or GPUFLEET_DEVICE_PLUGIN) or per node (annotation MODE_ANNOTATION = nvidia|sim, which wins). Mode "sim"
(the agents' command line default) is the agents' own capacity/allocatable (agent.py ``device_plugin``). What this
module does is what kubelet does:

* a node in this mode has a kubelet device-plugin endpoint for its lifetime (tests/testbed/kubelet_deviceplugin.py,
  in the agents process): the Registration service on the node's ``kubelet.sock`` and one ListAndWatch stream per
  registered resource, whose answers become the node's capacity and allocatable; when a plugin stops, its resource's
  allocatable is 0 at once and its capacity 0 after kubelet's grace (GRACE_SECONDS here);
* while the node's ``nvidia-device-plugin-daemonset`` pod is Running, NVIDIA's plugin runs for it
  (tests/testbed/nvidia_device_plugin.py: mount namespace, simulated NVML), with the pod's lifecycle of
  pod_processes.py; its env is the ``nvidia-device-plugin`` container's env from the pod spec, i.e. what NVIDIA's
  controller rendered from the ClusterPolicy (MIG_STRATEGY, the CDI settings, ...), and what the operator's entrypoint
  exports from the validator's driver-ready file for the node (``gpusim.gpufleet.io/host-driver``); with CDI the
  plugin writes its CDI spec from the fake driver root nvidia_device_plugin.py makes;
* the config NVIDIA's config-manager picks from the ClusterPolicy's device-plugin ConfigMap for the node (agent.py
  ``plugin_config``, which runs it as the pod's sidecar does) is written to the file CONFIG_FILE names, and a change
  restarts the plugin (config-manager's SIGHUP makes the plugin restart itself with the new file);
* agent fault ``stale-plugin``: the node's status is not written while it is set (what kubelet's endpoint learns is
  kept back, and written when the fault is cleared), so the node keeps advertising what it did, as when kubelet's
  node-status updates do not reach the API server while its Lease still keeps the node Ready; the same while the
  node's kubelet.service is stopped (agent.py ``kubelet_stopped``: no kubelet posts the status then).

Logs, in ``<hosts-dir>/<node>.nvidia-device-plugin/``: ``device-plugin.log`` (NVIDIA's process, stdout and stderr)
and the endpoint's lines in the agents' log; the plugin's CDI spec in ``cdi/`` there.
"""

import threading

import yaml

from tests.testbed.agents.kube import LOG
from tests.testbed.agents.pod_processes import PodProcesses, pod_env
from tests.testbed.gpusim.simhost import library_dir
from tests.testbed.kubelet_deviceplugin import Kubelet
from tests.testbed.nvidia_device_plugin import NvidiaDevicePlugin

MODE_ANNOTATION = "gpusim.gpufleet.io/device-plugin"
CONTAINER = "nvidia-device-plugin"
GRACE_SECONDS = 30  # kubelet's endpointStopGracePeriod is 5 minutes; tests wait for a stale resource to go


class NvidiaDevicePlugins(PodProcesses):
    """Every node's kubelet endpoint and NVIDIA device-plugin process, kept in step with its device-plugin pod."""

    program = "nvidia-device-plugin"
    container = CONTAINER
    mode_annotation = MODE_ANNOTATION
    default_mode_attribute = "device_plugin_mode"

    def __init__(self, agents):
        super().__init__(agents)
        self.kubelets = {}  # node -> Kubelet
        self.configs = {}  # node -> the config text the running plugin was started with (None: none)
        self.stale = {}  # node -> {resource: (capacity, allocatable)} kept back while fault stale-plugin is set
        self.stale_lock = threading.Lock()

    def work_dir(self, name):
        return self.agents.hosts_dir / ("%s.nvidia-device-plugin" % name)

    def sync_config(self, name, node, pod, state_path, config):
        """``sync`` with the node's device-plugin config (a mapping or None): a changed config restarts the plugin."""
        text = yaml.safe_dump(config) if config else None
        entry = self.entry(name)
        with entry.lock:
            if entry.process is not None and self.configs.get(name) != text:
                LOG.info("[%s] nvidia-device-plugin: device-plugin config changed, restarting", name)
                self._stop(entry)
            self.configs[name] = text
        self.sync(name, node, pod, state_path)

    def kubelet(self, name):
        kubelet = self.kubelets.get(name)
        if kubelet is None:
            core = self.agents.cache.core

            def status(resource, capacity, allocatable):
                with self.stale_lock:
                    if name in self.stale:
                        self.stale[name][resource] = (capacity, allocatable)
                        return
                core.patch_node_status(name, {"status": {"capacity": {resource: str(capacity)},
                                                         "allocatable": {resource: str(allocatable)}}})
            kubelet = self.kubelets[name] = Kubelet(self.work_dir(name) / "device-plugins", status,
                                                    GRACE_SECONDS).start()
        return kubelet

    def set_stale(self, name, stale):
        """Status writes held back (fault stale-plugin, or kubelet.service stopped) or not; off writes what was kept."""
        with self.stale_lock:
            if stale:
                self.stale.setdefault(name, {})
                return
            kept = self.stale.pop(name, None)
        if kept:
            self.agents.cache.core.patch_node_status(name, {"status": {
                "capacity": {r: str(c) for r, (c, _a) in kept.items()},
                "allocatable": {r: str(a) for r, (_c, a) in kept.items()}}})

    def start(self, entry, name, node, pod, container, state_path):
        self.kubelet(name)
        env = pod_env(pod, container, name)
        work = self.work_dir(name)
        config = self.configs.get(name)
        if config:
            path = work / "config" / "config.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(config)
            env["CONFIG_FILE"] = str(path)
        else:
            env.pop("CONFIG_FILE", None)
        lib_dir = self.agents.nvml_lib_dir or library_dir(build=True)
        entry.process = NvidiaDevicePlugin(name, state_path, work, lib_dir, env=env,
                                           host_driver=self.agents.host_driver(node)).start()
        LOG.info("[%s] nvidia-device-plugin started for pod %s (pid %d)", name, pod["metadata"]["name"],
                 entry.process.proc.pid)

    def forget(self, name):
        """The node is gone: its plugin and its kubelet endpoint stop."""
        self.sync(name, None, None, None)
        kubelet = self.kubelets.pop(name, None)
        if kubelet is not None:
            kubelet.stop()
        self.configs.pop(name, None)
        with self.stale_lock:
            self.stale.pop(name, None)

    def stop_all(self):
        super().stop_all()
        for name in list(self.kubelets):
            self.kubelets.pop(name).stop()
