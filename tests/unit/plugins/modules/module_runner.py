"""Run a module of this collection as Ansible does: a Python process reading its arguments file, JSON on stdout."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))


def run_module(tmp_path, module_name, **args):
    path = tmp_path / ("%s-args.json" % module_name)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT]))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", module_name + ".py"), str(path)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("%s printed no JSON result (rc %s): %s %s" % (module_name, proc.returncode, proc.stdout, proc.stderr))


def warnings(result):
    """The warning texts of a result (ansible-core 2.19 returns them as structured summaries)."""
    texts = []
    for warning in result.get("warnings") or []:
        if isinstance(warning, dict):
            warning = (warning.get("event") or {}).get("msg") or warning.get("msg") or ""
        texts.append(warning)
    return texts
