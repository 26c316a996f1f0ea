"""The agents' opt-in MIG Manager mode "nvidia": NVIDIA's nvidia-mig-manager process plays a node's mig-manager pod.

Chosen per agents process (``--mig-manager nvidia``; GpuAgents(mig_manager="nvidia") or GPUFLEET_MIG_MANAGER=nvidia)
or per node (annotation MODE_ANNOTATION = nvidia|sim, which wins). The default stays the simulator
(tests/testbed/agents/migmanager.py). What this module does is what kubelet does for that pod:

* while the node's ``nvidia-mig-manager`` DaemonSet pod is Running, one process runs for it
  (tests/testbed/nvidia_mig_manager.py: mount namespace, simulated NVML, fake systemd), with the pod's lifecycle
  of pod_processes.py;
* its env is the container's env from the pod spec: ``value``s as they are, ``fieldRef``s resolved (spec.nodeName,
  metadata.name, metadata.namespace); plus what the operator's entrypoint script exports
  (WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER; IS_HOST_DRIVER comes from the node's host-driver annotation,
  see migmanager.HOST_DRIVER_ANNOTATION);
* the container's ConfigMap volumes (``mig-parted-config``, ``gpu-clients``) are written into the node's work dir and
  bind-mounted at their mountPath; a ConfigMap that does not exist keeps the process from starting (FailedMount);
* it authenticates as the pod's ServiceAccount, with a token bound to the pod (TokenRequest), so NVIDIA's RBAC for
  mig-manager (the operator's ClusterRole/Role) is what it gets;
* a reboot it asks for (WITH_REBOOT: ``chroot /host reboot``, which creates REBOOT_REQUEST in its work dir) is the
  host's reboot (Agents.reboot_host): the node NotReady for a while, every process of the node stopped, the simulated
  host rebooted, then the processes started again for the same pods, as kubelet restarts containers after a boot;
* agent fault ``slow-start``: after each change of the node's ``nvidia.com/mig.config`` label the process gets no CPU
  for Timing.slow_seconds (SIGSTOP/SIGCONT of its process group, as on a starved node), so it acts on the change late.

Logs: ``<hosts-dir>/<node>.mig-manager.log`` (the process's stdout and stderr); its work dir
``<hosts-dir>/<node>.nvidia-mig-manager/`` (fake systemd's log and units, the generated config under upper/etc).
"""

import threading
import time
from pathlib import Path

import yaml

from kubernetes import client

from tests.testbed.agents.kube import LOG, ignore_missing
from tests.testbed.agents.pod_processes import MODES, PodProcesses, pod_env
from tests.testbed.gpusim.simhost import library_dir
from tests.testbed.nvidia_mig_manager import NvidiaMigManager, driver_ready_env
from tests.testbed.operator import flatten_kubeconfig

MODE_ANNOTATION = "gpusim.gpufleet.io/mig-manager"
CONTAINER = "nvidia-mig-manager"
CONFIG_LABEL = "nvidia.com/mig.config"
REBOOT_REQUEST = "reboot-requested"
TOKEN_SECONDS = 24 * 3600
__all__ = ["MODES", "MODE_ANNOTATION", "NvidiaMigManagers"]


class NvidiaMigManagers(PodProcesses):
    """Every node's NVIDIA MIG Manager process, kept in step with the node's mig-manager pod."""

    program = "nvidia-mig-manager"
    container = CONTAINER
    mode_annotation = MODE_ANNOTATION
    default_mode_attribute = "mig_manager_mode"

    def __init__(self, agents, kubeconfig):
        super().__init__(agents)
        self.kubeconfig = Path(kubeconfig).resolve()
        self.configs_seen = {}  # node -> its nvidia.com/mig.config value last seen (fault slow-start)

    def work_dir(self, name):
        return self.agents.hosts_dir / ("%s.nvidia-mig-manager" % name)

    def set_host_faults(self, name, faults):
        """The node's OS-boundary faults (agent.HOST_FAULTS), in the file the fake host programs read at each call."""
        path = self.work_dir(name) / "fakehost-faults"
        text = "".join("%s\n" % f for f in sorted(faults))
        if (path.read_text() if path.exists() else "") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def observe_config(self, name, node, faults):
        """Fault slow-start: a change of the node's config label pauses its process for Timing.slow_seconds."""
        value = (node["metadata"].get("labels") or {}).get(CONFIG_LABEL)
        changed = name in self.configs_seen and self.configs_seen[name] != value
        self.configs_seen[name] = value
        process = self.entry(name).process
        if changed and "slow-start" in faults and process is not None:
            LOG.info("[%s] slow-start: nvidia-mig-manager paused %ss after %s=%s", name,
                     self.agents.timing.slow_seconds, CONFIG_LABEL, value)
            process.pause(self.agents.timing.slow_seconds)

    # -- the host's reboot (WITH_REBOOT) -------------------------------------------------------
    def reboot_request(self, name):
        return self.work_dir(name) / REBOOT_REQUEST

    def reboots_requested(self):
        return {name for name in list(self.nodes) if self.reboot_request(name).exists()}

    # -- kubelet.service stopped and started by MIG Manager (WITH_SHUTDOWN_HOST_GPU_CLIENTS) -----------------
    def kubelet_dir(self, name):
        return self.work_dir(name) / "kubelet"

    def kubelet_request_waiting(self, name):
        return any(self.kubelet_dir(name).glob("kubelet-*active"))

    def kubelet_requests(self):
        return {name for name in list(self.nodes) if self.kubelet_request_waiting(name)}

    def take_kubelet_request(self, name):
        """The oldest kubelet.service change the node's fake systemd made ('inactive' or 'active'), taken (the hook
        waiting on it returns), or None."""
        requests = sorted(self.kubelet_dir(name).glob("kubelet-*active"), key=lambda p: p.stat().st_mtime_ns)
        if not requests:
            return None
        requests[0].unlink(missing_ok=True)
        return requests[0].name[len("kubelet-"):]

    def kubelet_active(self, name):
        """Whether the node's kubelet.service is active in its fake systemd's unit table (True without one)."""
        entry = self.entry(name)
        units = entry.process.units() if entry.process is not None else {}
        return (units.get("kubelet.service") or {}).get("ActiveState", "active") == "active"

    def reboot(self, name, state_path):
        """Reboot the node's host for its MIG Manager's ``reboot``, in a thread of its own (it takes a while)."""
        if name in self.agents.nodes_down:
            return
        self.reboot_request(name).unlink(missing_ok=True)
        self.agents.nodes_down.add(name)
        LOG.info("[%s] nvidia-mig-manager rebooted the host", name)

        def stop_processes():
            for processes in (self, self.agents.plugins):
                entry = processes.entry(name)
                with entry.lock:
                    processes._stop(entry)  # pylint: disable=protected-access

        def run():
            try:
                self.agents.reboot_host(name, state_path, "node rebooting: nvidia-mig-manager ran reboot",
                                        while_down=stop_processes)
            except Exception as err:  # pylint: disable=broad-except  # the agents go on with the other nodes
                LOG.warning("[%s] reboot failed: %s", name, err)
                self.agents.nodes_down.discard(name)
        threading.Thread(target=run, daemon=True, name="reboot-" + name).start()

    def start(self, entry, name, node, pod, container, state_path):
        work = self.work_dir(name)
        volumes = self.volumes(name, pod, container, work)
        if volumes is None:
            entry.next_start = time.monotonic() + 2  # kubelet retries the mount
            return
        entry.waiting = None
        env = pod_env(pod, container, name)
        # The operator's entrypoint (assets state-mig-manager/0420_configmap.yaml) exports the validator's driver-ready
        # file, and WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER.
        host_driver = self.agents.host_driver(node)
        env.update(driver_ready_env(host_driver))
        kubeconfig = self.pod_kubeconfig(pod, work)
        lib_dir = self.agents.nvml_lib_dir or library_dir(build=True)
        entry.process = NvidiaMigManager(
            name, state_path, work, kubeconfig, lib_dir, namespace=pod["metadata"]["namespace"],
            env=env, pod_name=pod["metadata"]["name"], volumes=volumes,
            log_path=self.agents.log_path(name, "mig-manager"), host_driver=host_driver,
            reboot_request=self.reboot_request(name), kubelet_requests=self.kubelet_dir(name)).start()
        LOG.info("[%s] nvidia-mig-manager started for pod %s (pid %d)", name, pod["metadata"]["name"],
                 entry.process.proc.pid)

    # -- what kubelet prepares for the container ---------------------------------------------
    def volumes(self, name, pod, container, work):
        """[(host dir, mountPath)] of the container's volumes: ConfigMaps written into work/volumes/<volume>, hostPaths
        as the same path under the simulated host root (work/host; `/` and `/sys` are the runner's own /host and
        fake sysfs); None when a ConfigMap is missing (the pod stays in ContainerCreating)."""
        by_name = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
        out = []
        for mount in container.get("volumeMounts") or []:
            volume = by_name.get(mount["name"]) or {}
            host_path = (volume.get("hostPath") or {}).get("path")
            if host_path and not mount.get("subPath") and host_path.rstrip("/") not in ("", "/sys"):
                target = work / "host" / host_path.strip("/")
                target.mkdir(parents=True, exist_ok=True)  # DirectoryOrCreate
                out.append((target, mount["mountPath"]))
                continue
            source = volume.get("configMap")
            if source is None or mount.get("subPath"):
                continue  # host paths and the entrypoint script (subPath): nothing the process reads
            cm = ignore_missing(self.agents.cache.core.read_namespaced_config_map, source["name"],
                                pod["metadata"]["namespace"])
            if cm is None:
                if source.get("optional"):
                    continue
                reason = 'configmap "%s" not found' % source["name"]
                entry = self.entry(name)
                if entry.waiting != reason:
                    entry.waiting = reason
                    LOG.info("[%s] nvidia-mig-manager cannot start: volume %s: %s", name, mount["name"], reason)
                    self.agents.pod_event(pod["metadata"]["uid"], "FailedMount",
                                          'MountVolume.SetUp failed for volume "%s" : %s' % (mount["name"], reason))
                return None
            data = cm.data or {}
            items = source.get("items") or [{"key": k, "path": k} for k in sorted(data)]
            target = work / "volumes" / mount["name"]
            target.mkdir(parents=True, exist_ok=True)
            for old in target.iterdir():
                old.unlink()
            for item in items:
                if item["key"] in data:
                    (target / item["path"]).write_text(data[item["key"]])
            out.append((target, mount["mountPath"]))
        return out

    def pod_kubeconfig(self, pod, work):
        """A kubeconfig with a token of the pod's ServiceAccount bound to the pod (what the projected token volume
        holds), and the admin kubeconfig's server and CA."""
        meta = pod["metadata"]
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=TOKEN_SECONDS,
            bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=meta["name"], uid=meta["uid"])))
        token = self.agents.cache.core.create_namespaced_service_account_token(account, meta["namespace"], request).status.token
        work.mkdir(parents=True, exist_ok=True)
        admin = work / "admin.kubeconfig"
        flatten_kubeconfig(self.kubeconfig, admin)
        config = yaml.safe_load(admin.read_text())
        admin.unlink()
        context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
        cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
        user = "system:serviceaccount:%s:%s" % (meta["namespace"], account)
        path = work / "pod.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user,
                                                    "namespace": meta["namespace"]}}],
            "current-context": user}))
        path.chmod(0o600)
        return path
