"""README's "On a real cluster", step by step, against a testbed cluster of its own (NVIDIA's real chart and
controller, simulated GPU nodes): the built tarball installed into an empty collections path, inventories/example
copied and filled in as step 1 says, then the playbooks by name as steps 2-4 say, with Ansible's default output.

What differs from a real cluster, and only that, is set where a user sets site specifics (the copied inventory):
the chart comes from the GPU Operator Go module on disk (no Helm repository here: chart_ref a local path,
chart_version empty, repo_add false), NFD is off (it cannot run on kwok nodes; they carry its labels), and the GPU
hosts are reached with a local connection whose NVML is the simulated library (no SSH, no GPUs here)."""

import json
import os
import re
import shutil
import sys
from pathlib import Path

import yaml

from tests.integration.collection.test_installed_playbooks import BIN, installed  # noqa: F401 pylint: disable=unused-import
from tests.integration.operator.conftest import NODES, operator_sandbox  # noqa: F401 pylint: disable=unused-import
from tests.testbed import operator as real_operator
from tests.testbed.agents.pytest_agents import nvml_lib_dir
from tests.support import playbook

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def readme_section():
    text = README.read_text()
    start = text.index("## On a real cluster")
    return text[start:text.index("\n## ", start + 1)]


def fill_in_inventory(mine, bed, agents):
    """Step 1: copy inventories/example/ and fill in group_vars/all.yml and the gpu_nodes group."""
    shutil.copytree(ROOT / "inventories" / "example", mine)
    all_vars = yaml.safe_load((mine / "group_vars" / "all.yml").read_text())
    context = yaml.safe_load(Path(bed.kubeconfig).read_text())["current-context"]
    assert "gpufleet_kubeconfig" in all_vars
    all_vars.update(gpufleet_kubeconfig=str(bed.kubeconfig), gpufleet_kube_context=context)
    (mine / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars))

    gpu_vars = yaml.safe_load((mine / "group_vars" / "gpu_nodes.yml").read_text())
    assert gpu_vars["gpu_operator_mig_strategy"] == "mixed" and gpu_vars["gpu_operator_chart_version"]
    assert "gpu_operator_mig_config" in (mine / "group_vars" / "gpu_nodes.yml").read_text()  # the custom config's place
    gpu_vars.update(gpu_operator_chart_ref=str(real_operator.chart_dir()), gpu_operator_chart_version="",
                    gpu_operator_repo_add=False, gpu_operator_extra_values={"nfd": {"enabled": False}},
                    gpu_operator_wait_timeout=180, gpu_validate_smoke_timeout=90)
    (mine / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(gpu_vars))

    lib_dir = str(nvml_lib_dir())
    hosts = {}
    for name, model, _count in NODES:
        nvml = {"LD_LIBRARY_PATH": lib_dir, "GPUFLEET_SIM_NVML_STATE": str(agents.state_path(name))}
        hosts[name] = {"gpu_model": model, "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "gpu_validate_host_environment": nvml, "mig_reconfigure_host_environment": nvml}
    (mine / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return mine


def run(installed, bed, *args, timeout=600):  # noqa: F811 - the fixture's value
    """ansible-playbook as a user runs it, default output; only the installed collection on the path, the testbed's
    helm on PATH, and no kubeconfig in the environment: the inventory's must be used."""
    env = dict(installed["env"])
    for key in list(env):
        if key == "KUBECONFIG" or key.startswith("K8S_AUTH_"):
            del env[key]
    # PWD as a shell sets it for the directory the user runs in (report.yml writes ./gpu-fleet-report there).
    env.update(PATH="%s%s%s" % (bed.bin_dir, os.pathsep, env["PATH"]), ANSIBLE_NOCOLOR="1", PWD=str(installed["tmp"]),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    for key, value in bed.env.items():
        if key.startswith("HELM_"):
            env[key] = value
    return playbook.run(*args, env=env, cwd=installed["tmp"], timeout=timeout)  # options and playbook in the order given


def test_readme_on_a_real_cluster_step_by_step(installed, operator_sandbox, tmp_path):  # noqa: F811
    section = readme_section()
    bed, agents = operator_sandbox.bed, operator_sandbox.agents
    names = [name for name, _model, _count in NODES]

    # 1. Copy inventories/example/ and fill it in.
    assert "Copy `inventories/example/`" in section and "`group_vars/all.yml` (kubeconfig, context" in section
    assert "`group_vars/gpu_nodes.yml` (chart version, MIG strategy, custom MIG configs)" in section
    mine = fill_in_inventory(installed["tmp"] / "inventories" / "mine", bed, agents)

    # 2. ansible-playbook -i inventories/mine site.yml (installed: gpufleet.gpu_operator.site)
    assert "`ansible-playbook -i inventories/mine site.yml`" in section and "gpufleet.gpu_operator.site" in section
    site = run(installed, bed, "-i", str(mine), "gpufleet.gpu_operator.site")
    assert site.returncode == 0, site.stdout[-6000:] + site.stderr[-2000:]
    assert "failed=0" in site.stdout
    for name in names:
        assert re.search(r"%s\s.*PASS" % re.escape(name), site.stdout), site.stdout[-4000:]
    assert json.loads(bed.helm("list", "-n", "gpu-operator", "-o", "json").stdout)[0]["status"] == "deployed"

    # 3. mig_reconfigure -e profile=all-balanced --check prints the plan and changes nothing ...
    assert "-e profile=all-balanced --check" in section and "gpufleet.gpu_operator.mig_reconfigure" in section
    before = dict((n, agents.labels(n).get("nvidia.com/mig.config")) for n in names)
    plan = run(installed, bed, "-i", str(mine), "gpufleet.gpu_operator.mig_reconfigure", "-e", "profile=all-balanced",
               "--check")
    assert plan.returncode == 0, plan.stdout[-6000:] + plan.stderr[-2000:]
    for name in names:
        assert re.search(r"%s\s+\S+\s.*all-balanced|%s\s.*change" % (re.escape(name), re.escape(name)), plan.stdout), \
            plan.stdout[-4000:]
    assert dict((n, agents.labels(n).get("nvidia.com/mig.config")) for n in names) == before

    # ... drop --check to roll it out (-e max_unavailable=25%), each node's step printed as it goes.
    assert "-e max_unavailable=25%" in section
    rolled = run(installed, bed, "-i", str(mine), "gpufleet.gpu_operator.mig_reconfigure", "-e", "profile=all-balanced",
                 "-e", "max_unavailable=25%")
    assert rolled.returncode == 0, rolled.stdout[-6000:] + rolled.stderr[-2000:]
    for name in names:
        labels = agents.labels(name)
        assert labels.get("nvidia.com/mig.config") == "all-balanced", (name, labels)
        assert labels.get("nvidia.com/mig.config.state") == "success", (name, labels)
        assert re.search(r"MIG rollout: \S+  %s  done" % re.escape(name), rolled.stdout), rolled.stdout[-4000:]
        assert not bed.core.read_node(name).spec.unschedulable
        assert "MigReconfigureVerified" in bed.kubectl("describe", "node", name).stdout

    # 4. report.yml writes the fleet report (installed: gpufleet.gpu_operator.report), in ./gpu-fleet-report.
    assert "`ansible-playbook -i inventories/mine report.yml` writes the fleet report (`./gpu-fleet-report/" in section
    report_proc = run(installed, bed, "-i", str(mine), "gpufleet.gpu_operator.report")
    assert report_proc.returncode == 0, report_proc.stdout[-6000:] + report_proc.stderr[-2000:]
    report = json.loads((installed["tmp"] / "gpu-fleet-report" / "report.json").read_text())
    configs = dict((n["name"], n["mig_config"]) for n in report["nodes"])
    assert all(configs.get(name) == "all-balanced" for name in names), configs
    assert (installed["tmp"] / "gpu-fleet-report" / "report.html").read_text().count('<svg class="gpu"') == sum(
        count for _n, _m, count in NODES)
