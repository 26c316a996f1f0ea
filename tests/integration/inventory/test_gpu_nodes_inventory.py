"""The gpu_nodes inventory plugin against the testbed cluster, run as users run it: ansible-inventory."""

import json
import os
import subprocess
import uuid

import pytest

from tests.testbed.operator import NFD_GPU_NODE_LABELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANSIBLE_INVENTORY = os.path.join(ROOT, ".venv", "bin", "ansible-inventory")

# GFD / operator / MIG Manager labels as a real node carries them (reference §3.5, §3.7, §6).
H100_MIXED = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig-1g.10gb.count": "16",
    "nvidia.com/mig-2g.20gb.count": "8",
    "nvidia.com/mig-3g.40gb.count": "8",
    "nvidia.com/gpu.deploy.device-plugin": "true",
}
H100_ALLOCATABLE = {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8"}
A100_SINGLE_PENDING = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
    "nvidia.com/gpu.count": "56",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mig.config": "all-2g.10gb",
    "nvidia.com/mig.config.state": "pending",
    "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change",
    "nvidia.com/gpu.deploy.driver": "true",
}
L4_NO_MIG = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/mig.capable": "false",
}


def run_inventory(testbed, source, *args, check=True):
    env = dict(os.environ)
    env.update(testbed.env)
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    proc = subprocess.run(
        [ANSIBLE_INVENTORY, "-i", str(source)] + list(args),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def plain(value):
    """ansible-core 2.19 writes values not trusted as templates as {"__ansible_unsafe": ...}; unwrap them."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def write_source(directory, name="cluster.gpu_nodes.yml", **options):
    options.setdefault("plugin", "gpufleet.gpu_operator.gpu_nodes")
    path = directory / name
    path.write_text(json.dumps(options))  # JSON is YAML
    return path


@pytest.fixture
def fleet(testbed, gpu_cluster):
    """Four nodes of this test run (selected by a per-run label): H100 mixed, A100 single pending, L4, CPU.

    The GPU nodes carry NFD's PCI label as real ones do: NVIDIA's controller treats a node with
    nvidia.com/gpu.present=true but no NFD NVIDIA-PCI label as one that lost its GPUs and strips every
    gpu.deploy.* label (controllers/state_manager.go labelGPUNodes), which undid the planted paused ones.
    The fixture waits until the controller has labelled each GPU node, so the test reads a settled node."""
    run = "inv-" + uuid.uuid4().hex[:6]
    mark = {"test.gpufleet.io/run": run}
    nodes = {
        run + "-h100": (H100_MIXED, H100_ALLOCATABLE),
        run + "-a100": (A100_SINGLE_PENDING, {"nvidia.com/gpu": "56"}),
        run + "-l4": (L4_NO_MIG, {"nvidia.com/gpu": "2"}),
        run + "-cpu": ({}, {}),
    }
    for name, (labels, gpus) in nodes.items():
        resources = dict({"cpu": "32", "memory": "256Gi", "pods": "110"}, **gpus)
        nfd = NFD_GPU_NODE_LABELS if labels else {}
        testbed.create_node(name, labels=dict(mark, **dict(nfd, **labels)), capacity=resources, allocatable=resources)
    for name, (labels, _gpus) in nodes.items():
        if labels:
            gpu_cluster.wait_labels(name, {"nvidia.com/gpu.deploy.operator-validator": "true"})
    yield run, "test.gpufleet.io/run=" + run
    for name in nodes:
        testbed.delete_node(name)


def test_graph_groups_by_model_strategy_config_and_state(testbed, fleet, tmp_path):
    run, selector = fleet
    source = write_source(tmp_path, kubeconfig=testbed.kubeconfig, label_selector=selector)
    graph = run_inventory(testbed, source, "--graph").stdout
    members = parse_graph(graph)

    assert members["gpu_nodes"] == {run + "-h100", run + "-a100", run + "-l4"}
    assert members["gpu_model_nvidia_h100_80gb_hbm3"] == {run + "-h100"}
    assert members["gpu_model_nvidia_a100_sxm4_40gb"] == {run + "-a100"}
    assert members["gpu_model_nvidia_l4"] == {run + "-l4"}
    assert members["mig_strategy_mixed"] == {run + "-h100"}
    assert members["mig_strategy_single"] == {run + "-a100"}
    assert members["mig_strategy_none"] == {run + "-l4"}
    assert members["mig_config_all_balanced"] == {run + "-h100"}
    assert members["mig_config_all_2g_10gb"] == {run + "-a100"}
    assert members["mig_state_success"] == {run + "-h100"}
    assert members["mig_state_pending"] == {run + "-a100"}
    assert members["mig_state_unset"] == {run + "-l4"}
    assert not any(run + "-cpu" in hosts for hosts in members.values())


def test_list_host_vars_from_gfd_labels_and_allocatable(testbed, fleet, tmp_path):
    run, selector = fleet
    source = write_source(tmp_path, kubeconfig=testbed.kubeconfig, label_selector=selector)
    raw = json.loads(run_inventory(testbed, source, "--list").stdout)["_meta"]["hostvars"]
    # Cluster data must never be evaluated as a template: a label value like "{{ lookup(...) }}" stays text.
    assert raw[run + "-h100"]["gpu_mig_config"] == {"__ansible_unsafe": "all-balanced"}
    hostvars = plain(raw)

    h100 = hostvars[run + "-h100"]
    assert h100["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["gpu_count"] == 8 and h100["gpu_memory_mb"] == 81559 and h100["gpu_family"] == "hopper"
    assert h100["gpu_mig_capable"] is True
    assert h100["gpu_mig_strategy"] == "mixed"
    assert h100["gpu_mig_config"] == "all-balanced" and h100["gpu_mig_config_state"] == "success"
    assert h100["gpu_mig_devices"] == {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}
    assert h100["gpu_allocatable"] == {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8,
                                       "nvidia.com/mig-3g.40gb": 8}
    assert h100["gpu_deploy_paused"] == []
    assert h100["gpu_ready"] is True
    assert h100["gpu_labels"]["nvidia.com/mig.config"] == "all-balanced"
    assert "test.gpufleet.io/run" not in h100["gpu_labels"]

    a100 = hostvars[run + "-a100"]
    assert a100["gpu_model"] == "NVIDIA-A100-SXM4-40GB"
    assert a100["gpu_product_label"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert a100["gpu_mig_devices"] == {"1g.5gb": 56}
    assert a100["gpu_allocatable"] == {"nvidia.com/gpu": 56}
    assert a100["gpu_deploy_paused"] == ["device-plugin", "gpu-feature-discovery"]

    l4 = hostvars[run + "-l4"]
    assert l4["gpu_mig_capable"] is False and l4["gpu_mig_config"] is None and l4["gpu_mig_devices"] == {}


def test_label_selector_compose_keyed_groups_and_cpu_nodes(testbed, fleet, tmp_path):
    run, selector = fleet
    source = write_source(
        tmp_path,
        kubeconfig=testbed.kubeconfig,
        label_selector=selector + ",nvidia.com/mig.capable=true",
        group="mig_fleet",
        compose={"ansible_connection": "'local'"},
        keyed_groups=[{"key": "gpu_family", "prefix": "family"}],
    )
    listing = plain(json.loads(run_inventory(testbed, source, "--list").stdout))
    assert sorted(listing["mig_fleet"]["hosts"]) == sorted([run + "-a100", run + "-h100"])
    assert listing["family_hopper"]["hosts"] == [run + "-h100"]
    assert listing["_meta"]["hostvars"][run + "-a100"]["ansible_connection"] == "local"

    with_cpu = write_source(tmp_path, "cpu.gpu_nodes.yml", kubeconfig=testbed.kubeconfig,
                            label_selector=selector, include_cpu_nodes=True)
    members = parse_graph(run_inventory(testbed, with_cpu, "--graph").stdout)
    assert members["cpu_nodes"] == {run + "-cpu"}
    assert run + "-cpu" not in members["gpu_nodes"]


def test_cache_serves_listing_until_flushed(testbed, fleet, tmp_path):
    run, selector = fleet
    source = write_source(
        tmp_path, kubeconfig=testbed.kubeconfig, label_selector=selector,
        cache=True, cache_plugin="ansible.builtin.jsonfile",
        cache_connection=str(tmp_path / "cache"), cache_timeout=600,
    )
    first = parse_graph(run_inventory(testbed, source, "--graph").stdout)
    assert run + "-l4" in first["gpu_nodes"]
    assert os.listdir(tmp_path / "cache"), "the plugin wrote no cache entry"

    testbed.delete_node(run + "-l4")
    cached = parse_graph(run_inventory(testbed, source, "--graph").stdout)
    assert cached["gpu_nodes"] == first["gpu_nodes"], "second run did not come from the cache"

    refreshed = parse_graph(run_inventory(testbed, source, "--graph", "--flush-cache").stdout)
    assert refreshed["gpu_nodes"] == {run + "-h100", run + "-a100"}


def test_unreachable_api_fails_naming_the_source(testbed, tmp_path):
    source = write_source(tmp_path, "broken.gpu_nodes.yml", kubeconfig=str(tmp_path / "missing-kubeconfig"))
    proc = run_inventory(testbed, source, "--graph", "-vvv", check=False)
    output = proc.stdout + proc.stderr
    # The path named (never masked), with the source that names it.
    assert "kubeconfig %s does not exist" % (tmp_path / "missing-kubeconfig") in output, output
    assert "broken.gpu_nodes.yml" in output


def parse_graph(text):
    """{group: {hosts...}} from `ansible-inventory --graph`, hosts counted in every enclosing group."""
    members, stack = {}, []
    for line in text.splitlines():
        stripped = line.lstrip(" |-")
        depth = (len(line) - len(stripped)) // 3  # "  |--" per level
        if not stripped:
            continue
        stack = stack[:depth]
        if stripped.startswith("@"):
            group = stripped[1:].rstrip(":")
            members.setdefault(group, set())
            stack.append(group)
        else:
            for group in stack:
                members[group].add(stripped)
    return members
