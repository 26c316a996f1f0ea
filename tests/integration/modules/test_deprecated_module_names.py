"""Deprecated module names (meta/runtime.yml plugin_routing) still work through their redirect, with a deprecation
warning naming the replacement, run as a user runs them: ansible-playbook with the collection's FQCN, the Kubernetes
connection set once through module_defaults of the action group (group/gpufleet.gpu_operator.k8s)."""

import os
import sys
from pathlib import Path

import yaml

from tests.integration.reconfigure.conftest import REPO_ROOT
from tests.support import playbook

# deprecated name -> (the module it leads to, options that make it read the cluster and return quickly)
REDIRECTS = {
    "gpu_cluster_facts": ("gpu_cluster_info", {"label_selector": "test.gpufleet.io/matches=nothing"}),
}


def run_playbook(testbed, workdir, tasks):
    play = [{"name": "redirected modules", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable},
             "module_defaults": {"group/gpufleet.gpu_operator.k8s": {"kubeconfig": testbed.kubeconfig}},
             "tasks": tasks}]
    path = Path(workdir) / "redirect.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ)
    env.update(testbed.env)
    for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG"):  # the connection comes from module_defaults only
        env.pop(name, None)
    env.update({"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                "ANSIBLE_DEPRECATION_WARNINGS": "true", "ANSIBLE_NOCOLOR": "1",
                "PATH": "%s%s%s" % (Path(sys.executable).parent, os.pathsep, env.get("PATH", ""))})
    proc = playbook.run(path, inventory="localhost,", env=env)
    data = playbook.json_results(proc.stdout)
    results = dict((task["task"]["name"], list(task["hosts"].values())[0])
                   for play in data["plays"] for task in play["tasks"])
    return proc, results


def test_deprecated_names_run_the_new_module_and_warn(testbed, tmp_path):
    tasks = []
    for old, (new, args) in sorted(REDIRECTS.items()):
        tasks.append({"name": "old %s" % old, "gpufleet.gpu_operator.%s" % old: args})
        tasks.append({"name": "new %s" % new, "gpufleet.gpu_operator.%s" % new: args})
    proc, results = run_playbook(testbed, tmp_path, tasks)
    shown = " ".join(proc.stderr.split())  # what the user sees besides the callback's output
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    for old, (new, _args) in sorted(REDIRECTS.items()):
        through_redirect, direct = results["old %s" % old], results["new %s" % new]
        assert not through_redirect.get("failed"), through_redirect
        # The same module ran (its report of the empty selection, the same keys), with the connection given only
        # through module_defaults of the action group.
        notes = ("deprecations", "warnings")
        assert sorted(k for k in through_redirect if k not in notes) == sorted(k for k in direct if k not in notes)
        assert through_redirect["report"]["totals"]["nodes"] == direct["report"]["totals"]["nodes"] == 0
        # The deprecation names the old module, the replacement and the version that removes it; the new name has none.
        line = "[DEPRECATION WARNING]: gpufleet.gpu_operator.%s has been deprecated." % old
        assert shown.count(line) == 1, shown[-3000:]
        assert "use gpufleet.gpu_operator.%s" % new in shown and "version 1.0.0" in shown, shown[-3000:]
        messages = [d.get("msg", "") for d in through_redirect.get("deprecations") or []]
        assert any("gpufleet.gpu_operator.%s has been deprecated" % old in m for m in messages), through_redirect
        assert not direct.get("deprecations"), direct["deprecations"]
    assert shown.count("[DEPRECATION WARNING]") == len(REDIRECTS), shown[-3000:]
