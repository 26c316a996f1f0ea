"""The host roles refuse a host reached with ansible_connection=local (the controller), the connection the gpu_nodes
inventory plugin's API-only hosts and the AWX inventory use, before any task changes or even reads the host; an
explicit <role>_allow_local_connection lets a controller that is the GPU host through."""

import sys
from pathlib import Path

import pytest
import yaml
from tests.support import playbook

ROOT = Path(__file__).resolve().parents[3]


def run(tmp_path, role, extra_vars):
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-1.example.internal": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "the host role", "ansible.builtin.include_role": {"name": "gpufleet.gpu_operator." + role}}]}]))
    proc = playbook.run(tmp_path / "play.yml", inventory=tmp_path / "inventory.yml", extra_vars=extra_vars, check=True,
                        env=playbook.environment(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"), cwd=ROOT)
    data = playbook.json_results(proc.stdout)
    tasks = [(t["task"]["name"], t["hosts"].get("gpu-1.example.internal", {})) for t in data["plays"][0]["tasks"]]
    return proc.returncode, tasks


@pytest.mark.parametrize("role", ["nvidia_driver", "container_toolkit"])
def test_a_local_connection_host_is_refused_before_anything_runs(tmp_path, role):
    rc, tasks = run(tmp_path, role, {})
    assert rc != 0
    ran = [name for name, result in tasks if not result.get("skipped")]
    assert ran[-1].endswith("Refuse to change the controller through a local connection"), ran
    failed = tasks[-1][1]
    assert failed.get("failed") and "host gpu-1.example.internal has ansible_connection=local" in failed["msg"]
    assert "%s_allow_local_connection=true" % role in failed["msg"]
    assert not any("Gather the facts" in name for name in ran), ran  # the host was not even read


@pytest.mark.parametrize("role", ["nvidia_driver", "container_toolkit"])
def test_the_allow_variable_lets_a_controller_that_is_the_gpu_host_through(tmp_path, role):
    _rc, tasks = run(tmp_path, role, {"%s_allow_local_connection" % role: True})
    guard = [result for name, result in tasks if name.endswith("Refuse to change the controller through a local connection")]
    assert guard and not guard[0].get("failed"), tasks
    assert len(tasks) > 2, tasks  # the role went on past its guard (what it finds on this machine is not asserted)


@pytest.mark.parametrize("stage,role", [("driver", "nvidia_driver"), ("toolkit", "container_toolkit")])
def test_site_refuses_the_controller_before_reading_it(tmp_path, stage, role):
    """site.yml's host stages, asked for on an inventory host with a local connection: the role's guard is the first
    task that runs on the host, so the controller is neither changed nor read (no fact gathering before it)."""
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-1.example.internal": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    proc = playbook.run(ROOT / "site.yml", "--tags", stage, inventory=tmp_path / "inventory.yml", check=True,
                        extra_vars={"gpufleet_preflight": False, "gpu_host_%s_install" % stage: True},
                        env=playbook.environment(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"), cwd=ROOT)
    assert proc.returncode != 0, proc.stdout[-3000:]
    data = playbook.json_results(proc.stdout)
    ran = [(task["task"]["name"], task["hosts"]["gpu-1.example.internal"]) for play in data["plays"]
           for task in play["tasks"] if "gpu-1.example.internal" in task["hosts"]
           and not task["hosts"]["gpu-1.example.internal"].get("skipped")]
    assert ran and ran[-1][0].endswith("Refuse to change the controller through a local connection"), ran
    assert ran[-1][1].get("failed") and "%s_allow_local_connection=true" % role in ran[-1][1]["msg"], ran[-1]
    assert not any("Gather the facts" in name or name == "Gathering Facts" for name, _result in ran), ran
