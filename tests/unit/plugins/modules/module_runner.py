"""Run a module of this collection as Ansible does: a Python process reading its arguments file, JSON on stdout."""

import json
import os
import subprocess
import sys
import tempfile

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


WORKER = r"""
import contextlib, importlib, io, json, sys, traceback
from ansible.module_utils.testing import patch_module_args
module = importlib.import_module("ansible_collections.gpufleet.gpu_operator.plugins.modules." + sys.argv[1])
reply = sys.stdout
for line in sys.stdin:
    captured = io.StringIO()
    try:
        with patch_module_args(json.loads(line)), contextlib.redirect_stdout(captured):
            module.main()
        result = {"worker_error": "main() returned without exit_json or fail_json"}
    except SystemExit:
        try:
            result = json.loads(captured.getvalue())
        except ValueError:
            result = {"worker_error": "no JSON result", "stdout": captured.getvalue()}
    except BaseException:  # a traceback is what Ansible would show the user
        result = {"traceback": traceback.format_exc()}
    reply.write(json.dumps(result) + "\n")
    reply.flush()
"""


class ModuleWorker(object):
    """One process that imports a module once and runs its ``main()`` for each argument set, as Ansible runs it
    (arguments through AnsibleModule's own loader, the JSON result it prints). Used where hundreds of inputs are run:
    a process per input would cost ~0.6 s each. ``env`` replaces the process environment (e.g. no kubeconfig)."""

    def __init__(self, module_name, env=None, timeout=60):
        self.module_name = module_name
        self.timeout = timeout
        base = dict(env if env is not None else os.environ)
        base["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT])
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, module_name], env=base, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)

    def run(self, args):
        import select

        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        ready, _w, _x = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.close()
            raise AssertionError("%s did not answer within %s s for %r (waiting on something?)"
                                 % (self.module_name, self.timeout, args))
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise AssertionError("%s worker died: %s" % (self.module_name, self.stderr.read()))
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            stream.close()
