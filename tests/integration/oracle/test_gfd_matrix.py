"""NVIDIA's GPU Feature Discovery as the oracle for GPU labels.

For every catalog model, MIG layout (MIG off, every config mig-parted generates from the hardware: all-enabled,
all-balanced, each all-<profile>; and a mixed layout with one GPU in MIG mode and one not), MIG strategy
(none/single/mixed) and time-slicing setting (off, 2 and 4 replicas, 4 with renameByDefault), NVIDIA's GFD
v0.20.0 binary (``--oneshot``) reads the simulated host through the simulated libnvidia-ml.so.1. MPS (sharing.mps,
2 and 4 replicas, renameByDefault on and off) runs where NVIDIA's device plugin accepts it: MIG off, strategies
none and single (mixed: "using --mig-strategy=mixed is not supported with MPS"). On MIG layouts NVIDIA's GFD exits
under MPS ("MPS sharing is not supported for mig devices"); mps_on_mig_refused checks that the simulated operands
and the collection refuse it too. Its labels must equal:

(a) the labels the simulated node agents write for the same host (tests/testbed/agents/operands.py), every key,
    except the deliberate exclusions below;
(b) what the collection expects after a MIG change (plan.expected_gfd_labels and plan.expected_resources checked
    by reconfigure.node_step.node_mismatches, the check the rollout runs before uncordon) and what gpu_validate's
    check (validate.node.validate_node) reads, with allocatable as the simulated device plugin advertises it.

Deliberate exclusion from (b): MIG-enabled GPUs under the ``none`` strategy with time-slicing. The device plugin
advertises them whole and time-sliced, while GFD labels them without sharing (``gpu.replicas=0``), so no label says
how many shares a device is and allocatable cannot be folded back into devices (a layout nobody should run: MIG
devices are invisible under ``none``).

Deliberate exclusions from (a):
- ``nvidia.com/gpu.mode``: GFD reads it from the PCI class in sysfs, not from NVML; the simulated host has no sysfs
  (GFD writes ``unknown``), the agents write ``compute`` as GFD does on a real host
  (as on a real H200 running GFD v0.18.0).
- ``nvidia.com/gpu.machine``: GFD reads the DMI product name file (``--machine-type-file``), not NVML; no such
  file here (GFD writes ``unknown``); the agents do not write it and the collection does not read it.
"""

import collections

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan as mig_plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.node_step import node_mismatches
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from tests.integration.oracle import gfd_matrix as gm
from tests.testbed import oracle
from tests.testbed.agents import operands
from tests.testbed.gpusim import hoststate, simhost

EXCLUDED = {"nvidia.com/gpu.mode", "nvidia.com/gpu.machine"}
CASES = [(model, layout) for model in sorted(hoststate.catalog()["models"]) for layout in gm.layouts(model)]


@pytest.fixture(scope="module")
def nvml_lib():
    lib = simhost.library_dir()
    simhost.preload_library(lib)  # the agents' hardware module talks to the simulated host in this process
    oracle.binary("gpu-feature-discovery")
    return lib


def plan_for(model, layout, host):
    """The collection's plan for turning the 2-GPU host (MIG off) into ``layout``."""
    hardware = {"gpus": [{"index": g.index, "name": g.name, "pci_device_id": g.device_id,
                          "mig": {"current": False, "pending": False}} for g in host.gpus]}
    entries = [{"devices": [i], "mig-enabled": devices is not None, **({"mig-devices": devices} if devices is not None else {})}
               for i, devices in sorted(layout.items())]
    return mig_plan.plan_node(hardware, config_name="target", config={"version": "v1", "mig-configs": {"target": entries}})


def short_hardware(host):
    return {"gpus": [{"name": g.name, "memory_mib": g.memory_mb, "mig_enabled": g.mig_current,
                      "mig_devices": [d.profile for d in g.mig_devices]} for g in host.gpus]}


def node_object(name, labels, allocatable):
    return {"metadata": {"name": name, "labels": dict(labels, **{gpu_labels.LABEL_GPU_PRESENT: "true"})},
            "status": {"allocatable": {k: str(v) for k, v in allocatable.items()},
                       "capacity": {k: str(v) for k, v in allocatable.items()},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("model, layout_name", CASES, ids=["%s-%s" % c for c in CASES])
def test_gfd_labels_equal_nvidias(model, layout_name, nvml_lib, tmp_path):
    layout = gm.layouts(model)[layout_name]
    state = tmp_path / "host.state"
    host = gm.build_host(state, model, layout)
    # The host is what the layout asked for (else the comparison would be about another layout).
    for index, devices in layout.items():
        assert host.gpus[index].mig_current == (devices is not None)
        assert collections.Counter(d.profile for d in host.gpus[index].mig_devices) == collections.Counter(devices or {})
    # No MIG change is ever planned on a GPU without MIG (the planner's catalog holds MIG GPUs only): (b) is then
    # gpu_validate's check alone.
    plan = plan_for(model, layout, host) if host.gpus[0].mig_capable else None
    assert plan is None or plan["feasible"], plan["reason"]
    failures = []
    mig_on = any(d is not None for d in layout.values())
    settings = [(strategy, sharing) for strategy in gm.STRATEGIES for sharing in gm.SHARING]
    if mig_on:
        mps_refused = [("single", "mps-2")] + ([("none", "mps-4-rename")] if layout_name == "mixed-layout" else [])
        for strategy, sharing in mps_refused:
            failures.extend(mps_on_mig_refused(model, layout_name, host, plan, nvml_lib, state, strategy, sharing))
    else:
        settings += [(strategy, sharing) for strategy in gm.MPS_STRATEGIES for sharing in gm.MPS_SHARING]
        for sharing in gm.MPS_SHARING:  # MPS with the mixed strategy: the device plugin refuses to start
            if not operands.sharing_error(host, "mixed", operands.time_slicing(gm.sharing_config(sharing, {}))):
                failures.append("mixed/%s: the simulated device plugin starts (NVIDIA's refuses MPS with mixed)" % sharing)
    for strategy, sharing in settings:
        case = "%s/%s" % (strategy, sharing)
        config = gm.sharing_config(sharing, gm.layout_devices(layout))
        real = oracle.run_gfd(state, nvml_lib, strategy, yaml.safe_dump(config) if config else None)
        assert real.get(gpu_labels.LABEL_PRODUCT), "GFD wrote no product label: %s" % real
        shared = operands.time_slicing(config)
        # (a) the simulated GFD
        sim = operands.apply_time_slicing_labels(operands.gfd_labels(host, strategy), shared)
        for key in sorted((set(real) | set(sim)) - EXCLUDED):
            if real.get(key) != sim.get(key):
                failures.append("%s: %s: NVIDIA's GFD %r, simulated GFD %r" % (case, key, real.get(key), sim.get(key)))
        # (b) the collection's expectations after the change, against NVIDIA's labels
        resources, error = operands.device_plugin_resources(host, strategy)
        if operands.sharing_error(host, strategy, shared) or operands.gfd_error(host, shared):
            failures.append("%s: the simulated GFD/device plugin refuse what NVIDIA's accept" % case)
        allocatable = operands.apply_time_slicing(resources, shared)
        node = node_object("n-%s" % layout_name, real, allocatable)
        conflict = mig_plan.strategy_conflict(plan, strategy) if plan else None
        if strategy == "none" and config and any(d is not None for d in layout.values()):
            # Excluded from (b): MIG-enabled GPUs under the none strategy are advertised whole and time-sliced
            # by the device plugin, but GFD labels them without sharing (gpu.replicas=0), so the labels do not
            # say how many shares a device is: the collection cannot fold allocatable back into devices.
            continue
        expected = (mig_plan.expected_resources(plan, strategy), mig_plan.expected_gfd_labels(plan, strategy)) if plan else ({}, {})
        for problem in node_mismatches(node, *expected) if plan else ():
            if not (conflict and problem.startswith("allocatable")):  # the plugin refuses the layout: nothing advertised
                failures.append("%s: after-change check: %s" % (case, problem))
        problems = validate_node(node, strategy, short_hardware(host))["problems"]
        if not any(allocatable.values()):
            # MIG on without MIG devices under single/mixed: nothing to advertise, which gpu_validate must say.
            if not any("advertises 0 GPU resources" in p for p in problems):
                failures.append("%s: gpu_validate misses that nothing is advertised: %s" % (case, problems))
        elif conflict:
            if not any("MIG" in p for p in problems):
                failures.append("%s: gpu_validate misses the layout single cannot advertise (%s): %s" % (case, conflict, problems))
        elif problems:
            failures.append("%s: gpu_validate on NVIDIA's labels: %s" % (case, problems))
        # labels the collection parses
        parsed = gpu_labels.parse_product(real[gpu_labels.LABEL_PRODUCT])
        if parsed["model"] != gpu_labels.product_label(host.gpus[0].name):
            failures.append("%s: parse_product(%r) model %r" % (case, real[gpu_labels.LABEL_PRODUCT], parsed["model"]))
        assert error is None or conflict
    assert not failures, "\n".join(failures[:40]) + ("\n... %d more" % (len(failures) - 40) if len(failures) > 40 else "")


def mps_on_mig_refused(model, layout_name, host, plan, lib, state, strategy, sharing):
    """MPS on a node with a GPU in MIG mode: NVIDIA's GFD exits before labelling (internal/lm/nvml.go
    isMPSCapable), whatever the MIG strategy; the simulated GFD and device plugin must refuse too, and the
    collection must refuse the change before it is made and flag such a node in gpu_validate."""
    case = "%s/%s" % (strategy, sharing)
    config = gm.sharing_config(sharing, {})
    failures = []
    try:
        real = oracle.run_gfd(state, lib, strategy, yaml.safe_dump(config))
        failures.append("%s: NVIDIA's GFD labelled a MIG-enabled node under MPS: %s" % (case, real))
    except RuntimeError as err:
        if "MPS sharing is not supported for mig devices" not in str(err):
            failures.append("%s: NVIDIA's GFD failed otherwise: %s" % (case, str(err)[-300:]))
    shared = operands.time_slicing(config)
    if not operands.gfd_error(host, shared):
        failures.append("%s: the simulated GFD labels a MIG-enabled node under MPS" % case)
    if strategy == "single" and not operands.sharing_error(host, strategy, shared):
        failures.append("%s: the simulated device plugin advertises MIG devices under MPS" % case)
    if plan is not None:
        conflict = mig_plan.sharing_conflict(plan, "mps")
        if not conflict or "MPS" not in conflict:
            failures.append("%s: the planner does not refuse enabling MIG under MPS: %r" % (case, conflict))
    # gpu_validate on the labels GFD left from before (MIG off, MPS) while the GPUs are now in MIG mode
    replicas = config["sharing"]["mps"]["resources"][0]["replicas"]
    renamed = config["sharing"]["mps"].get("renameByDefault")
    before = {gpu_labels.LABEL_PRODUCT: gpu_labels.product_label(host.gpus[0].name) + ("" if renamed else "-SHARED"),
              gpu_labels.LABEL_COUNT: str(len(host.gpus)), gpu_labels.LABEL_REPLICAS: str(replicas),
              gpu_labels.LABEL_SHARING_STRATEGY: "mps", "nvidia.com/mps.capable": "true"}
    if strategy != "none":
        before[gpu_labels.LABEL_MIG_STRATEGY] = strategy
    name = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
    problems = validate_node(node_object("n-%s" % layout_name, before, {name: len(host.gpus) * replicas}), strategy,
                             short_hardware(host))["problems"]
    if not any("MPS" in p for p in problems):
        failures.append("%s: gpu_validate misses MPS on MIG-enabled GPUs: %s" % (case, problems))
    return failures
