"""Every MIG-capable GPU model by every MIG config NVIDIA's MIG Manager lists for it, rolled out by mig-reconfigure.yml
with NVIDIA's MIG Manager, device plugin and GFD, under both MIG strategies.

GPU Operator v26.7.0 ships ClusterPolicy migManager.config.name empty, so NVIDIA's nvidia-mig-manager v0.15.0
generates each node's MIG configs from its hardware at start (mig-parted cmd/nvidia-mig-manager main.go
setupMigConfig), publishes them as ConfigMap <node>-mig-config and applies only those; the chart's
default-mig-parted-config is its fallback when no profile is discovered. So the configs NVIDIA lists for a model are
the ones its MIG Manager generates on a node of that model: all-disabled, all-enabled, all-balanced and one
all-<profile> per GPU instance profile. The cases are named at collection from the simulator's generator
(tests/testbed/agents/migconfig.py), which the equivalence test below shows equal to NVIDIA's on every model; what
each case expects (MIG mode, the profiles and their counts) is read from the node's own ConfigMap, NVIDIA's, and
test_the_cases_are_the_configs_nvidias_mig_manager_generated_on_each_node checks that the two lists agree. With the
catalog: 272 configs on 27 models (every MIG-capable model of the catalog; the T4 is not MIG-capable), each under both
strategies, 544 (model, config, strategy) cases: under single 218 rolled and 54 refused, under mixed 272 rolled.

One simulated node per model, one GPU each (two for a model with more than ROUND_CONFIGS configs, each taking every
other config), on the cluster of conftest.py (NVIDIA's v26.7.0 chart and controller; per node NVIDIA's
nvidia-mig-manager v0.15.0 applying the change, nvidia-device-plugin v0.20.0 advertising the node's resources and GFD
v0.20.0 labelling it). Each mig-reconfigure.yml run rolls every node at once: one mig_reconfigure_profiles entry per
config (an inventory group of the nodes it is for), no canary, all nodes in one step, and in each run every node
changes. Under single (first, the nodes at the operator's default all-disabled) the refused runs, then the rollouts,
then under mixed the rollouts, each node's all-disabled last.

Under mig.strategy=single NVIDIA's device plugin advertises a node's MIG devices as nvidia.com/gpu only when they all
have one profile (NVIDIA/k8s-device-plugin v0.20.0 internal/rm/device_map.go, requireUniformMIGDevices), and GFD labels
a node -MIG-INVALID when its MIG devices have several profiles or a MIG-enabled GPU has none (internal/lm/
mig-strategy.go), so all-balanced and all-enabled would leave the node advertising nothing. The product refuses such a
config before any change: the plan names the node, the config and why, and the role stops at "Stop before any change
when a plan is invalid". Those cases assert that refusal: the playbook fails, no reconfigure step runs, and the node
keeps its config, its MIG mode, its GPU instances and its schedulability. Every other case asserts the rollout's
verification of the node and checks it against NVIDIA's programs: row result reconfigured with the hardware
verified, nvidia.com/mig.config.state=success, NVIDIA's entry on the simulated hardware, MIG Manager's own success
line, the allocatable NVIDIA's device plugin registered with the node's kubelet endpoint, and GFD's labels (under
single the product label: GFD's label of the whole GPU with -MIG-<profile>, which the plan expects too). all-disabled
checks the whole GPU's product label for every model: GFD makes it from the NVML name (NVIDIA H100 PCIe), which is not
the catalog's key (H100-PCIe).
"""

import concurrent.futures
import math
import re
from dataclasses import dataclass, field

import pytest

from tests.integration.agents.test_agent_logic import make_gpu
from tests.integration.nvidia_mig_manager.conftest import MIG_STRATEGY, host_environment, set_strategy
from tests.integration.agents.test_protocol import PAUSED, node_history
from tests.integration.nvidia_mig_manager.test_label import gpu_instances, ignore_404, mig_modes
from tests.integration.reconfigure.conftest import PLAYBOOK, Runner, apply_automation_rbac, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rollout_vars, rows_of, \
    wait_advertised
from tests.testbed.agents import migconfig
from tests.testbed.gpusim import hoststate
from tests.testbed.pytest_cluster import unique_name

# The matrix's 20 playbook runs happen in its fixture, i.e. in the first case's setup: about 16 min on 2 cores.
pytestmark = pytest.mark.timeout(2400)

PRODUCT = "nvidia.com/gpu.product"
DISABLED = "all-disabled"  # MIG off on every GPU; also the operator's default for a new node
REFUSAL_TASK = "Stop before any change when a plan is invalid"
ROUND_CONFIGS = 10  # the most configs one node takes under one strategy; a model with more gets a second node


def layouts(mig_configs):
    """{config: None (MIG disabled) or {profile: count}} of a one-GPU node's MIG configs (one entry each)."""
    return {name: dict(entries[0]["mig-devices"] or {}) if entries[0]["mig-enabled"] else None
            for name, entries in mig_configs.items()}


CATALOG = hoststate.catalog()["models"]
MIG_MODELS = sorted(model for model, entry in CATALOG.items() if entry["mig_capable"])
LISTED = {model: layouts(migconfig.generate([make_gpu(model)])["mig-configs"]) for model in MIG_MODELS}
STRATEGIES = ("single", "mixed")


def one_profile(devices):
    return len([p for p, n in devices.items() if n]) == 1


def served(strategy, devices):
    """Whether NVIDIA's device plugin and GFD can serve the layout under ``strategy`` (single: MIG off, or one profile
    on the node)."""
    return strategy != "single" or devices is None or one_profile(devices)


CASES = [(model, config, strategy) for strategy in STRATEGIES for model in MIG_MODELS for config in LISTED[model]]
ROLLED = [case for case in CASES if served(case[2], LISTED[case[0]][case[1]])]
REFUSED = [case for case in CASES if case not in ROLLED]


def case_ids(cases):
    return ["-".join(case) for case in cases]


def advertised(strategy, devices):
    """GPU resources of a one-GPU node with ``devices`` on its GPU (None: MIG disabled), as NVIDIA's device plugin
    names them: the whole GPU; under single every MIG device as nvidia.com/gpu; under mixed one resource per profile,
    ``+`` written as ``.`` (internal/rm/rm.go)."""
    if devices is None:
        return {"nvidia.com/gpu": "1"}
    if strategy == "single":
        return {"nvidia.com/gpu": str(sum(devices.values()))} if one_profile(devices) else {}
    return {"nvidia.com/mig-%s" % p.replace("+", "."): str(n) for p, n in devices.items() if n}  # as rm.go names them


def layout(devices):
    return sorted(p for p, n in devices.items() for _index in range(n))


def node_share(model):
    """{config: index of the model's node that takes it}: every other config on a second node when the model has more
    than ROUND_CONFIGS."""
    count = math.ceil(len(LISTED[model]) / ROUND_CONFIGS)
    return {config: i % count for i, config in enumerate(sorted(LISTED[model], key=lambda c: (c != DISABLED, c)))}


@dataclass
class Matrix:
    """The nodes (model -> node names), which node took each config ((model, config) -> node name), the configs NVIDIA's
    MIG Manager generated on each node (node name -> layouts), GFD's product label of each model's whole GPU, and per
    case what was seen."""
    nodes: dict = field(default_factory=dict)
    node_of: dict = field(default_factory=dict)
    generated: dict = field(default_factory=dict)
    whole_product: dict = field(default_factory=dict)
    outcomes: dict = field(default_factory=dict)


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
    """``configs`` (node -> configs to roll) as rounds of node -> config, the n-th config of each node in round n,
    each node's current config last so that every step changes it."""
    ordered = {node: sorted(names, key=lambda c: c == current[node]) for node, names in configs.items()}
    count = max((len(names) for names in ordered.values()), default=0)
    return [{node: names[i] for node, names in ordered.items() if i < len(names)} for i in range(count)]


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
    model_of = {}
    try:
        for model in MIG_MODELS:
            share = node_share(model)
            result.nodes[model] = [agents.add_gpu_node(unique_name("mx-" + model), model, 1)
                                   for _index in range(max(share.values()) + 1)]
            model_of.update((name, model) for name in result.nodes[model])
            result.node_of.update(((model, config), result.nodes[model][index]) for config, index in share.items())
        names = sorted(model_of)
        for name in names:
            wait_advertised(bed, name)
        result.generated = {name: layouts(generated_config(agents, name)) for name in names}
        current = {name: agents.labels(name)[CONFIG] for name in names}
        result.whole_product = {model: agents.labels(nodes[0])[PRODUCT] for model, nodes in result.nodes.items()}

        def assigned(strategy, rolled):
            out = {}
            for (model, config), name in sorted(result.node_of.items()):
                if served(strategy, LISTED[model][config]) == rolled:
                    out.setdefault(name, []).append(config)
            return out

        for strategy in STRATEGIES:
            set_strategy(agents, names, strategy, {
                name: advertised(strategy, result.generated[name].get(current[name])) for name in names})
            for targets in rounds(assigned(strategy, False), current):
                before = {name: snapshot(agents, name) for name in targets}
                outcome = run(runner, agents, targets)
                for name, config in targets.items():
                    result.outcomes[(model_of[name], config, strategy)] = {
                        "result": outcome, "before": before[name], "after": snapshot(agents, name)}
            for targets in rounds(assigned(strategy, True), current):
                marks = log_marks(agents, list(targets))
                outcome = run(runner, agents, targets)
                for name, config in targets.items():
                    mig_mark, plugin_mark = marks[name]
                    result.outcomes[(model_of[name], config, strategy)] = dict(
                        snapshot(agents, name), result=outcome, mig_log_from=mig_mark, plugin_log_from=plugin_mark)
                    current[name] = config
        yield result
    finally:
        agents.patch_policy({"mig": {"strategy": initial}})
        for name in model_of:
            agents.remove_gpu_node(name)


def test_the_cases_are_the_configs_nvidias_mig_manager_generated_on_each_node(matrix):
    """The cases' configs (named at collection from the simulator's generator) are the ones NVIDIA's MIG Manager
    generated on every node of the model, with the same layouts."""
    for model, nodes in matrix.nodes.items():
        for name in nodes:
            assert matrix.generated[name] == LISTED[model], (model, name)


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
    name = matrix.node_of[(model, config)]
    devices = matrix.generated[name][config]
    seen = matrix.outcomes[(model, config, strategy)]
    labels = assert_verified(nvidia_cluster, seen, name, config, strategy, advertised(strategy, devices))
    if devices is None:
        # MIG off through NVIDIA's MIG Manager, the whole GPU advertised, and GFD's product label of the whole GPU,
        # made from the NVML name, which the plan expects too
        assert seen["modes"] == [(0, 0)] and seen["instances"] == []
        assert labels[PRODUCT] == matrix.whole_product[model]
        assert planned(seen, name)["expected_gfd_labels"][PRODUCT] == labels[PRODUCT]
        return
    # the simulated hardware, as NVIDIA's MIG Manager left it: NVIDIA's entry for this GPU
    assert seen["modes"] == [(1, 1)] and seen["instances"] == layout(devices), seen["instances"]
    # GFD's labels
    if strategy == "single":
        (profile, count), = [(p, n) for p, n in devices.items() if n]
        product = "%s-MIG-%s" % (matrix.whole_product[model], profile.replace("+", "."))  # GFD's label value
        assert (labels[PRODUCT], labels["nvidia.com/gpu.count"]) == (product, str(count)), labels
        assert planned(seen, name)["expected_gfd_labels"][PRODUCT] == product
    else:
        counts = {p: labels.get("nvidia.com/mig-%s.count" % p.replace("+", ".")) for p, n in devices.items() if n}
        assert counts == {p: str(n) for p, n in devices.items() if n}, labels


@pytest.mark.parametrize("model,config,strategy", REFUSED, ids=case_ids(REFUSED))
def test_a_config_the_strategy_cannot_serve_is_refused_before_any_change(matrix, model, config, strategy):
    name = matrix.node_of[(model, config)]
    seen = matrix.outcomes[(model, config, strategy)]
    result = seen["result"]
    assert result.rc != 0, result.explain()
    message = result.task(REFUSAL_TASK)["msg"]
    profiles = ", ".join(sorted(p for p, n in matrix.generated[name][config].items() if n))
    why = ("mig-strategy=single needs one MIG profile per node; the plan has %s" % profiles if profiles
           else "mig-strategy=single: MIG-enabled GPUs [0] would have no MIG devices")
    assert "node %s: config %s under the node's MIG strategy: %s" % (name, config, why) in message, message
    assert not result.ran("Reconfigure step")
    before, after = seen["before"], seen["after"]
    assert (after["modes"], after["instances"]) == (before["modes"], before["instances"])
    for key in (CONFIG, STATE):
        assert after["view"]["labels"][key] == before["view"]["labels"][key]
    assert before["view"]["unschedulable"] is False and after["view"]["unschedulable"] is False
