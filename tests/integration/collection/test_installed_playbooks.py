"""The collection as a user installs it: the built tarball installed into an empty collections path (nothing from
this checkout on the path), then every playbook run by its FQCN (gpufleet.gpu_operator.<name>) with --syntax-check
and --list-tasks, which resolves each import and role of the installed copy. The root-level entry points of a checkout
keep working."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import playbook

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
# FQCN -> a task name only that playbook's roles have (proves the roles of the installed copy were loaded).
PLAYBOOKS = {
    "gpufleet.gpu_operator.site": "gpu_operator : ",
    "gpufleet.gpu_operator.mig_reconfigure": "mig_reconfigure : Plan every node",
    "gpufleet.gpu_operator.report": "gpu_report : Gather the fleet's GPU facts",
}


def clean_env(tmp, collections):
    """An environment in which only ``collections`` (and ansible's own bundled collections) can be found."""
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHONPATH")))
    cfg = Path(tmp) / "ansible.cfg"
    cfg.write_text("[defaults]\ncollections_path = %s\ninterpreter_python = auto_silent\n" % collections)
    env.update({"ANSIBLE_CONFIG": str(cfg), "ANSIBLE_LOCALHOST_WARNING": "false",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false", "HOME": str(tmp),
                "PATH": "%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", ""))})
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("installed")
    build = tmp / "build"
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(build), str(ROOT)],
                   cwd=str(ROOT), check=True, capture_output=True, text=True, timeout=300)
    tarball = next(build.glob("gpufleet-gpu_operator-*.tar.gz"))
    collections = tmp / "collections"
    env = clean_env(tmp, collections)
    # Dependencies (kubernetes.core, ansible.utils) come with the ansible package; install only this collection.
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(collections),
                    str(tarball)], cwd=str(tmp), env=env, check=True, capture_output=True, text=True, timeout=300)
    installed_at = collections / "ansible_collections" / "gpufleet" / "gpu_operator"
    assert (installed_at / "MANIFEST.json").is_file() and not installed_at.is_symlink()
    inventory = tmp / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-a: {}\n")
    return {"tmp": tmp, "env": env, "inventory": inventory, "path": installed_at}


def ansible_playbook(installed, name, *args, **kwargs):
    return playbook.run(name, *args, inventory=installed["inventory"], env=installed["env"], cwd=installed["tmp"], **kwargs)


@pytest.mark.parametrize("fqcn", sorted(PLAYBOOKS))
def test_playbook_runs_by_fqcn_from_the_installed_collection(installed, fqcn):
    syntax = ansible_playbook(installed, fqcn, "--syntax-check")
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    listed = ansible_playbook(installed, fqcn, "--list-tasks", extra_vars={"profile": "all-balanced"})
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert PLAYBOOKS[fqcn] in listed.stdout, listed.stdout


def test_only_the_installed_copy_is_on_the_path(installed):
    """ansible-galaxy sees the collection in the temp path only, and the old hyphenated name (a file name that is
    no valid FQCN) is not found."""
    proc = ansible_playbook(installed, "gpufleet.gpu_operator.mig-reconfigure", "--syntax-check")
    assert proc.returncode != 0 and "could not be found" in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    listed = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", "gpufleet.gpu_operator"],
                            cwd=str(installed["tmp"]), env=installed["env"], capture_output=True, text=True,
                            timeout=120, check=False)
    assert str(installed["path"].parent.parent) in listed.stdout, listed.stdout


@pytest.mark.parametrize("entry", ["site.yml", "mig-reconfigure.yml", "report.yml"])
def test_root_entry_points_of_a_checkout(entry):
    proc = playbook.run(entry, "--list-tasks", extra_vars={"profile": "all-balanced"}, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
