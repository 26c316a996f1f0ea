"""MIG Manager for one simulated node: the reconfigure sequence of k8s-mig-manager v0.15.0.

Sequence, labels and messages follow reference nvidia-gpu-operator-and-mig.md §3.2-§3.6; the
MIG devices are applied through pynvml as mig-parted does (§4.4).
"""

import datetime
import threading
import time
import uuid

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
        self.failed_once = False   # fault fail-once: whether the transient failure has happened
        self.wedged_once = False   # fault wedge-once: likewise for the transient wedge
        self.thread = threading.Thread(target=self._loop, daemon=True, name="mig-manager-" + node)
        self.thread.start()

    # -- informer side ---------------------------------------------------------------------
    def observe(self, pod_uid, value):
        """Called on every node/pod change while the mig-manager pod runs on the node (MP main.go §3.4)."""
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

    def _request(self, value):
        self.requested = value
        self.wake.set()

    def _loop(self):
        while not self.cache.stopping.is_set():
            self.wake.wait(1.0)
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
        self.restore_operands()
        self.set_state("failed")

    def finish_unchanged(self):
        """Already applied: success; deploy labels a wedged run left paused are set back (setState)."""
        if any(self.labels().get(k) == PAUSED for k in self.deploy_keys()):
            self.restore_operands()
        self.set_state("success")

    # -- config source (MP main.go setupMigConfig, §3.2) -----------------------------------
    def load_configs(self, host):
        spec = self.cache.policy_spec().get("migManager") or {}
        name = (spec.get("config") or {}).get("name") or ""
        core, ns = self.cache.core, self.agents.namespace
        # v26.7.0 (the production pin, modelled here) leaves config.name empty for "generate from the
        # hardware"; the v25.3.4 CRD the testbed's real controller comes with defaults an empty name to
        # the operator's own default-mig-parted-config. Both mean: no custom config.
        if name and name != DEFAULT_CONFIG_MAP:
            cm = ignore_missing(core.read_namespaced_config_map, name, ns)
            if cm is None or "config.yaml" not in (cm.data or {}):
                raise ReconfigureFailed("error reading MIG config file: ConfigMap %s/%s has no key config.yaml" % (ns, name))
            return migconfig.parse(cm.data["config.yaml"], "ConfigMap %s/%s" % (ns, name))
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

    def gpu_pods_on_node(self):
        """Non-operand pods on the node that requested a GPU and have not finished."""
        found = []
        for pod in self.cache.pods_on(self.node):
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if pod["metadata"].get("namespace") == self.agents.namespace:
                continue
            for container in pod.get("spec", {}).get("containers", []):
                resources = container.get("resources") or {}
                asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                if any(self.agents.is_gpu_resource(k) and str(v) not in ("0", "") for k, v in asked.items()):
                    found.append("%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
                    break
        return found

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
        if not self.wait_for(lambda: not self.operand_pods_on_node(), timing.pod_wait_seconds):
            left = ", ".join(p["metadata"]["name"] for p in self.operand_pods_on_node())
            raise ReconfigureFailed("Timed out waiting for operand pods to be deleted: %s" % left)
        for app in VALIDATOR_APPS:
            self.delete_node_pods(app)
        holders = self.gpu_pods_on_node()
        if holders:
            raise ReconfigureFailed("GPUs on node %s are in use by pods: %s" % (self.node, ", ".join(holders)))
        host = hardware.read_host(state_file)
        busy = [g.index for g in host.gpus if g.index in plan and g.processes]
        if "gpu-held" in faults and not busy:
            busy = sorted(plan)[:1]
        if busy:
            raise ReconfigureFailed("GPU %s: In use by another client (running compute processes)"
                                    % ", ".join(str(i) for i in busy))
        if mode_change:
            self.change_mode(plan, state_file, faults)
        self.log("Applying the selected MIG config to the node")
        if timing.apply_seconds:
            time.sleep(timing.apply_seconds)
        if "slow" in faults:
            time.sleep(timing.slow_seconds)
        if "fail" in faults:
            raise ReconfigureFailed("Error applying MIG configuration: simulated failure (fault 'fail')")
        if "fail-once" in faults and not self.failed_once:
            self.failed_once = True  # a transient error: the next run on this node goes through
            raise ReconfigureFailed("Error applying MIG configuration: simulated transient failure (fault 'fail-once')")
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
        self.log("Restarting validator pod to re-run all validations")
        self.delete_node_pods("nvidia-operator-validator")
        self.restore_operands()
        self.set_state("success")
        self.log("Successfully updated to MIG config: %s" % value)

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
        """A host reboot: node NotReady for the reboot time, pending MIG modes apply, new boot id.

        kwok's node-initialize stage sets Ready=True again at once, so the reboot is also marked by
        annotation REBOOTING_ANNOTATION while it lasts, a new status.nodeInfo.bootID and the
        `Rebooted` node event kubelet emits after a boot-id change.
        """
        self.log("Rebooting node %s" % self.node)
        self.cache.core.patch_node(self.node, {"metadata": {"annotations": {REBOOTING_ANNOTATION: "true"}}})
        self.agents.set_node_ready(self.node, False, "simulated reboot by nvidia-mig-manager")
        summary = hoststate.reboot(state_file)
        time.sleep(self.agents.timing.reboot_seconds)
        boot_id = str(uuid.uuid4())
        self.cache.core.patch_node_status(self.node, {"status": {"nodeInfo": {"bootID": boot_id}}})
        self.agents.node_event(self.node, "Rebooted", "Node %s has been rebooted, boot id: %s (simulated boot %d)"
                               % (self.node, boot_id, summary["boot"]), "Warning")
        self.agents.set_node_ready(self.node, True, "kubelet is posting ready status")
        self.cache.core.patch_node(self.node, {"metadata": {"annotations": {REBOOTING_ANNOTATION: None}}})
