"""The gpu_nodes inventory plugin without an API server: file names it accepts, and the hosts, host variables and
groups it builds from node summaries. The plugin runs in a child process through Ansible's plugin loader (options come
from its DOCUMENTATION), with the API listing replaced by the summaries given. Listing nodes from a cluster, caching and
connection errors are covered by tests/integration/inventory/test_gpu_nodes_inventory.py (see docs/testing.md)."""

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.inventory import gpu_nodes
from ansible_collections.gpufleet.gpu_operator.plugins.inventory.gpu_nodes import InventoryModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))

POPULATE = """
import json, sys
from ansible.plugins.loader import init_plugin_loader, inventory_loader
init_plugin_loader([sys.argv[1]])
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
plugin = inventory_loader.get("gpufleet.gpu_operator.gpu_nodes")
nodes = json.loads(sys.argv[3])
plugin._fetch_nodes = lambda path: nodes
inventory = InventoryData()
plugin.parse(inventory, DataLoader(), sys.argv[2], cache=False)
# Every key of the source is one of the plugin's documented options (get_option raises KeyError for any other).
for key in DataLoader().load_from_file(sys.argv[2]):
    plugin.get_option(key)
print(json.dumps({"groups": dict((name, sorted(h.name for h in group.get_hosts()))
                                 for name, group in inventory.groups.items()),
                  "hostvars": dict((name, dict(inventory.get_host(name).vars)) for name in inventory.hosts)},
                 default=str))
"""


def populate(tmp_path, config, summaries):
    path = tmp_path / "gpu_nodes.yml"
    path.write_text(config)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT]))
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", POPULATE, os.path.join(ROOT, ".collections"), str(path),
                           json.dumps(summaries)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def gpu_node(name, labels):
    return {"metadata": {"name": name, "labels": dict({"nvidia.com/gpu.present": "true"}, **labels)},
            "status": {"allocatable": {"nvidia.com/mig-1g.18gb": "28"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_only_gpu_nodes_yml_files_are_accepted(tmp_path):
    plugin = InventoryModule()
    for name, accepted in (("gpu_nodes.yml", True), ("prod.gpu_nodes.yaml", True), ("hosts.yml", False)):
        path = tmp_path / name
        path.write_text("plugin: gpufleet.gpu_operator.gpu_nodes\n")
        assert plugin.verify_file(str(path)) is accepted, name
    assert not plugin.verify_file(str(tmp_path / "absent.gpu_nodes.yml"))


def test_hosts_vars_and_groups_from_node_summaries(tmp_path):
    summary = cluster_facts.node_summary(gpu_node("h200-1", {
        "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "4", "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-1g.18gb", "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.18gb.count": "28"}))
    config = ("plugin: gpufleet.gpu_operator.gpu_nodes\ngroup: fleet\n"
              "keyed_groups:\n  - key: gpu_mig_strategy\n    prefix: strategy\n"
              "compose:\n  slices: gpu_allocatable['nvidia.com/mig-1g.18gb']\n")
    built = populate(tmp_path, config, [summary, {"node_name": "cpu-1", "cpu_only": True}])
    groups = built["groups"]
    assert groups["fleet"] == ["h200-1"] and groups["cpu_nodes"] == ["cpu-1"]
    for group in ("gpu_model_nvidia_h200", "mig_strategy_mixed", "mig_config_all_1g_18gb", "mig_state_success",
                  "strategy_mixed"):
        assert groups[group] == ["h200-1"], group
    hostvars = built["hostvars"]["h200-1"]
    assert hostvars["gpu_model"] == "NVIDIA-H200" and hostvars["gpu_mig_config"] == "all-1g.18gb"
    assert hostvars["gpu_node_name"] == "h200-1" and str(hostvars["slices"]) == "28"
    assert not any(key.startswith("gpu_") for key in built["hostvars"]["cpu-1"])


def test_the_documented_example_source_uses_documented_options_and_builds_its_groups(tmp_path):
    """The source in the plugin's EXAMPLES, as a user copies it (its cache directory moved under tmp_path)."""
    config = yaml.safe_load(gpu_nodes.EXAMPLES)
    config["cache_connection"] = str(tmp_path / "cache")
    summary = cluster_facts.node_summary(gpu_node("h100-1", {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper", "pool": "training"}))
    built = populate(tmp_path, yaml.safe_dump(config), [summary])
    assert built["groups"]["family_hopper"] == ["h100-1"], built["groups"]
    assert built["hostvars"]["h100-1"]["ansible_connection"] == "local"


MIXED_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.strategy": "mixed", "nvidia.com/cuda.driver-version.full": "580.159.04",
    "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-1g.10gb.memory": "9984",
    "nvidia.com/mig-1g.10gb.multiprocessors": "16", "nvidia.com/mig-1g.10gb.slices.gi": "1",
    "nvidia.com/mig-1g.10gb.slices.ci": "1", "nvidia.com/mig-1g.10gb.engines.copy": "1",
    "nvidia.com/mig-1g.10gb.engines.ofa": "0", "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    "nvidia.com/mig-1g.10gb.replicas": "1", "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
    "nvidia.com/gpu.deploy.mig-manager": "true"}


def test_host_labels_compact_leaves_out_profile_geometry_and_deploy_labels(tmp_path):
    summary = cluster_facts.node_summary(gpu_node("h100-1", MIXED_LABELS))
    compact = populate(tmp_path, "plugin: gpufleet.gpu_operator.gpu_nodes\n", [summary])["hostvars"]["h100-1"]
    kept = set(compact["gpu_labels"])
    assert kept == {"nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
                    "nvidia.com/mig.strategy", "nvidia.com/cuda.driver-version.full", "nvidia.com/mig-1g.10gb.count",
                    "nvidia.com/mig-1g.10gb.product", "nvidia.com/mig-1g.10gb.replicas",
                    "nvidia.com/mig-1g.10gb.sharing-strategy"}
    assert compact["gpu_deploy_labels"] == {"mig-manager": "true"}  # the deploy labels are not lost, only not repeated
    every = populate(tmp_path, "plugin: gpufleet.gpu_operator.gpu_nodes\nhost_labels: all\n", [summary])
    assert every["hostvars"]["h100-1"]["gpu_labels"] == dict(MIXED_LABELS, **{"nvidia.com/gpu.present": "true"})
    none = populate(tmp_path, "plugin: gpufleet.gpu_operator.gpu_nodes\nhost_labels: none\n", [summary])
    assert "gpu_labels" not in none["hostvars"]["h100-1"] and none["hostvars"]["h100-1"]["gpu_count"] == 1


def test_host_labels_compact_under_the_single_strategy():
    from ansible_collections.gpufleet.gpu_operator.plugins.inventory.gpu_nodes import host_labels
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu.count": "7",
              "nvidia.com/gpu.memory": "4864", "nvidia.com/gpu.multiprocessors": "14", "nvidia.com/gpu.slices.gi": "1",
              "nvidia.com/gpu.engines.decoder": "0", "nvidia.com/gpu.family": "ampere", "nvidia.com/mig.capable": "true"}
    compact = sorted(host_labels(labels, "compact"))
    assert compact == ["nvidia.com/gpu.count", "nvidia.com/gpu.family", "nvidia.com/gpu.memory",
                       "nvidia.com/gpu.product", "nvidia.com/mig.capable"]
    assert host_labels(labels, "all") is labels and host_labels(labels, "none") is None


def test_host_labels_rejects_an_unknown_mode(tmp_path):
    path = tmp_path / "gpu_nodes.yml"
    path.write_text("plugin: gpufleet.gpu_operator.gpu_nodes\nhost_labels: most\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT]))
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", POPULATE, os.path.join(ROOT, ".collections"), str(path), "[]"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0 and "host_labels" in proc.stderr and "most" in proc.stderr, proc.stderr
