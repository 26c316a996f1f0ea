"""The gpu_nodes inventory plugin without an API server: file names it accepts, and the hosts, host variables and
groups it builds from node summaries. The plugin runs in a child process through Ansible's plugin loader (options come
from its DOCUMENTATION), with the API listing replaced by the summaries given. Listing nodes from a cluster, caching and
connection errors are covered by tests/integration/inventory/test_gpu_nodes_inventory.py (see docs/testing.md)."""

import json
import os
import subprocess
import sys

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
