"""Role inputs from the inventory: the playbooks set no role input in play vars, so group_vars reach the roles,
-e outranks them, and the short -e names (profile, max_unavailable, nodes) still work. report.yml connects with
the inventory's gpufleet_kubeconfig. A GPU host that gpu_info cannot read is a warning naming it, or a failure with
mig_reconfigure_require_hardware. Plan-only (--check) runs against the testbed."""

import json
import sys
import tempfile
from pathlib import Path

import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK, REPO_ROOT, PlaybookResult, node_view
from tests.integration.reconfigure.test_rollout import wait_advertised
from tests.testbed.pytest_cluster import unique_name
from tests.support import playbook as ansible_playbook

CONFIG = "nvidia.com/mig.config"
ROLE_DIR = REPO_ROOT / "roles"


def role_inputs():
    inputs = set()
    for spec in ROLE_DIR.glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            inputs.update(entry.get("options", {}))
    return inputs


def write_inventory(workdir, nodes, gpu_nodes_vars, all_vars=None):
    """An inventory directory as a user keeps one: hosts.yml plus group_vars/all.yml and group_vars/gpu_nodes.yml."""
    inventory = Path(workdir) / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}, "children": {
        "gpu_nodes": {"hosts": dict((n, dict(local)) for n in nodes)}}}}))
    (inventory / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(gpu_nodes_vars))
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars or {}))
    return inventory


def play(runner, playbook, inventory, extra_vars=None, check=True, env=None):
    proc = ansible_playbook.run(playbook, inventory=inventory, extra_vars=extra_vars or None, check=check,
                                env=env or runner.env())
    return PlaybookResult(proc.returncode, proc.stdout, proc.stderr)


def test_playbooks_set_no_role_input_in_play_vars():
    """Play vars outrank group_vars: a role input there would silently win over the inventory."""
    inputs = role_inputs()
    assert {"mig_reconfigure_max_unavailable", "gpu_report_dir", "gpu_operator_mig_strategy"} <= inputs
    for playbook in sorted((REPO_ROOT / "playbooks").glob("*.yml")):
        for entry in yaml.safe_load(playbook.read_text()):
            assert not set(entry.get("vars") or {}) & inputs, "%s sets role inputs in play vars" % playbook.name


def test_group_vars_reach_mig_reconfigure_and_e_outranks_them(testbed, gpu_cluster, add_gpu_node, runner, tmp_path):
    names = sorted([add_gpu_node("inv-a", "H100-80GB-HBM3", 1), add_gpu_node("inv-b", "H100-80GB-HBM3", 1)])
    for name in names:
        wait_advertised(testbed, name)
    before = dict((n, node_view(testbed, n)["labels"].get(CONFIG)) for n in names)
    group_vars = {"mig_reconfigure_profile": "all-balanced", "mig_reconfigure_nodes": [names[1]],
                  "mig_reconfigure_max_unavailable": "0", "mig_reconfigure_collect_hardware": False,
                  "mig_reconfigure_lock_name": unique_name("inv-lock")}
    inventory = write_inventory(tmp_path, names, group_vars)

    # max_unavailable 0 from group_vars is used (and refused) ...
    refused = play(runner, PLAYBOOK, inventory)
    assert refused.rc != 0, refused.explain()
    message = refused.task("Plan every node")["msg"]
    assert "max_unavailable" in message and "0" in message, refused.explain()
    assert not refused.ran("Reconfigure")

    # ... the short -e name outranks it; profile and nodes still come from group_vars.
    planned = play(runner, PLAYBOOK, inventory, {"max_unavailable": "50%"})
    assert planned.rc == 0, planned.explain()
    plan = planned.task("Plan every node")["plan"]
    assert [p["node"] for p in plan] == [names[1]] and all(p["target_config"] == "all-balanced" for p in plan), plan

    # -e of the short names outranks group_vars for profile and nodes too, and -e of the full name wins over all.
    other = play(runner, PLAYBOOK, inventory, {"max_unavailable": "1", "profile": "all-1g.10gb", "nodes": names[0]})
    assert other.rc == 0, other.explain()
    assert [(p["node"], p["target_config"]) for p in other.task("Plan every node")["plan"]] == [(names[0], "all-1g.10gb")]
    full = play(runner, PLAYBOOK, inventory, {"max_unavailable": "1", "profile": "all-1g.10gb",
                                              "mig_reconfigure_profile": "all-disabled"})
    assert {p["target_config"] for p in full.task("Plan every node")["plan"]} == {"all-disabled"}, full.explain()
    assert dict((n, node_view(testbed, n)["labels"].get(CONFIG)) for n in names) == before


def test_unreadable_gpu_host_warns_or_fails_with_require_hardware(testbed, gpu_cluster, add_gpu_node, runner,
                                                                  tmp_path):
    name = add_gpu_node("inv-nonvml", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, name)
    before = node_view(testbed, name)["labels"].get(CONFIG)
    no_nvml = tempfile.mkdtemp(dir=str(tmp_path))  # a host without libnvidia-ml: gpu_info cannot read it
    group_vars = {"mig_reconfigure_profile": "all-balanced", "mig_reconfigure_lock_name": unique_name("inv-lock"),
                  "mig_reconfigure_host_environment": {"LD_LIBRARY_PATH": no_nvml,
                                                       "GPUFLEET_SIM_NVML_STATE": str(tmp_path / "none.state")}}
    inventory = write_inventory(tmp_path, [name], group_vars)

    warned = play(runner, PLAYBOOK, inventory)
    assert warned.rc == 0, warned.explain()
    warning = warned.task("Warn about a GPU host whose GPUs could not be read")["msg"]
    assert warning.startswith("WARNING:") and name in warning and "nvidia-ml-py" in warning, warning
    assert [p["hardware_source"] for p in warned.task("Plan every node")["plan"]] == ["gfd labels"]

    failed = play(runner, PLAYBOOK, inventory, {"mig_reconfigure_require_hardware": True})
    assert failed.rc != 0, failed.explain()
    message = failed.task("Stop before any change when the hardware is required")["msg"]
    assert name in message and "nothing was changed" in message, message
    assert not failed.ran("Plan every node")
    assert node_view(testbed, name)["labels"].get(CONFIG) == before


def test_report_uses_the_inventory_kubeconfig_and_group_vars(testbed, automation_kubeconfig, add_gpu_node,
                                                             runner, tmp_path):
    name = add_gpu_node("inv-report", "H100-80GB-HBM3", 1, labels={"gpufleet.test/inv-report": "yes"})
    out = tmp_path / "report-out"
    inventory = write_inventory(tmp_path, [], {}, {
        "gpufleet_kubeconfig": str(automation_kubeconfig), "gpu_report_dir": str(out),
        "gpu_report_label_selector": "gpufleet.test/inv-report=yes", "gpu_report_fail_on": ["stuck"],
        "gpu_report_stuck_after": 100000})
    env = runner.env()
    env.pop("K8S_AUTH_KUBECONFIG")
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")  # only the inventory's gpufleet_kubeconfig can work
    result = play(runner, REPO_ROOT / "report.yml", inventory, check=False, env=env)
    assert result.rc == 0, result.explain()
    report = json.loads((out / "report.json").read_text())
    assert [n["name"] for n in report["nodes"]] == [name]
    assert report["options"]["stuck_after_s"] == 100000
