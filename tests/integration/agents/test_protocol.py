"""Protocol tests of the GPU Operator stack on the testbed (real apiserver, kwok nodes, NVIDIA's controller).

Each test makes its own simulated GPU nodes (unique names) on the session's `gpu_cluster`: NVIDIA's chart
from the GPU Operator module installed with mig.strategy=mixed, NVIDIA's controller and the agents process
running. What is checked is what a real cluster shows: node labels and their order of change, node
capacity/allocatable, operand pods, ClusterPolicy status, and the simulated hardware (hoststate.summary,
which reads the same state file the simulated NVML serves).
"""

import contextlib
import urllib.request
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.testbed import operator as real_operator
from tests.testbed import oracle
from tests.testbed.agents.pytest_agents import GPU_CLUSTER_VALUES, nvml_lib_dir
from tests.testbed.gpusim import hoststate

STATE = "nvidia.com/mig.config.state"
CONFIG = "nvidia.com/mig.config"
DP = "nvidia.com/gpu.deploy.device-plugin"
PAUSED = "paused-for-mig-change"
PAUSABLE = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
OPERANDS = ["gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset",
            "nvidia-mig-manager", "nvidia-operator-validator"]


@contextlib.contextmanager
def node_history(testbed, node, project):
    """Every distinct value of project(node) the node goes through, in order, while the block runs."""
    seen = []
    stop = threading.Event()
    core = client.CoreV1Api(testbed.api_client())

    def run():
        w = watch.Watch()
        for event in w.stream(core.list_node, field_selector="metadata.name=%s" % node, timeout_seconds=300):
            value = project(event["object"])
            if not seen or seen[-1] != value:
                seen.append(value)
            if stop.is_set():
                w.stop()
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.5)
    try:
        yield seen
    finally:
        stop.set()
        core.patch_node(node, {"metadata": {"annotations": {"gpufleet.test/poke": str(time.time())}}})
        thread.join(10)


def label_history(testbed, node):
    """Record every (mig.config.state, gpu.deploy.device-plugin) value pair the node goes through."""
    return node_history(testbed, node, lambda obj: ((obj.metadata.labels or {}).get(STATE), (obj.metadata.labels or {}).get(DP)))


def in_order(seen, steps):
    """True when `steps` occur in `seen` in this order (other entries may come between)."""
    position = 0
    for item in seen:
        if position < len(steps) and item == steps[position]:
            position += 1
    return position == len(steps)


def gpu_instances(agents, node, gpu=0):
    return sorted(gi["profile"] for gi in hoststate.summary(agents.state_path(node))["gpus"][gpu]["gpu_instances"])


def mig_modes(agents, node):
    return [(g["mig_mode"]["current"], g["mig_mode"]["pending"]) for g in hoststate.summary(agents.state_path(node))["gpus"]]


def pod_uids(testbed, node, app):
    pods = testbed.core.list_namespaced_pod("gpu-operator", label_selector="app=%s" % app,
                                            field_selector="spec.nodeName=%s" % node).items
    return {p.metadata.uid for p in pods if not p.metadata.deletion_timestamp}


def ready_node(gpu_cluster, add_gpu_node, hint, model="H200", count=2, operands=None, **kwargs):
    """A simulated node that finished the startup protocol: default config applied, operands running."""
    name = add_gpu_node(hint, model, count, **kwargs)
    gpu_cluster.wait_labels(name, {CONFIG: "all-disabled", STATE: "success"}, timeout=90)
    expected = OPERANDS if operands is None else operands
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == expected, 60,
                                 "operand pods %s on %s" % (expected, name))
    return name


@pytest.fixture(scope="module", autouse=True)
def chart_values(gpu_cluster):
    """This module's chart values, re-applied in case tests of other parts changed the release."""
    gpu_cluster.install_chart(GPU_CLUSTER_VALUES)


@pytest.fixture
def strategy(gpu_cluster):
    """Set the ClusterPolicy's mig.strategy for one test; mixed (the session's value) is restored."""
    def set_strategy(value):
        gpu_cluster.patch_policy({"mig": {"strategy": value}})
    yield set_strategy
    set_strategy("mixed")


@pytest.fixture
def with_reboot(gpu_cluster):
    gpu_cluster.patch_policy({"migManager": {"env": [{"name": "WITH_REBOOT", "value": "true"}]}})
    yield
    gpu_cluster.patch_policy({"migManager": {"env": []}})


# -- chart ------------------------------------------------------------------------------------

def test_chart_installs_crd_policy_and_operands(gpu_cluster, add_gpu_node):
    testbed = gpu_cluster.testbed
    add_gpu_node("chart", "H200", 1)  # NVIDIA's controller creates the operands once there is a GPU node
    crd = client.ApiextensionsV1Api(testbed.api_client()).read_custom_resource_definition("clusterpolicies.nvidia.com")
    assert crd.spec.scope == "Cluster"
    policy = gpu_cluster.policy()
    assert policy["spec"]["mig"]["strategy"] == "mixed"
    # v26.7.0's CRD leaves the name the chart renders empty unset (v25.3.4's defaulted it to default-mig-parted-config)
    assert policy["spec"]["migManager"]["config"] == {"default": "all-disabled"}
    apps = client.AppsV1Api(testbed.api_client())
    wanted = {"gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset",
              "nvidia-mig-manager", "nvidia-operator-validator"}
    gpu_cluster.testbed.wait_for(
        lambda: wanted <= {d.metadata.name for d in apps.list_namespaced_daemon_set("gpu-operator").items}, 90,
        "operand DaemonSets %s" % sorted(wanted))
    daemonsets = apps.list_namespaced_daemon_set("gpu-operator").items
    names = sorted(d.metadata.name for d in daemonsets)
    # driver and toolkit are disabled in the session's values, so their DaemonSets must not exist
    assert "nvidia-driver-daemonset" not in names and "nvidia-container-toolkit-daemonset" not in names
    # Created by NVIDIA's controller, not by the chart or the repo's code: owned by the ClusterPolicy.
    for ds in daemonsets:
        owners = [(o.kind, o.name, o.uid, o.controller) for o in ds.metadata.owner_references or []]
        assert owners == [("ClusterPolicy", "cluster-policy", policy["metadata"]["uid"], True)], ds.metadata.name
        assert (ds.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "gpu-operator", ds.metadata.name
        assert "nvidia.com/last-applied-hash" in (ds.metadata.annotations or {}), ds.metadata.name
        assert "meta.helm.sh/release-name" not in (ds.metadata.annotations or {}), ds.metadata.name  # not Helm's
    # The controller's own default MIG config (assets/state-mig-manager/0400_configmap.yaml)
    static = testbed.wait_for(lambda: testbed.core.read_namespaced_config_map("default-mig-parted-config", "gpu-operator"),
                              60, "default-mig-parted-config")
    assert "all-balanced:" in static.data["config.yaml"]
    assert static.metadata.owner_references[0].kind == "ClusterPolicy"
    with pytest.raises(ApiException) as err:  # status.state is an enum in the CRD
        client.CustomObjectsApi(testbed.api_client()).patch_cluster_custom_object_status(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"status": {"state": "bogus"}})
    assert err.value.status == 422


# -- operator labelling, GFD, device plugin ----------------------------------------------------

def test_new_node_gets_operator_labels_gfd_labels_and_gpus(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "labels", "H200", 2)
    labels = gpu_cluster.labels(name)
    for key in ("gpu.present", "gpu.deploy.device-plugin", "gpu.deploy.gpu-feature-discovery",
                "gpu.deploy.dcgm-exporter", "gpu.deploy.operator-validator", "gpu.deploy.mig-manager", "mig.capable"):
        assert labels["nvidia.com/" + key] == "true", key
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.memory"] == "143771"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/cuda.driver-version.full"] == hoststate.DEFAULT_DRIVER
    # NVIDIA's device plugin registers with kubelet on its own schedule, after GFD may have labelled the node.
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "2", 60,
                                 "allocatable nvidia.com/gpu=2 on %s" % name)
    assert gpu_cluster.capacity(name)["nvidia.com/gpu"] == "2"
    # MIG Manager ran once at start-up: config already applied, nothing paused
    assert "MIG configuration already applied" in gpu_cluster.mig_manager_log(name)
    generated = gpu_cluster.testbed.core.read_namespaced_config_map("%s-mig-config" % name, "gpu-operator")
    assert generated.data["config.yaml"].startswith("# DO NOT EDIT: Auto-generated MIG configuration from GPU hardware.")
    assert generated.metadata.owner_references[0].kind == "Pod"
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.policy().get("status", {}).get("state") == "ready", 60,
                                 "ClusterPolicy ready")


def test_gfd_labels_are_nvidias_gfd_output(gpu_cluster, add_gpu_node):
    """The agents label the node with what NVIDIA's GFD v0.20.0 binary writes for its simulated host (pytest_agents
    passes --gfd-binary); only gpu.mode differs (GFD reads it from sysfs, which the simulated host lacks)."""
    name = ready_node(gpu_cluster, add_gpu_node, "nvgfd", "A100-SXM4-40GB", 2)
    expected = oracle.run_gfd(gpu_cluster.state_path(name), nvml_lib_dir(), "mixed")
    expected["nvidia.com/gpu.mode"] = "compute"
    labels = gpu_cluster.labels(name)
    assert {k: labels.get(k) for k in expected} == expected
    assert "nvidia.com/gpu.machine" in labels  # written by NVIDIA's binary only, not by the re-implementation


def test_no_config_label_and_no_default_means_no_sharing(gpu_cluster, add_gpu_node):
    """NVIDIA's config manager under the operator (FALLBACK_STRATEGIES=empty): without the node label and without
    devicePlugin.config.default a node gets no config, even when a key is named `default`; the label picks one."""
    core = gpu_cluster.testbed.core
    config = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="ts-default-key"), data={"default": config}))
    try:
        name = ready_node(gpu_cluster, add_gpu_node, "nodefault", "H100-80GB-HBM3", 2)
        gpu_cluster.patch_policy({"devicePlugin": {"config": {"name": "ts-default-key", "default": ""}}})
        time.sleep(3)  # a few rescans: nothing may change
        labels = gpu_cluster.labels(name)
        assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == ("NVIDIA-H100-80GB-HBM3", "1")
        assert gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "2"
        core.patch_node(name, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "default"}}})
        gpu_cluster.wait_labels(name, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                                       "nvidia.com/gpu.replicas": "2"}, timeout=30)
        gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "4", 90, "2 GPUs x 2")
    finally:
        gpu_cluster.patch_policy({"devicePlugin": {"config": None}})
        core.delete_namespaced_config_map("ts-default-key", "gpu-operator")


def test_existing_deploy_label_values_are_honoured(gpu_cluster, add_gpu_node):
    without_exporter = [o for o in OPERANDS if o != "nvidia-dcgm-exporter"]
    name = ready_node(gpu_cluster, add_gpu_node, "honour", labels={"nvidia.com/gpu.deploy.dcgm-exporter": "false"},
                      operands=without_exporter)
    assert gpu_cluster.labels(name)["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
    # a MIG change keeps a "false" deploy label "false" (MP reconfigure.go maybeSetPaused/maybeSetTrue)
    gpu_cluster.label(name, CONFIG, "all-3g.71gb")
    labels = gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-3g.71gb.count": "4"},
                                     timeout=90)
    assert labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
    # success comes as the deploy labels go back to "true" (reference §3.6 step 15); the DaemonSets then
    # recreate the paused operands, all but the exporter
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == without_exporter, 60,
                                 "operands %s back on %s" % (without_exporter, name))
    assert gpu_cluster.labels(name)["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"


def test_policy_not_ready_names_the_operand_state(gpu_cluster, add_gpu_node):
    """An operand pod that cannot run (node full) makes NVIDIA's controller set the ClusterPolicy notReady,
    naming the operand states that are not ready (controllers/clusterpolicy_controller.go)."""
    add_gpu_node("full", "H200", 1, allocatable={"pods": "2"})

    def not_ready():
        policy = gpu_cluster.policy()
        conditions = {c["type"]: c for c in policy.get("status", {}).get("conditions") or []}
        error = conditions.get("Error", {})
        if policy.get("status", {}).get("state") == "notReady" and error.get("reason") == "OperandNotReady":
            return conditions
        return None
    conditions = gpu_cluster.testbed.wait_for(not_ready, 90, "ClusterPolicy notReady")
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Error"]["status"] == "True"
    message = conditions["Error"]["message"]
    prefix = "ClusterPolicy is not ready; states not ready: ["  # v26.7.0's wording (v25.3.4: "not ready, states")
    assert message.startswith(prefix) and message.endswith("]"), message
    # The names are NVIDIA's state names, its asset directories (state-device-plugin, gpu-feature-discovery, ...);
    # which operands miss the full node's two pod slots varies from run to run.
    named = message[len(prefix):-1].split()
    states = {p.name for p in (real_operator.cache_dir() / "opt" / "gpu-operator").iterdir() if p.is_dir()}
    assert named and set(named) <= states, (named, sorted(states))


def test_strategy_switch_changes_labels_and_resources(gpu_cluster, add_gpu_node, strategy):
    name = ready_node(gpu_cluster, add_gpu_node, "switch", "H200", 2)
    gpu_cluster.label(name, CONFIG, "all-1g.18gb")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-1g.18gb.count": "14"}, timeout=90)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/mig-1g.18gb") == "14", 90,
                                 "mixed resources")
    strategy("single")
    labels = gpu_cluster.wait_labels(name, {"nvidia.com/mig.strategy": "single",
                                            "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb"}, timeout=30)
    assert labels["nvidia.com/gpu.count"] == "14"
    assert not any(k.startswith("nvidia.com/mig-1g.18gb.") for k in labels)

    def single_resources():
        alloc = gpu_cluster.allocatable(name)
        return alloc.get("nvidia.com/gpu") == "14" and alloc.get("nvidia.com/mig-1g.18gb") == "0"
    # NVIDIA's device plugin takes the strategy from its pod's env: it follows once NVIDIA's controller has rolled the
    # DaemonSet and the new pod runs (1.5 s on an idle machine, more under a parallel suite).
    gpu_cluster.testbed.wait_for(single_resources, 90, "single resources")
    strategy("mixed")
    gpu_cluster.wait_labels(name, {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.18gb.count": "14"}, timeout=30)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/mig-1g.18gb") == "14", 90,
                                 "mixed resources again")


def test_time_slicing_config_from_cluster_policy(gpu_cluster, add_gpu_node):
    """devicePlugin.config names a ConfigMap; its `any` config shares each GPU 4 ways (§9, docs example)."""
    core = gpu_cluster.testbed.core
    config = "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n" \
             "    - name: nvidia.com/gpu\n      replicas: 4\n"
    core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="time-slicing-config-all"), data={"any": config}))
    try:
        name = ready_node(gpu_cluster, add_gpu_node, "slicing", "H100-80GB-HBM3", 8)
        gpu_cluster.patch_policy({"devicePlugin": {"config": {"name": "time-slicing-config-all", "default": "any"}}})
        labels = gpu_cluster.wait_labels(name, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}, timeout=30)
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == ("4", "time-slicing")
        gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "32", 90,
                                     "8 GPUs x 4 replicas")
    finally:
        gpu_cluster.patch_policy({"devicePlugin": {"config": None}})
        core.delete_namespaced_config_map("time-slicing-config-all", "gpu-operator")
    gpu_cluster.wait_labels(name, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": "1"},
                            timeout=30)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "8", 90, "8 GPUs")


def test_deploy_operands_false_removes_operands(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "operands-off")
    gpu_cluster.label(name, "nvidia.com/gpu.deploy.operands", "false")
    gpu_cluster.wait_labels(name, {DP: None, "nvidia.com/gpu.deploy.mig-manager": None})
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == [], 60, "no operand pods")
    gpu_cluster.label(name, "nvidia.com/gpu.deploy.operands", None)
    gpu_cluster.wait_labels(name, {DP: "true", "nvidia.com/gpu.deploy.mig-manager": "true"})
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == OPERANDS, 60, "operands back")


def test_gfd_labels_go_stale_while_gfd_is_paused(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "gfd-paused")
    gpu_cluster.label(name, CONFIG, "all-7g.141gb")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-7g.141gb.count": "2"}, timeout=90)
    gpu_cluster.set_faults(name, ["wedge-pending"])
    gpu_cluster.label(name, CONFIG, "all-balanced")
    gpu_cluster.wait_labels(name, {STATE: "pending", DP: PAUSED})
    gpu_cluster.testbed.wait_for(lambda: "gpu-feature-discovery" not in gpu_cluster.operand_pods(name), 30, "GFD gone")
    hoststate.reboot(gpu_cluster.state_path(name))  # MIG devices do not survive a reboot
    time.sleep(3)  # > the agents' rescan interval: a running GFD would have relabelled by now
    assert gpu_cluster.labels(name)["nvidia.com/mig-7g.141gb.count"] == "2"
    gpu_cluster.set_faults(name, [])
    gpu_cluster.label(name, CONFIG, "all-7g.141gb")  # re-apply; GFD runs again and sees the hardware
    gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-7g.141gb.count": "2"}, timeout=90)
    assert len(gpu_instances(gpu_cluster, name, 0)) == 1


# -- MIG Manager: success paths ---------------------------------------------------------------

def test_mixed_all_balanced_full_sequence(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "balanced", "H200", 2)
    validator = pod_uids(gpu_cluster.testbed, name, "nvidia-operator-validator")
    with label_history(gpu_cluster.testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-balanced")
        labels = gpu_cluster.wait_labels(name, {STATE: "success", DP: "true",
                                                "nvidia.com/mig-1g.18gb.count": "4"}, timeout=90)
    # pending, operands paused, operands restored, then success (MP reconfigure.go order)
    assert in_order(seen, [("pending", "true"), ("pending", PAUSED), ("pending", "true"), ("success", "true")]), seen
    assert labels["nvidia.com/mig-2g.35gb.count"] == "2" and labels["nvidia.com/mig-3g.71gb.count"] == "2"
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-MIG-1g.18gb"
    assert gpu_instances(gpu_cluster, name, 0) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
    assert mig_modes(gpu_cluster, name) == [(1, 1), (1, 1)]

    # NVIDIA's device plugin serves (and registers) each MIG resource on its own under the mixed strategy
    wanted = {"nvidia.com/mig-1g.18gb": "4", "nvidia.com/mig-2g.35gb": "2", "nvidia.com/mig-3g.71gb": "2",
              "nvidia.com/gpu": "0"}  # no full GPU left: kubelet keeps the resource at 0

    def advertised():
        alloc = gpu_cluster.allocatable(name)
        return alloc if all(alloc.get(k) == v for k, v in wanted.items()) else None
    gpu_cluster.testbed.wait_for(advertised, 30, "MIG resources advertised: %s" % wanted)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == OPERANDS, 60, "operands back")
    assert pod_uids(gpu_cluster.testbed, name, "nvidia-operator-validator").isdisjoint(validator)


def test_custom_config_from_cluster_policy(gpu_cluster, add_gpu_node):
    """spec.migManager.config.name selects a ConfigMap (key config.yaml); its names replace the generated ones."""
    core = gpu_cluster.testbed.core
    custom = ("version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"
              "  inference:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {3g.71gb: 1, 1g.18gb: 3}\n"
              "  - devices: [1]\n    mig-enabled: false\n"
              "  wrong-model:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: 7}\n")
    core.create_namespaced_config_map("gpu-operator", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="custom-mig-config"), data={"config.yaml": custom}))
    try:
        name = ready_node(gpu_cluster, add_gpu_node, "custom", "H200", 2)
        gpu_cluster.patch_policy({"migManager": {"config": {"name": "custom-mig-config"}}})
        gpu_cluster.label(name, CONFIG, "inference")
        gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-3g.71gb.count": "1",
                                       "nvidia.com/mig-1g.18gb.count": "3"}, timeout=90)
        assert gpu_instances(gpu_cluster, name, 0) == ["1g.18gb", "1g.18gb", "1g.18gb", "3g.71gb"]
        assert mig_modes(gpu_cluster, name) == [(1, 1), (0, 0)]
        gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "1", 90,
                                     "GPU 1 still a full GPU")
        gpu_cluster.label(name, CONFIG, "all-balanced")  # generated name, absent from the custom config
        gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=60)
        assert "selected mig-config not present: all-balanced" in gpu_cluster.mig_manager_log(name)
        gpu_cluster.label(name, CONFIG, "wrong-model")  # an H100 profile on an H200: fails naming GPU and profile
        gpu_cluster.wait_labels(name, {STATE: "failed", CONFIG: "wrong-model", DP: "true"}, timeout=60)
        gpu_cluster.testbed.wait_for(
            lambda: "GPU 0 (NVIDIA H200): MIG profile 1g.10gb is not supported" in gpu_cluster.mig_manager_log(name),
            10, "failure naming GPU and profile")
    finally:
        gpu_cluster.patch_policy({"migManager": {"config": {"name": ""}}})
        core.delete_namespaced_config_map("custom-mig-config", "gpu-operator")


def test_a100_order_dependent_layout_is_found(gpu_cluster, add_gpu_node):
    """mig-parted tries creation orders until one fits (A100: 3g.20gb must come first)."""
    name = ready_node(gpu_cluster, add_gpu_node, "a100", "A100-SXM4-40GB", 1)
    gpu_cluster.label(name, CONFIG, "all-balanced")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-3g.20gb.count": "1",
                                   "nvidia.com/mig-1g.5gb.count": "2"}, timeout=90)
    assert gpu_instances(gpu_cluster, name) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]


def test_already_applied_succeeds_without_pausing(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "applied")
    gpu_cluster.label(name, CONFIG, "all-1g.18gb")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-1g.18gb.count": "14"}, timeout=90)
    # The DaemonSet controller brings the device-plugin pod back after the first run's pause; wait for it.
    gpu_cluster.testbed.wait_for(lambda: pod_uids(gpu_cluster.testbed, name, "nvidia-device-plugin-daemonset"), 60,
                                 "the device-plugin pod back on %s" % name)
    plugin = pod_uids(gpu_cluster.testbed, name, "nvidia-device-plugin-daemonset")
    assert plugin
    gpu_cluster.label(name, STATE, "unknown")  # mark, so the next success is visibly new
    with label_history(gpu_cluster.testbed, name) as seen:
        for pod in gpu_cluster.testbed.core.list_namespaced_pod(
                "gpu-operator", label_selector="app=nvidia-mig-manager", field_selector="spec.nodeName=%s" % name).items:
            gpu_cluster.testbed.core.delete_namespaced_pod(pod.metadata.name, "gpu-operator")
        gpu_cluster.wait_state(name, "success", timeout=60)
    assert all(pair[1] == "true" for pair in seen), seen  # operands never paused
    assert pod_uids(gpu_cluster.testbed, name, "nvidia-device-plugin-daemonset") == plugin


def test_no_action_without_label_change(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "nochange")
    gpu_cluster.label(name, CONFIG, "no-such-config")
    gpu_cluster.wait_state(name, "failed")
    gpu_cluster.label(name, CONFIG, "no-such-config")  # same value: no new run
    gpu_cluster.label(name, "gpufleet.test/other", "x")
    time.sleep(3)
    assert gpu_cluster.mig_manager_log(name).count("Updating to MIG config: no-such-config") == 1


def test_single_strategy_uniform_and_invalid(gpu_cluster, add_gpu_node, strategy):
    strategy("single")
    name = ready_node(gpu_cluster, add_gpu_node, "single", "H200", 2)
    gpu_cluster.label(name, CONFIG, "all-1g.18gb")
    labels = gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb"},
                                     timeout=90)
    assert labels["nvidia.com/gpu.count"] == "14" and labels["nvidia.com/mig.strategy"] == "single"
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "14", 90, "14 GPUs")
    gpu_cluster.label(name, CONFIG, "all-balanced")  # two profiles: invalid under single
    labels = gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/gpu.product": "NVIDIA-H200-MIG-INVALID"},
                                     timeout=90)
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("0", "0")
    # The device plugin re-registers for the new layout: nvidia.com/gpu at 0 and no MIG resource, once it has. A MIG
    # resource registered earlier (the node's first plugin pod may predate the DaemonSet's switch to single) stays
    # at 0, as kubelet keeps a removed device plugin resource (pkg/kubelet/nodestatus setters.go).
    gpu_cluster.testbed.wait_for(
        lambda: gpu_cluster.allocatable(name).get("nvidia.com/gpu") == "0"
        and not any(k.startswith("nvidia.com/mig-") and v != "0" for k, v in gpu_cluster.allocatable(name).items()),
        90, "nothing advertised")


# -- MIG Manager: failures ------------------------------------------------------------------

def test_unknown_config_fails_before_touching_anything(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "unknown")
    with label_history(gpu_cluster.testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-1g.10gb")  # an H100 profile; not generated for an H200
        gpu_cluster.wait_state(name, "failed")
    assert all(state != "pending" and dp == "true" for state, dp in seen), seen
    assert "selected mig-config not present: all-1g.10gb" in gpu_cluster.mig_manager_log(name)
    assert mig_modes(gpu_cluster, name) == [(0, 0), (0, 0)]


def test_gpu_pod_on_node_is_not_refused_by_mig_manager(gpu_cluster, add_gpu_node, testbed_namespace):
    """MIG Manager does not look for user GPU pods (mig-parted v0.15 reconfigure.go): a pod that holds no GPU
    process does not stop the change - draining is the caller's job; a busy GPU is what fails (next test)."""
    name = ready_node(gpu_cluster, add_gpu_node, "held-pod")
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="cuda-job"), spec=client.V1PodSpec(
        node_name=name, containers=[client.V1Container(name="c", image="cuda", resources=client.V1ResourceRequirements(
            limits={"nvidia.com/gpu": "1"}))]))
    gpu_cluster.testbed.core.create_namespaced_pod(testbed_namespace, pod)
    gpu_cluster.label(name, CONFIG, "all-1g.18gb")
    gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-1g.18gb.count": "14"}, timeout=90)
    assert "in use" not in gpu_cluster.mig_manager_log(name)
    assert mig_modes(gpu_cluster, name) == [(1, 1), (1, 1)]
    assert not gpu_cluster.testbed.core.read_namespaced_pod("cuda-job", testbed_namespace).metadata.deletion_timestamp


def test_gpu_process_holding_gpu_fails(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "held-proc")
    hoststate.add_process(gpu_cluster.state_path(name), 1, pid=4242, used_mb=1024)
    gpu_cluster.label(name, CONFIG, "all-1g.18gb")
    gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=90)
    assert "GPU 1: In use by another client" in gpu_cluster.mig_manager_log(name)


@pytest.mark.parametrize("fault,message", [("fail", "ERROR_UNKNOWN"), ("gpu-held", "In use by another client")])
def test_fault_fails_after_pause_and_restores(gpu_cluster, add_gpu_node, fault, message):
    name = ready_node(gpu_cluster, add_gpu_node, fault, faults=[fault])
    with label_history(gpu_cluster.testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-balanced")
        gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=90)
    assert ("pending", "paused-for-mig-change") in seen, seen
    assert message in gpu_cluster.mig_manager_log(name)


def test_wedge_pending_leaves_operands_paused(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "wedge", faults=["wedge-pending"])
    gpu_cluster.label(name, CONFIG, "all-balanced")
    gpu_cluster.wait_labels(name, {STATE: "pending", DP: "paused-for-mig-change"})
    time.sleep(3)
    assert gpu_cluster.labels(name)[STATE] == "pending"
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == ["nvidia-mig-manager",
                                                                            "nvidia-operator-validator"],
                                 60, "paused operand pods gone")
    # un-wedge as users do: fault cleared, label toggled away and back
    gpu_cluster.set_faults(name, [])
    gpu_cluster.label(name, CONFIG, "all-disabled")
    gpu_cluster.wait_labels(name, {STATE: "success", DP: "true"}, timeout=90)
    gpu_cluster.label(name, CONFIG, "all-balanced")
    gpu_cluster.wait_labels(name, {STATE: "success", "nvidia.com/mig-3g.71gb.count": "2"}, timeout=90)


def test_slow_apply_shows_the_pause_protocol(gpu_cluster, add_gpu_node):
    """Operand DaemonSet pods leave the node while paused and come back afterwards."""
    name = ready_node(gpu_cluster, add_gpu_node, "slow", faults=["slow"])
    gpu_cluster.label(name, CONFIG, "all-3g.71gb")
    gpu_cluster.wait_labels(name, {STATE: "pending", DP: "paused-for-mig-change"})

    gpu_cluster.testbed.wait_for(
        lambda: gpu_cluster.operand_pods(name) == ["nvidia-mig-manager", "nvidia-operator-validator"],
        30, "paused operand pods (device plugin, GFD, dcgm-exporter) gone from the node")
    assert gpu_cluster.labels(name)[STATE] == "pending"  # still applying (fault slow)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name)["nvidia.com/gpu"] == "0", 10,
                                 "nothing allocatable while the device plugin is gone")
    gpu_cluster.wait_labels(name, {STATE: "success", DP: "true"}, timeout=60)
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.operand_pods(name) == OPERANDS, 60, "operands back")
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.allocatable(name).get("nvidia.com/mig-3g.71gb") == "4", 90,
                                 "3g.71gb advertised")


# -- mode change needing a reset or a reboot ---------------------------------------------------

def test_reset_unsupported_without_with_reboot_fails(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "noreset", "A100-SXM4-40GB", 1, faults=["reset-unsupported"])
    gpu_cluster.label(name, CONFIG, "all-1g.5gb")
    gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=90)
    assert "WITH_REBOOT is not set" in gpu_cluster.mig_manager_log(name)


def test_with_reboot_reboots_and_finishes(gpu_cluster, add_gpu_node, with_reboot):
    name = ready_node(gpu_cluster, add_gpu_node, "reboot", "A100-SXM4-40GB", 1, sim_faults=["reset_unsupported"])
    testbed = gpu_cluster.testbed
    boots = hoststate.summary(gpu_cluster.state_path(name))["boot"]
    boot_id = testbed.core.read_node(name).status.node_info.boot_id
    with label_history(testbed, name) as seen:
        gpu_cluster.label(name, CONFIG, "all-1g.5gb")
        gpu_cluster.wait_state(name, "rebooting", timeout=60)
        testbed.wait_for(lambda: "gpusim.gpufleet.io/rebooting" in (testbed.core.read_node(name).metadata.annotations or {}),
                         10, "rebooting annotation")
        gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-1g.5gb.count": "7"}, timeout=90)
    assert in_order(seen, [("pending", PAUSED), ("rebooting", PAUSED), ("pending", PAUSED), ("success", "true")]), seen
    assert hoststate.summary(gpu_cluster.state_path(name))["boot"] == boots + 1
    assert mig_modes(gpu_cluster, name) == [(1, 1)]
    node = testbed.core.read_node(name)
    assert node.status.node_info.boot_id != boot_id
    assert "gpusim.gpufleet.io/rebooting" not in (node.metadata.annotations or {})
    events = testbed.core.list_namespaced_event("default", field_selector="involvedObject.name=%s,reason=Rebooted" % name)
    assert len(events.items) == 1


def test_mode_change_after_reboot_not_taking_effect_fails(gpu_cluster, add_gpu_node):
    """State rebooting + mode still not applied -> failed (MP: "did not take effect after rebooting")."""
    name = ready_node(gpu_cluster, add_gpu_node, "reboot-noeffect", "A100-SXM4-40GB", 1)
    gpu_cluster.label(name, STATE, "rebooting")
    gpu_cluster.label(name, CONFIG, "all-1g.5gb")
    gpu_cluster.wait_labels(name, {STATE: "failed", DP: "true"}, timeout=60)
    assert "MIG mode change did not take effect after rebooting" in gpu_cluster.mig_manager_log(name)


# -- dcgm-exporter stand-in ---------------------------------------------------------------------

def test_metrics_endpoint_per_node_and_slice(gpu_cluster, add_gpu_node):
    name = ready_node(gpu_cluster, add_gpu_node, "metrics", "H200", 2)
    gpu_cluster.label(name, CONFIG, "all-3g.71gb")
    gpu_cluster.wait_labels(name, {STATE: "success", DP: "true", "nvidia.com/mig-3g.71gb.count": "4"}, timeout=90)
    url = gpu_cluster.testbed.wait_for(
        lambda: (gpu_cluster.testbed.core.read_node(name).metadata.annotations or {}).get("gpusim.gpufleet.io/metrics-url"),
        30, "metrics URL annotation")
    gi = hoststate.summary(gpu_cluster.state_path(name))["gpus"][0]["gpu_instances"][0]
    (gpu_cluster.hosts_dir / ("%s.metrics.json" % name)).write_text(
        '{"0/%d": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.75, "DCGM_FI_DEV_FB_USED": 1000}}' % gi["id"])
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    assert "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge" in text
    assert "DCGM_FI_DEV_GPU_UTIL{" not in text  # not reported for MIG-enabled GPUs
    wanted = 'GPU_I_PROFILE="3g.71gb",GPU_I_ID="%d"} 0.75' % gi["id"]
    assert any(line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\"") and line.endswith(wanted)
               for line in text.splitlines()), text
    assert 'DCGM_FI_DEV_FB_FREE{gpu="0"' in text and "%s\"} %d" % (gi["id"], 71424 - 1000) in text
    assert 'modelName="NVIDIA H200",Hostname="%s"' % name in text


def test_policy_ready_ignores_nodes_operands_cannot_tolerate(gpu_cluster, add_gpu_node):
    """A taint the operand DaemonSets do not tolerate keeps their pods off the node, as the DaemonSet
    controller does; the ClusterPolicy stays ready. nvidia.com/gpu:NoSchedule is tolerated (§7)."""
    tainted = add_gpu_node("tainted", "A30", 1, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    gpu_tainted = ready_node(gpu_cluster, add_gpu_node, "gpu-taint", "A30", 1,
                             taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    gpu_cluster.wait_labels(tainted, {"nvidia.com/gpu.present": "true", DP: "true"})
    time.sleep(2)
    assert gpu_cluster.operand_pods(tainted) == []
    assert gpu_cluster.operand_pods(gpu_tainted) == OPERANDS
    gpu_cluster.testbed.wait_for(lambda: gpu_cluster.policy().get("status", {}).get("state") == "ready", 30,
                                 "ClusterPolicy ready")


# -- who writes what ----------------------------------------------------------------------------

def label_writers(testbed, node):
    """{label: {field managers}} from the Node's managedFields (the API server records who set each key)."""
    writers = {}
    for entry in testbed.core.read_node(node).metadata.managed_fields or []:
        labels = ((entry.fields_v1 or {}).get("f:metadata") or {}).get("f:labels") or {}
        for key in labels:
            writers.setdefault(key[2:], set()).add(entry.manager)
    return writers


def test_operator_owned_labels_are_written_by_nvidias_controller_only(gpu_cluster, add_gpu_node):
    """gpu.present, the gpu.deploy.* defaults and the default mig.config come from NVIDIA's controller;
    no repo code (agents, fixtures) writes them: the API server names the controller as their only writer."""
    name = ready_node(gpu_cluster, add_gpu_node, "owners", "H200", 1)
    labels = gpu_cluster.labels(name)
    writers = label_writers(gpu_cluster.testbed, name)
    # gpu.deploy.nvsm is not the controller's: MIG Manager's setState writes it ("true") with the other pausable
    # labels even where the node had none (mig-parted v0.15 reconfigure.go maybeSetTrue)
    nvsm = "nvidia.com/gpu.deploy.nvsm"
    owned = ["nvidia.com/gpu.present", CONFIG] + sorted(k for k in labels if k.startswith("nvidia.com/gpu.deploy.")
                                                        and k != nvsm)
    assert len(owned) >= 8, labels
    for key in owned:
        assert writers.get(key) == {"gpu-operator"}, (key, writers.get(key))
    assert labels[nvsm] == "true" and "gpu-operator" not in writers[nvsm]
    # and GFD's labels come from the simulated GFD (the agents process), not from the controller
    assert "gpu-operator" not in writers["nvidia.com/gpu.product"]
