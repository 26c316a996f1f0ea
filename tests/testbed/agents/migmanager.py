"""MIG Manager for one simulated node: the reconfigure sequence of k8s-mig-manager v0.15.0.

Sequence, labels and messages follow reference nvidia-gpu-operator-and-mig.md §3.2-§3.6; the
MIG devices are applied through pynvml as mig-parted does (§4.4).
"""

import datetime
import threading
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.testbed.agents import hardware, migconfig
from tests.testbed.agents.kube import LOG, ignore_missing
from tests.testbed.gpusim import hoststate

CONFIG_LABEL = "nvidia.com/mig.config"
DEFAULT_CONFIG_MAP = "default-mig-parted-config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
# Deploy labels MIG Manager pauses (MP reconfigure.go L39-51); `client` only when already present.
PAUSABLE = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
# Operand pods that must be gone from the node before the GPUs are touched (MP reconfigure.go L395-438).
OPERAND_APPS = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-dcgm")
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")
REBOOTING_ANNOTATION = "gpusim.gpufleet.io/rebooting"
# kubelet.service stopped on the simulated host: kwok leaves such a node NotReady (tests/testbed/kwok-stages.yaml).
KUBELET_STOPPED_ANNOTATION = "gpusim.gpufleet.io/kubelet-stopped"
# The node's driver is installed on the host (the validator's IS_HOST_DRIVER=true): MIG Manager's entrypoint then
# exports WITH_SHUTDOWN_HOST_GPU_CLIENTS=true (gpu-operator assets/state-mig-manager/0420_configmap.yaml).
# Why an annotation stands for it: NVIDIA's validator decides IS_HOST_DRIVER per node from the host's filesystem
# (validator/main.go runValidation: a non-empty /host/usr/bin/nvidia-smi that runs under `chroot /host` wins,
# checked before the driver container) and writes it into /run/nvidia/validations/driver-ready, which MIG
# Manager's entrypoint sources. Nothing in the API says it: not the ClusterPolicy (driver.enabled=true still gives
# IS_HOST_DRIVER=true on a node whose host has a working nvidia-smi), not a node label. A kwok node has no host
# filesystem, so the annotation is that file's value for the node; unset = the driver container (the default,
# which every test that does not set it keeps).
HOST_DRIVER_ANNOTATION = "gpusim.gpufleet.io/host-driver"
CLIENT_DEPLOY_LABEL = "nvidia.com/gpu.deploy.client"
GENERATED_CM_LABELS = {"app.kubernetes.io/component": "nvidia-mig-manager"}


class ReconfigureFailed(Exception):
    """The run ends with mig.config.state=failed (deploy labels restored)."""


class Wedged(Exception):
    """The run stops with state pending and operands paused, as the upstream bug does."""


class Rebooting(Exception):
    """A reboot was started; the sequence runs again once the node is back."""


class MigManager:
    """Plays the nvidia-mig-manager pod of one node: waits for label changes, runs one at a time."""

    def __init__(self, agents, node):
        self.agents = agents
        self.cache = agents.cache
        self.node = node
        self.pod_uid = None        # the mig-manager pod this "process" belongs to
        self.seen = None           # last nvidia.com/mig.config value seen by the informer
        self.requested = None
        self.config_source = None  # (kind, name) chosen at "startup" of the pod
        self.wake = threading.Event()
        self.busy = False
        self.wedged_once = False   # fault wedge-once: whether the transient wedge has happened
        self.mounted = None        # (pod uid, config name, text): the custom ConfigMap as mounted into the pod
        self.not_started = None    # pod uid whose container cannot start (its custom ConfigMap is missing)
        self.host_stopped = False  # host GPU clients (and maybe kubelet) stopped by the current run
        self.thread = threading.Thread(target=self._loop, daemon=True, name="mig-manager-" + node)
        self.thread.start()

    # -- informer side ---------------------------------------------------------------------
    def observe(self, pod_uid, value):
        """Called on every node/pod change while the mig-manager pod runs on the node (MP main.go §3.4).

        The container starts only once kubelet can mount its volumes: with spec.migManager.config.name naming a
        ConfigMap that does not exist, the pod stays in ContainerCreating (FailedMount) and MIG Manager never
        runs, so no state is ever set (kubelet retries the mount: it starts once the ConfigMap appears)."""
        if pod_uid != self.pod_uid and not self.mount_config(pod_uid):
            return
        if pod_uid != self.pod_uid:
            self.pod_uid = pod_uid
            self.config_source = None
            self.seen = value
            self.log("Waiting for change to '%s' label" % CONFIG_LABEL)
            if value:
                self._request(value)
        elif value != self.seen:
            self.seen = value
            if value:  # Set("") does not wake the loop: no label, no action
                self._request(value)

    def mount_config(self, pod_uid):
        """Mount the custom ConfigMap, as kubelet does before the container starts; False when it cannot."""
        name = self.custom_config_name()
        if not name:
            self.mounted = (pod_uid, "", None)
            return True
        cm = ignore_missing(self.cache.core.read_namespaced_config_map, name, self.agents.namespace)
        if cm is None:
            if self.not_started != pod_uid:
                self.not_started = pod_uid
                self.agents.pod_event(pod_uid, "FailedMount", 'MountVolume.SetUp failed for volume "mig-parted-config" : '
                                      'configmap "%s" not found' % name)
                LOG.info("[%s] mig-manager pod cannot start: ConfigMap %s/%s not found", self.node, self.agents.namespace, name)
            return False
        self.not_started = None
        self.mounted = (pod_uid, name, (cm.data or {}).get("config.yaml"))
        return True

    def custom_config_name(self):
        spec = self.cache.policy_spec().get("migManager") or {}
        name = (spec.get("config") or {}).get("name") or ""
        # v26.7.0 (the production pin, modelled here) leaves config.name empty for "generate from the
        # hardware"; the v25.3.4 CRD the testbed's real controller comes with defaults an empty name to
        # the operator's own default-mig-parted-config. Both mean: no custom config.
        return "" if name == DEFAULT_CONFIG_MAP else name

    def _request(self, value):
        self.requested = value
        self.wake.set()

    def _loop(self):
        while not self.cache.stopping.is_set():
            # A long wait: one thread per node waking every second kept the GIL busy at 1000 nodes (the process
            # exits with its daemon threads; a label change sets `wake`).
            self.wake.wait(60.0)
            if not self.wake.is_set():
                continue
            self.wake.clear()
            value, self.requested = self.requested, None
            if not value:
                continue
            self.busy = True
            try:
                self.run(value)
            except Exception as err:  # pylint: disable=broad-except  # a bug must not kill the node's manager
                self.log("Unexpected error: %s" % err, level="error")
                LOG.exception("mig-manager %s", self.node)
            finally:
                self.busy = False
                self.log("Waiting for change to '%s' label" % CONFIG_LABEL)

    # -- logging ---------------------------------------------------------------------------
    def log(self, message, level="info"):
        now = datetime.datetime.now(datetime.timezone.utc)
        line = 'time="%s" level=%s msg="%s"' % (now.strftime("%Y-%m-%dT%H:%M:%SZ"), level, message.replace('"', '\\"'))
        with open(self.agents.log_path(self.node, "mig-manager"), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        # the same line in CRI log format, which kwok serves to `kubectl logs` (see Agents.serve_logs)
        with open(self.agents.log_path(self.node, "mig-manager.cri"), "a", encoding="utf-8") as fh:
            fh.write("%s stderr F %s\n" % (now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), line))
        LOG.info("[%s] mig-manager: %s", self.node, message)

    # -- node access -----------------------------------------------------------------------
    def labels(self):
        node = self.cache.nodes.get(self.node) or {}
        return dict(node.get("metadata", {}).get("labels") or {})

    def annotations(self):
        node = self.cache.nodes.get(self.node) or {}
        return dict(node.get("metadata", {}).get("annotations") or {})

    def faults(self):
        return self.agents.faults(self.cache.nodes.get(self.node) or {})

    def patch_labels(self, labels):
        self.cache.core.patch_node(self.node, {"metadata": {"labels": labels}})
        with self.cache.cond:  # reflect our own write at once; the watch event follows
            node = self.cache.nodes.get(self.node)
            if node is not None:
                current = node["metadata"].setdefault("labels", {})
                for key, value in labels.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = value

    def set_state(self, state):
        self.log("Updating label %s=%s" % (STATE_LABEL, state))
        self.patch_labels({STATE_LABEL: state})

    def deploy_keys(self):
        keys = ["nvidia.com/gpu.deploy." + k for k in PAUSABLE]
        if "nvidia.com/gpu.deploy.client" in self.labels():
            keys.append("nvidia.com/gpu.deploy.client")
        return keys

    def pause_operands(self):
        current = self.labels()
        patch = {k: "false" if current.get(k) == "false" else PAUSED for k in self.deploy_keys()}
        self.log("Shutting down all GPU clients in Kubernetes by disabling their component-specific nodeSelector labels")
        self.patch_labels(patch)

    def restore_operands(self):
        current = self.labels()
        patch = {k: "false" if current.get(k) == "false" else "true" for k in self.deploy_keys()}
        self.log("Restarting all GPU clients previously shutdown in Kubernetes by reenabling their component-specific nodeSelector labels")
        self.patch_labels(patch)

    def fail(self, message):
        self.log(message, level="error")
        self.restart_host_clients()  # setState restarts what was stopped on the host first
        self.restore_operands()
        self.set_state("failed")

    def finish_unchanged(self):
        """Already applied: setState(success), which sets every pausable deploy label to "true" (a "false" one
        stays "false"), also ones the node did not have, such as gpu.deploy.nvsm (MP reconfigure.go setState)."""
        self.restore_operands()
        self.set_state("success")

    # -- config source (MP main.go setupMigConfig, §3.2) -----------------------------------
    def load_configs(self, host):
        name = self.custom_config_name()
        core, ns = self.cache.core, self.agents.namespace
        if name:
            # The mounted file: kubelet keeps it in sync with the ConfigMap, and keeps the last content when the
            # ConfigMap is deleted under a running pod.
            cm = ignore_missing(core.read_namespaced_config_map, name, ns)
            if cm is not None:
                self.mounted = (self.pod_uid, name, (cm.data or {}).get("config.yaml"))
            text = self.mounted[2] if self.mounted and self.mounted[1] == name else None
            if text is None:
                raise ReconfigureFailed("error reading MIG config file: ConfigMap %s/%s has no key config.yaml" % (ns, name))
            return migconfig.parse(text, "ConfigMap %s/%s" % (ns, name))
        try:
            generated = migconfig.generate(host.gpus)
        except migconfig.NoProfilesDiscovered as err:
            self.log("Dynamic MIG config generation failed (%s); using the default config file" % err, level="warning")
            cm = ignore_missing(core.read_namespaced_config_map, DEFAULT_CONFIG_MAP, ns)
            if cm is None:
                raise ReconfigureFailed("dynamic generation failed and no default config available") from err
            # key config-default.yaml in v26.7.0's asset, config.yaml in older releases' (v25.3.4)
            data = cm.data or {}
            key = "config-default.yaml" if "config-default.yaml" in data else "config.yaml"
            return migconfig.parse(data.get(key, ""), "ConfigMap %s/default-mig-parted-config" % ns)
        if self.config_source != self.pod_uid:
            self._publish_generated(generated)
            self.config_source = self.pod_uid
        return generated["mig-configs"]

    def _publish_generated(self, generated):
        core, ns = self.cache.core, self.agents.namespace
        name = "%s-mig-config" % self.node
        pod = self.cache.pods.get(self.pod_uid)
        owners = None
        if pod:
            owners = [client.V1OwnerReference(api_version="v1", kind="Pod", name=pod["metadata"]["name"],
                                              uid=self.pod_uid)]
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, namespace=ns, owner_references=owners,
                                         labels={**GENERATED_CM_LABELS, "nvidia.com/node-name": self.node}),
            data={"config.yaml": migconfig.dump_generated(generated)})
        try:
            core.create_namespaced_config_map(ns, body)
        except ApiException as err:
            if err.status != 409:
                raise
            core.replace_namespaced_config_map(name, ns, body)
        self.log("Generated MIG configuration from hardware into ConfigMap %s/%s" % (ns, name))

    # -- waiting on pods (woken by the pod watch) -------------------------------------------
    def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        with self.cache.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or self.cache.stopping.is_set():
                    return False
                self.cache.cond.wait(min(left, 5.0))
        return True

    def operand_pods_on_node(self):
        ns = self.agents.namespace
        return [p for p in self.cache.pods_on(self.node) if p["metadata"].get("namespace") == ns
                and (p["metadata"].get("labels") or {}).get("app") in OPERAND_APPS]

    def client_pods_on_node(self):
        """Pods, in any namespace, of DaemonSets whose nodeSelector has nvidia.com/gpu.deploy.client: MIG Manager
        waits for them to go too (reference §3.6 step 8). It does not look at other pods: a user pod holding a GPU
        is not refused here, the busy GPU makes the change fail."""
        return [p for p in self.cache.pods_on(self.node)
                if CLIENT_DEPLOY_LABEL in ((p.get("spec") or {}).get("nodeSelector") or {})
                and any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]

    def pods_to_wait_for(self):
        return self.operand_pods_on_node() + self.client_pods_on_node()

    def delete_node_pods(self, app):
        for pod in self.cache.pods_on(self.node):
            meta = pod["metadata"]
            if (meta.get("labels") or {}).get("app") == app and meta.get("namespace") == self.agents.namespace:
                self.log("Deleting pod %s/%s" % (meta["namespace"], meta["name"]))
                ignore_missing(self.cache.core.delete_namespaced_pod, meta["name"], meta["namespace"])

    # -- the sequence (MP reconfigure.go Run, §3.6) -----------------------------------------
    def run(self, value):
        self.log("Updating to MIG config: %s" % value)
        state_file = self.agents.state_file(self.cache.nodes.get(self.node) or {})
        if state_file is None:  # the node (and its simulated host) is gone: there is no hardware to act on
            self.log("No simulated host for node %s; nothing to reconfigure" % self.node, level="warning")
            return
        try:
            self._run(value, state_file)
        except ReconfigureFailed as err:
            self.fail(str(err))
        except Wedged as err:
            self.log(str(err), level="error")
        except Rebooting:
            self.reboot(state_file)
            self.log("Node back from reboot; running MIG reconfiguration again")
            self.run(value)

    def _run(self, value, state_file):
        timing = self.agents.timing
        faults = self.faults()
        if "slow-start" in faults:  # a MIG Manager slow to act on the label (busy node, slow informer)
            time.sleep(timing.slow_seconds)
        host = hardware.read_host(state_file)
        try:
            configs = self.load_configs(host)
            plan = migconfig.select(configs, value, host.gpus)
        except migconfig.ConfigError as err:
            raise ReconfigureFailed("Error validating MIG configuration: %s" % err) from err
        self.log("Asserting that the requested configuration is present in the configuration file")
        if migconfig.applied(plan, host.gpus):
            self.log("MIG configuration already applied")
            self.finish_unchanged()
            return
        mode_change = not migconfig.mode_applied(plan, host.gpus)
        if mode_change and self.labels().get(STATE_LABEL) == "rebooting":
            raise ReconfigureFailed("MIG mode change did not take effect after rebooting")
        self.set_state("pending")
        self.pause_operands()
        if "wedge-pending" in faults:
            raise Wedged("Timed out waiting for GPU clients to shut down (simulated wedge; "
                         "state stays pending, operands stay paused)")
        if "wedge-once" in faults and not self.wedged_once:
            self.wedged_once = True  # a client that went away later: the next run on this node goes through
            raise Wedged("Timed out waiting for GPU clients to shut down (simulated transient wedge; "
                         "state stays pending, operands stay paused)")
        self.log("Waiting for operand pods to be deleted from the node")
        if not self.wait_for(lambda: not self.pods_to_wait_for(), timing.pod_wait_seconds):
            # v0.15 returns here without setState: state stays pending, operands stay paused (fixed after
            # v0.15.0 by NVIDIA/mig-parted PR #484)
            left = ", ".join("%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.pods_to_wait_for())
            raise Wedged("failed to wait for pods to be deleted: timed out waiting for %s" % left)
        for app in VALIDATOR_APPS:
            self.delete_node_pods(app)
        self.shutdown_host_clients(mode_change)
        host = hardware.read_host(state_file)
        busy = [g.index for g in host.gpus if g.index in plan and g.processes]  # fault gpu-held: a process (agent.py)
        if busy:
            raise ReconfigureFailed("GPU %s: In use by another client (running compute processes)"
                                    % ", ".join(str(i) for i in busy))
        if mode_change:
            self.change_mode(plan, state_file, faults)
        host = hardware.read_host(state_file)
        still = [g.index for g in host.gpus if g.index in plan and not plan[g.index][0] and g.mig_current]
        if still:
            # WITH_REBOOT unset: `apply` runs anyway and refuses (mig-parted cmd/nvidia-mig-parted/apply/config.go)
            raise ReconfigureFailed("Error applying MIG configuration: GPU %s: MIG mode is currently enabled, but the "
                                    "configuration specifies it should be disabled" % ", ".join(str(i) for i in still))
        self.log("Applying the selected MIG config to the node")
        if timing.apply_seconds:
            time.sleep(timing.apply_seconds)
        if "slow" in faults:
            time.sleep(timing.slow_seconds)
        # faults fail and fail-once: the simulated driver refuses the GPU instances (agent.py sync_hardware_faults)
        host = hardware.read_host(state_file)
        by_index = {g.index: g for g in host.gpus}
        for index, (enabled, devices) in sorted(plan.items()):
            if not enabled:
                continue
            gpu = by_index[index]
            if not gpu.mig_current:
                raise ReconfigureFailed("Error applying MIG configuration: GPU %d: MIG mode is not enabled "
                                        "(mode change pending a GPU reset or reboot)" % index)
            try:
                wanted = migconfig.wanted_devices(gpu, devices)
                hardware.apply_mig_devices(state_file, index, wanted)
            except (migconfig.ConfigError, hardware.ApplyError) as err:
                raise ReconfigureFailed("Error applying MIG configuration: %s" % err) from err
        self.restart_host_clients()
        self.log("Restarting validator pod to re-run all validations")
        self.delete_node_pods("nvidia-operator-validator")
        self.restore_operands()
        self.set_state("success")
        self.log("Successfully updated to MIG config: %s" % value)

    # -- host GPU clients (WITH_SHUTDOWN_HOST_GPU_CLIENTS, reference §3.6 step 9 and 13) ------------
    def host_driver(self):
        return (self.annotations().get(HOST_DRIVER_ANNOTATION) or "").lower() == "true"

    def shutdown_host_clients(self, mode_change):
        """With the driver on the host: stop the host's GPU client services and, when the MIG mode changes,
        kubelet.service too (the node goes NotReady), then sleep 30 s upstream (Timing.host_clients_seconds)."""
        if not self.host_driver():
            return
        self.log("Shutting down all GPU clients on the host by stopping their systemd services")
        self.host_stopped = True
        if mode_change:
            self.log("Stopping kubelet.service on the host for the MIG mode change")
            self.agents.stop_kubelet(self.node, "kubelet.service stopped by nvidia-mig-manager for a MIG mode change")
            time.sleep(self.agents.timing.host_clients_seconds)

    def restart_host_clients(self):
        if not self.host_stopped:
            return
        self.host_stopped = False
        self.log("Restarting all GPU clients previously shutdown on the host by restarting their systemd services")
        if "kubelet-not-ready" in self.faults():
            # kubelet.service started again, but the node does not get Ready (until the fault is cleared)
            return
        self.agents.start_kubelet(self.node)

    def change_mode(self, plan, state_file, faults):
        self.log("Applying the MIG mode change from the selected config to the node")
        with_reboot = self.agents.with_reboot()
        pending = []
        for enabled in (False, True):
            indexes = [i for i, wanted in sorted(plan.items()) if wanted[0] == enabled]
            if not indexes:
                continue
            try:
                pending += hardware.set_mig_mode(state_file, indexes, enabled)
            except hardware.ApplyError as err:
                raise ReconfigureFailed("Error setting MIG mode: %s" % err) from err
        for index in pending:
            if "reset-unsupported" in faults:
                reason = "GPU %d: GPU reset is not supported on this node" % index
            else:
                try:
                    hoststate.reset_gpu(state_file, index)
                    self.log("GPU %d reset to apply the MIG mode change" % index)
                    continue
                except hoststate.SimHostError as err:
                    reason = str(err)
            if with_reboot:
                self.log("MIG mode change needs a reboot (%s)" % reason)
                self.set_state("rebooting")
                raise Rebooting()
            self.log("MIG mode change did not take effect (%s); WITH_REBOOT is not set" % reason, level="warning")
            return

    def reboot(self, state_file):
        """A host reboot (Agents.reboot_host): node NotReady for the reboot time, pending MIG modes apply."""
        self.log("Rebooting node %s" % self.node)
        self.host_stopped = False  # everything on the host comes back with the boot
        self.agents.reboot_host(self.node, state_file, "simulated reboot by nvidia-mig-manager")
