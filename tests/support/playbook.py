"""ansible-playbook as the tests run it: this venv's, on the checkout's ansible.cfg, output captured, never raising
on a failed run (the test asserts on the return code and output)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = str(BIN / "ansible-playbook")


def command(playbook, *args, inventory=None, extra_vars=None, check=False, diff=False):
    """The argv: ``extra_vars`` (a dict) is passed as JSON on the command line."""
    cmd = [ANSIBLE_PLAYBOOK, str(playbook)]
    if inventory is not None:
        cmd += ["-i", str(inventory)]
    if extra_vars is not None:
        cmd += ["-e", json.dumps(extra_vars)]
    cmd += [str(a) for a in args]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    return cmd


def environment(base=None, config=REPO_ROOT / "ansible.cfg", **variables):
    """``base`` (else this process's environment) with ANSIBLE_CONFIG=``config`` (None leaves it out, as a user
    without the checkout's ansible.cfg has it), this venv's bin first on PATH, and ``variables`` over them."""
    env = dict(os.environ if base is None else base)
    env.pop("ANSIBLE_CONFIG", None)
    if config is not None:
        env["ANSIBLE_CONFIG"] = str(config)
    env["PATH"] = "%s%s%s" % (BIN, os.pathsep, env.get("PATH", ""))
    env.update(variables)
    return env


def run(playbook, *args, inventory=None, extra_vars=None, check=False, diff=False, env=None, cwd=REPO_ROOT,
        timeout=300):
    """Run ansible-playbook to the end; a subprocess.CompletedProcess with text stdout and stderr."""
    return subprocess.run(command(playbook, *args, inventory=inventory, extra_vars=extra_vars, check=check, diff=diff),
                          env=environment() if env is None else env, cwd=str(cwd), capture_output=True, text=True,
                          timeout=timeout, check=False)


def json_results(stdout):
    """The ansible.posix.json callback's document from ``stdout`` (warnings may come before it)."""
    return json.loads(stdout[stdout.index("{"):]) if "{" in stdout else {"plays": []}
