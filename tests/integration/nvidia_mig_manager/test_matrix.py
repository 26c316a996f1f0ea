"""Every MIG-capable GPU model by every config NVIDIA lists for it, rolled out by mig-reconfigure.yml with NVIDIA's
MIG Manager, device plugin and GFD, under both MIG strategies.

The cases are read at test time from NVIDIA's own file and the simulated catalog: GPU Operator v26.7.0's default MIG
config (assets/state-mig-manager/0400_configmap.yaml, the ConfigMap default-mig-parted-config; test data beside the
checkout) names GPUs by PCI device id in the device-filter of its model-specific entries, and a (model, config) pair is
a config with an entry whose device-filter names the model's PCI device id in tests/testbed/gpusim/catalog.json (the
first such entry, as mig-parted selects it). Configs without a device-filter (all-1g.5gb, all-3g.40gb, ...) name no
model and are not pairs here. With v26.7.0's file and the catalog: 41 pairs on 27 models (every MIG-capable model of
the catalog; the T4 is not MIG-capable), each under both strategies, 82 (model, config, strategy) cases: 14 rolled and
27 refused under single, 41 rolled under mixed.

One simulated node per model, one GPU each, on the cluster of conftest.py (NVIDIA's v26.7.0 chart and controller;
per node NVIDIA's nvidia-mig-manager v0.15.0 applying the change, nvidia-device-plugin v0.20.0 advertising the node's
resources and GFD v0.20.0 labelling it). Each mig-reconfigure.yml run rolls every model's node at once: one
mig_reconfigure_profiles entry per config (an inventory group of the nodes it is for), no canary, all nodes in one
step. Under single (first, the nodes at the operator's default all-disabled) one refused run and one rollout, then under
mixed two rollouts (the most configs NVIDIA lists for one model), and a last run takes every node back to NVIDIA's
all-disabled (27 more cases, one per model): five playbook runs in all.

Under mig.strategy=single NVIDIA's device plugin advertises a node's MIG devices as nvidia.com/gpu only when they all
have one profile (NVIDIA/k8s-device-plugin v0.20.0 internal/rm/device_map.go, requireUniformMIGDevices), and GFD labels
a node with several -MIG-INVALID (internal/lm/mig-strategy.go), so a config that mixes profiles (all-balanced) would
leave the node advertising nothing. The product
refuses such a config before any change: the plan names the node, the config and its profiles ("mig-strategy=single
needs one MIG profile per node") and the role stops at "Stop before any change when a plan is invalid". Those cases
assert that refusal: the playbook fails, no reconfigure step runs, and the node keeps its config, its MIG mode, its GPU
instances and its schedulability. Every other case asserts the rollout's verification of the node and checks it
against NVIDIA's programs: row result reconfigured with the hardware verified, nvidia.com/mig.config.state=success,
the GPU instances of NVIDIA's entry on the simulated hardware, MIG Manager's own success line, the allocatable NVIDIA's
device plugin registered with the node's kubelet endpoint, and GFD's labels (under single the product label: GFD's
label of the whole GPU with -MIG-<profile>, which the plan expects too). The run back to all-disabled checks the whole
GPU's product label the same way for every model: GFD makes it from the NVML name (NVIDIA H100 PCIe), which is not
the catalog's key (H100-PCIe).
"""

import concurrent.futures
import re
from dataclasses import dataclass, field

import pytest

from tests.integration.agents.test_agent_logic import nvidia_static_configs
from tests.integration.nvidia_mig_manager.conftest import MIG_STRATEGY, host_environment, set_strategy
from tests.integration.agents.test_protocol import PAUSED, node_history
from tests.integration.nvidia_mig_manager.test_label import gpu_instances, ignore_404, mig_modes
from tests.integration.reconfigure.conftest import PLAYBOOK, Runner, apply_automation_rbac, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rollout_vars, rows_of, \
    wait_advertised
from tests.testbed.gpusim import hoststate
from tests.testbed.pytest_cluster import unique_name

PRODUCT = "nvidia.com/gpu.product"
DISABLED = "all-disabled"  # NVIDIA's entry for every GPU with MIG off; also the operator's default for a new node
REFUSAL_TASK = "Stop before any change when a plan is invalid"


def listed_configs(configs, pci_id):
    """{config: mig-devices} of NVIDIA's configs whose entry names ``pci_id`` in its device-filter (the first one)."""
    out = {}
    for name, entries in configs.items():
        for entry in entries:
            value = entry.get("device-filter")
            if pci_id in ([value] if isinstance(value, str) else value or []):
                out[name] = dict(entry["mig-devices"])
                break
    return out


CONFIGS = nvidia_static_configs()
CATALOG = hoststate.catalog()["models"]
LISTED = {model: listed_configs(CONFIGS, entry["pci_device_id"])
          for model, entry in sorted(CATALOG.items()) if entry["mig_capable"]}
MODELS = [model for model, configs in LISTED.items() if configs]
MIG_MODELS = sorted(LISTED)
STRATEGIES = ("single", "mixed")


def one_profile(devices):
    return len([p for p, n in devices.items() if n]) == 1


def served(strategy, devices):
    """Whether NVIDIA's device plugin can advertise the layout under ``strategy`` (single: one profile per node)."""
    return strategy != "single" or one_profile(devices)


CASES = [(model, config, strategy) for strategy in STRATEGIES for model in MODELS for config in LISTED[model]]
ROLLED = [case for case in CASES if served(case[2], LISTED[case[0]][case[1]])]
REFUSED = [case for case in CASES if case not in ROLLED]


def case_ids(cases):
    return ["-".join(case) for case in cases]


def advertised(strategy, devices):
    """GPU resources of a one-GPU node with ``devices`` on its GPU (None: MIG disabled), as NVIDIA's device plugin
    names them: the whole GPU; under single every MIG device as nvidia.com/gpu; under mixed one resource per profile."""
    if devices is None:
        return {"nvidia.com/gpu": "1"}
    if strategy == "single":
        return {"nvidia.com/gpu": str(sum(devices.values()))} if one_profile(devices) else {}
    return {"nvidia.com/mig-%s" % p: str(n) for p, n in devices.items() if n}


def layout(devices):
    return sorted(p for p, n in devices.items() for _index in range(n))


@dataclass
class Matrix:
    """The nodes (model -> node name), GFD's product label of each model's whole GPU, per case what was seen, and per
    model what was seen after the run back to all-disabled."""
    nodes: dict = field(default_factory=dict)
    whole_product: dict = field(default_factory=dict)
    outcomes: dict = field(default_factory=dict)
    disabled: dict = field(default_factory=dict)


def snapshot(agents, name):
    return {"view": node_view(agents.testbed, name), "instances": gpu_instances(agents, name),
            "modes": mig_modes(agents, name)}


def log_marks(agents, names):
    return {name: (len(agents.mig_manager_log(name)), len(agents.device_plugin_log(name))) for name in names}


def run(runner, agents, targets):
    """mig-reconfigure.yml on the nodes of ``targets`` (node -> config), every node in one step."""
    groups = {}
    for name, config in sorted(targets.items()):
        groups.setdefault("matrix_" + re.sub(r"\W", "_", config), []).append(name)
    profiles = [{"group": group, "profile": targets[names[0]]} for group, names in sorted(groups.items())]
    extra = rollout_vars(unique_name("lock"), mig_reconfigure_profiles=profiles, mig_reconfigure_canary=False,
                         mig_reconfigure_max_unavailable="100%", mig_reconfigure_apply_timeout=300,
                         mig_reconfigure_verify_timeout=300)
    return runner.playbook(PLAYBOOK, sorted(targets), extra, host_vars=host_environment(agents, targets),
                           groups=groups, timeout=900)


def rounds(configs, current):
    """``configs`` (model -> configs to roll) as rounds of model -> config, the n-th config of each model in round n,
    each model's current config last so that every step changes its node."""
    ordered = {model: sorted(names, key=lambda c: c == current[model]) for model, names in configs.items()}
    count = max((len(names) for names in ordered.values()), default=0)
    return [{model: names[i] for model, names in ordered.items() if i < len(names)} for i in range(count)]


# -- the simulator's MIG Manager against NVIDIA's -----------------------------------------------------------------------
# The 1000-node benchmark runs the testbed's simulated MIG Manager (tests/testbed/agents/migmanager.py): a process of
# NVIDIA's per node does not fit 1000 nodes on one machine. These cases show it stands in for NVIDIA's: per model, a
# node under NVIDIA's nvidia-mig-manager and a node under the simulator, each one GPU, both generate their config from
# the hardware (ClusterPolicy migManager.config.name empty, as v26.7.0 ships) and are taken through every config of
# NVIDIA's generated one, the same label on both at once. Compared: the generated config, the sequence of
# nvidia.com/mig.config.state values, the gpu.deploy.* labels paused meanwhile and left after, and the simulated
# hardware (MIG mode, GPU and compute instances with their placements).

DEPLOY = "nvidia.com/gpu.deploy."
EQUIVALENCE_BATCH = 9  # models at once: two nodes each, with NVIDIA's device plugin and GFD on both


def state_and_paused(obj):
    labels = obj.metadata.labels or {}
    return labels.get(STATE), tuple(sorted(k for k, v in labels.items() if k.startswith(DEPLOY) and v == PAUSED))


def hardware(agents, name):
    """MIG mode, then per GPU instance its profile, placement and compute instances (profile name, placement)."""
    gpu = hoststate.summary(agents.state_path(name))["gpus"][0]
    return {"mig_mode": gpu["mig_mode"],
            "gpu_instances": sorted((gi["profile"], gi["placement"]["start"], gi["placement"]["size"],
                                     tuple(sorted((ci["name"], ci["placement"]["start"], ci["placement"]["size"])
                                                  for ci in gi["compute_instances"])))
                                    for gi in gpu["gpu_instances"])}


def since_label(seen):
    """The entries of ``seen`` from the label change on, or None while that is not known: the watch's first event may
    show the state of the previous config (a terminal state, then cleared by the change); one that began after the
    change shows no such state."""
    cleared = next((i for i, (state, _paused) in enumerate(seen) if state is None), None)
    if cleared is not None:
        return seen[cleared + 1:]
    return list(seen) if seen and seen[0][0] not in ("success", "failed") else None


def apply_config(agents, name, config, timeout=240):
    """Point the node's MIG Manager at ``config``; what it went through and left: {states (distinct, from the label
    change on), paused (gpu.deploy.* labels paused meanwhile), deploy (those labels after), hardware}."""
    with node_history(agents.testbed, name, state_and_paused) as seen:
        agents.testbed.core.patch_node(name, {"metadata": {"labels": {CONFIG: config, STATE: None}}})

        def ended():  # as the watch recorded it, not as a read of the node: the history must hold the last state
            since = since_label(seen)
            return since if since and since[-1][0] in ("success", "failed") else None
        since = agents.testbed.wait_for(ended, timeout, "%s=success or failed on %s (%s), as the watch saw it" % (
            STATE, name, config), interval=0.5)
    states = []
    for state, _paused in since:
        if state is not None and (not states or states[-1] != state):
            states.append(state)
    labels = agents.labels(name)
    return {"states": states, "paused": sorted({k for _s, paused in since for k in paused}),
            "deploy": {k: v for k, v in labels.items() if k.startswith(DEPLOY)}, "hardware": hardware(agents, name)}


def generated_config(agents, name):
    """The config the node's MIG Manager generated from its hardware and published as ConfigMap <node>-mig-config."""
    import yaml

    bed = agents.testbed
    cm = bed.wait_for(lambda: ignore_404(bed.core.read_namespaced_config_map, "%s-mig-config" % name,
                                         agents.namespace), 60, "ConfigMap %s-mig-config" % name)
    return yaml.safe_load(cm.data["config.yaml"])["mig-configs"]


def compare_model(agents, model):
    """Both nodes of ``model`` through every config NVIDIA's MIG Manager generated; the differences found."""
    nodes = {"nvidia": agents.add_gpu_node(unique_name("eqn-" + model), model, 1, mig_manager="nvidia"),
             "sim": agents.add_gpu_node(unique_name("eqs-" + model), model, 1, mig_manager="sim")}
    try:
        for name in nodes.values():
            agents.wait_labels(name, {CONFIG: DISABLED, STATE: "success"}, timeout=300)
        configs = {kind: generated_config(agents, name) for kind, name in nodes.items()}
        differences = []
        if configs["sim"] != configs["nvidia"]:
            differences.append("generated config: simulator %s, NVIDIA %s" % (configs["sim"], configs["nvidia"]))
        order = sorted(configs["nvidia"], key=lambda c: (c == DISABLED, c))  # back to all-disabled last
        for config in order:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                seen = dict(zip(nodes, pool.map(lambda n: apply_config(agents, n, config), nodes.values())))
            if seen["sim"] != seen["nvidia"]:
                differences.append("%s: simulator %s, NVIDIA %s" % (config, seen["sim"], seen["nvidia"]))
        return {"configs": order, "differences": differences}
    finally:
        for name in nodes.values():
            agents.remove_gpu_node(name)


@pytest.fixture(scope="module")
def equivalence(nvidia_cluster):
    """model -> {configs, differences}; the nodes are gone before the matrix makes its own."""
    found = {}
    for start in range(0, len(MIG_MODELS), EQUIVALENCE_BATCH):
        batch = MIG_MODELS[start:start + EQUIVALENCE_BATCH]
        with concurrent.futures.ThreadPoolExecutor(len(batch)) as pool:
            found.update(zip(batch, pool.map(lambda m: compare_model(nvidia_cluster, m), batch)))
    return found


@pytest.mark.parametrize("model", MIG_MODELS)
def test_the_simulated_mig_manager_does_what_nvidias_does_for_every_generated_config(equivalence, model):
    seen = equivalence[model]
    assert DISABLED in seen["configs"] and len(seen["configs"]) > 2, seen
    assert seen["differences"] == [], "\n".join(seen["differences"])


@pytest.fixture(scope="module")
def matrix(nvidia_cluster, tmp_path_factory):
    agents = nvidia_cluster
    bed = agents.testbed
    runner = Runner(apply_automation_rbac(bed), tmp_path_factory.mktemp("matrix-ansible"))
    initial = agents.policy()["spec"]["mig"]["strategy"]
    result = Matrix()
    try:
        for model in MODELS:
            result.nodes[model] = agents.add_gpu_node(unique_name("mx-" + model), model, 1)
        names = sorted(result.nodes.values())
        for name in names:
            wait_advertised(bed, name)
        current = {model: agents.labels(name)[CONFIG] for model, name in result.nodes.items()}
        result.whole_product = {model: agents.labels(name)[PRODUCT] for model, name in result.nodes.items()}
        for strategy in STRATEGIES:
            set_strategy(agents, names, strategy, {
                name: advertised(strategy, LISTED[model].get(current[model])) for model, name in result.nodes.items()})
            refused = {m: [c for c in LISTED[m] if not served(strategy, LISTED[m][c])] for m in MODELS}
            for targets in rounds(refused, current):
                before = {model: snapshot(agents, result.nodes[model]) for model in targets}
                outcome = run(runner, agents, {result.nodes[m]: c for m, c in targets.items()})
                for model, config in targets.items():
                    result.outcomes[(model, config, strategy)] = {
                        "result": outcome, "before": before[model], "after": snapshot(agents, result.nodes[model])}
            rolled = {m: [c for c in LISTED[m] if served(strategy, LISTED[m][c])] for m in MODELS}
            for targets in rounds(rolled, current):
                marks = log_marks(agents, [result.nodes[m] for m in targets])
                outcome = run(runner, agents, {result.nodes[m]: c for m, c in targets.items()})
                for model, config in targets.items():
                    name = result.nodes[model]
                    mig_mark, plugin_mark = marks[name]
                    result.outcomes[(model, config, strategy)] = dict(
                        snapshot(agents, name), result=outcome, mig_log_from=mig_mark, plugin_log_from=plugin_mark)
                    current[model] = config
        marks = log_marks(agents, names)
        outcome = run(runner, agents, {name: DISABLED for name in names})
        for model, name in result.nodes.items():
            result.disabled[model] = dict(snapshot(agents, name), result=outcome, mig_log_from=marks[name][0],
                                          plugin_log_from=marks[name][1])
        yield result
    finally:
        agents.patch_policy({"mig": {"strategy": initial}})
        for name in result.nodes.values():
            agents.remove_gpu_node(name)


def test_every_mig_capable_model_of_the_catalog_is_in_the_matrix():
    """A MIG-capable model that NVIDIA's file names by no device-filter would drop out of the matrix unseen."""
    assert [model for model, configs in LISTED.items() if not configs] == []
    assert sorted(m for m, entry in CATALOG.items() if not entry["mig_capable"]) == sorted(set(CATALOG) - set(LISTED))


def test_the_configs_are_those_nvidias_controller_deploys(matrix, nvidia_cluster):
    """The file the cases come from is what NVIDIA's v26.7.0 controller on the testbed deploys as MIG Manager's default
    config (with GPU nodes: the matrix's)."""
    import yaml

    bed = nvidia_cluster.testbed
    cm = bed.wait_for(lambda: bed.core.read_namespaced_config_map("default-mig-parted-config", nvidia_cluster.namespace),
                      60, "ConfigMap default-mig-parted-config")
    assert yaml.safe_load(cm.data["config.yaml"])["mig-configs"] == CONFIGS


def planned(seen, name):
    """The plan's entry for node ``name`` in the run of ``seen``."""
    return next(entry for entry in seen["result"].task("Plan every node")["plan"] if entry["node"] == name)


def assert_verified(agents, seen, name, config, strategy, resources):
    """The rollout's row and verification for the node, and what NVIDIA's programs say: MIG Manager's success line for
    ``config``, and ``resources`` both the node's allocatable and what NVIDIA's device plugin registered with the
    node's kubelet endpoint during the run. Returns the node's labels after the run."""
    row = rows_of(seen["result"]).get(name)
    assert row is not None, seen["result"].explain()
    assert row["result"] == "reconfigured" and row["hardware_verified"] is True, row
    labels = seen["view"]["labels"]
    assert (labels[CONFIG], labels[STATE], labels[MIG_STRATEGY]) == (config, "success", strategy), labels
    assert seen["view"]["unschedulable"] is False
    mig_log = agents.mig_manager_log(name)[seen["mig_log_from"]:]
    assert "Successfully updated to MIG config: %s" % config in mig_log, mig_log[-3000:]
    assert gpu_allocatable(seen["view"]) == resources, seen["view"]["allocatable"]
    plugin_log = agents.device_plugin_log(name)[seen["plugin_log_from"]:]
    for resource in resources:
        assert "Registered device plugin for '%s' with Kubelet" % resource in plugin_log, plugin_log[-3000:]
    return labels


@pytest.mark.parametrize("model,config,strategy", ROLLED, ids=case_ids(ROLLED))
def test_nvidias_config_rolls_out_and_is_verified(matrix, nvidia_cluster, model, config, strategy):
    devices = LISTED[model][config]
    name = matrix.nodes[model]
    seen = matrix.outcomes[(model, config, strategy)]
    labels = assert_verified(nvidia_cluster, seen, name, config, strategy, advertised(strategy, devices))
    # the simulated hardware, as NVIDIA's MIG Manager left it: NVIDIA's entry for this GPU
    assert seen["modes"] == [(1, 1)] and seen["instances"] == layout(devices), seen["instances"]
    # GFD's labels
    if strategy == "single":
        (profile, count), = devices.items()
        product = "%s-MIG-%s" % (matrix.whole_product[model], profile)
        assert (labels[PRODUCT], labels["nvidia.com/gpu.count"]) == (product, str(count)), labels
        assert planned(seen, name)["expected_gfd_labels"][PRODUCT] == product
    else:
        counts = {p: labels.get("nvidia.com/mig-%s.count" % p) for p in devices}
        assert counts == {p: str(n) for p, n in devices.items()}, labels


@pytest.mark.parametrize("model", MODELS)
def test_every_model_goes_back_to_whole_gpus_with_gfds_product_label(matrix, nvidia_cluster, model):
    """After the matrix, one run takes every node to NVIDIA's all-disabled under mixed: MIG mode off through NVIDIA's
    MIG Manager, the whole GPU advertised again, and the rollout verifies GFD's product label of the whole GPU, which
    GFD makes from the NVML name (NVIDIA H100 PCIe, not the catalog's key H100-PCIe), for every model."""
    name = matrix.nodes[model]
    seen = matrix.disabled[model]
    labels = assert_verified(nvidia_cluster, seen, name, DISABLED, STRATEGIES[-1], advertised(STRATEGIES[-1], None))
    assert seen["modes"] == [(0, 0)] and seen["instances"] == []
    assert labels[PRODUCT] == matrix.whole_product[model]
    assert planned(seen, name)["expected_gfd_labels"][PRODUCT] == labels[PRODUCT]


@pytest.mark.parametrize("model,config,strategy", REFUSED, ids=case_ids(REFUSED))
def test_a_config_the_strategy_cannot_serve_is_refused_before_any_change(matrix, model, config, strategy):
    name = matrix.nodes[model]
    seen = matrix.outcomes[(model, config, strategy)]
    result = seen["result"]
    assert result.rc != 0, result.explain()
    message = result.task(REFUSAL_TASK)["msg"]
    profiles = ", ".join(sorted(p for p, n in LISTED[model][config].items() if n))
    assert ("node %s: config %s under the node's MIG strategy: mig-strategy=single needs one MIG profile per node; "
            "the plan has %s" % (name, config, profiles)) in message, message
    assert not result.ran("Reconfigure step")
    before, after = seen["before"], seen["after"]
    assert (after["modes"], after["instances"]) == (before["modes"], before["instances"])
    for key in (CONFIG, STATE):
        assert after["view"]["labels"][key] == before["view"]["labels"][key]
    assert before["view"]["unschedulable"] is False and after["view"]["unschedulable"] is False
