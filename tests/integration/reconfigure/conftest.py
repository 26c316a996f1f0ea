"""Helpers for the reconfiguration tests: least-privilege credentials, running our modules and the playbook
as a user would (ansible-playbook), workloads on nodes, and the "nothing was lost" checks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.support import playbook as ansible_playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
RBAC_FILE = REPO_ROOT / "rbac" / "mig-reconfigure.yaml"
UNWEDGE_RBAC_FILE = REPO_ROOT / "rbac" / "mig-reconfigure-unwedge.yaml"
TEST_LEASES_RBAC_FILE = Path(__file__).resolve().parent / "rbac-test-leases.yaml"
# The role's default mig_reconfigure_lock_name: the one Lease rbac/mig-reconfigure.yaml lets the account renew.
LOCK_NAME = "gpufleet-mig-rollout"
PLAYBOOK = REPO_ROOT / "mig-reconfigure.yml"
SA_NAMESPACE = "gpu-operator"
SA_NAME = "gpufleet-automation"
PRIOR_ANNOTATION = "gpufleet.io/prior-unschedulable"


def apply_automation_rbac(testbed):
    """Bind the automation ServiceAccount by rbac/mig-reconfigure.yaml and the opt-in un-wedge file, plus the
    tests' own Lease names (rbac-test-leases.yaml says why); returns its kubeconfig."""
    testbed.kubectl("create", "namespace", SA_NAMESPACE, check=False)
    testbed.kubectl("apply", "-f", str(RBAC_FILE), "-f", str(UNWEDGE_RBAC_FILE), "-f", str(TEST_LEASES_RBAC_FILE))
    return testbed.serviceaccount_kubeconfig(SA_NAMESPACE, SA_NAME)


@pytest.fixture(scope="session")
def automation_kubeconfig(testbed):
    """Kubeconfig of the automation ServiceAccount bound to the rbac/ files of the reconfiguration (the testbed's
    API server enforces RBAC, so a missing verb is a 403 in the test)."""
    return apply_automation_rbac(testbed)


class Runner(object):
    """Runs ansible-playbook with the JSON callback against the testbed under a given kubeconfig."""

    def __init__(self, kubeconfig, workdir, env=None):
        self.kubeconfig = str(kubeconfig)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.extra_env = dict(env or {})  # the controller's environment beside the testbed's

    def env(self):
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ)
        env.update({
            "K8S_AUTH_KUBECONFIG": self.kubeconfig,
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
            "PATH": "%s%s%s" % (bin_dir, os.pathsep, env.get("PATH", "")),
        })
        env.pop("KUBECONFIG", None)
        env.update(self.extra_env)
        return env

    def inventory(self, nodes, name="inventory.yml", host_vars=None, groups=None):
        """``groups``: further inventory groups, name -> their hosts (each also in gpu_nodes)."""
        path = self.workdir / name
        hosts = dict((n, dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                              **(host_vars or {}).get(n, {}))) for n in nodes)
        children = {"gpu_nodes": {"hosts": hosts}}
        children.update((group, {"hosts": dict((h, {}) for h in members)}) for group, members in (groups or {}).items())
        path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
            "children": children}}))
        return path

    def playbook(self, playbook, nodes, extra_vars=None, check=False, timeout=600, popen=False, host_vars=None,
                 diff=False, groups=None):
        """Run ``playbook`` with ``nodes`` as the gpu_nodes hosts (connection local; ``host_vars`` per node;
        ``groups``: further inventory groups, name -> hosts)."""
        inventory = self.inventory(nodes or [], host_vars=host_vars, groups=groups)
        if popen:
            return subprocess.Popen(ansible_playbook.command(playbook, inventory=inventory, extra_vars=extra_vars or {},
                                                             check=check, diff=diff),
                                    env=self.env(), cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        proc = ansible_playbook.run(playbook, inventory=inventory, extra_vars=extra_vars or {}, check=check, diff=diff,
                                    env=self.env(), timeout=timeout)
        return PlaybookResult(proc.returncode, proc.stdout, proc.stderr)

    def module(self, module, args, check=False, timeout=600):
        """Run one module of the collection on localhost; returns its result dict (with 'failed')."""
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
            "name": "module under test", "gpufleet.gpu_operator.%s" % module: args,
            "register": "result", "ignore_errors": True}]}]
        path = self.workdir / ("%s.yml" % module)
        path.write_text(yaml.safe_dump(play))
        result = self.playbook(path, [], check=check, timeout=timeout)
        return result.task("module under test")


class PlaybookResult(object):
    def __init__(self, rc, stdout, stderr):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        try:
            start = stdout.index("{")
            self.data = json.loads(stdout[start:])
        except ValueError:
            self.data = {"plays": []}

    def tasks(self):
        for play in self.data.get("plays", []):
            yield from play.get("tasks", [])

    @staticmethod
    def _name(task):
        """The task's own name, without the 'role : ' prefix Ansible adds to role tasks."""
        return task["task"]["name"].split(" : ", 1)[-1]

    def task(self, name):
        """First host result of the last task whose name starts with ``name``."""
        found = None
        for task in self.tasks():
            if self._name(task).startswith(name):
                hosts = task.get("hosts") or {}
                if hosts:
                    found = list(hosts.values())[0]
        if found is None:
            raise AssertionError("no task %r ran (rc %s)\nstdout tail:\n%s\nstderr:\n%s" % (
                name, self.rc, self.stdout[-4000:], self.stderr[-4000:]))
        return found

    def ran(self, name):
        return any(self._name(t).startswith(name) and any(
            not h.get("skipped") for h in (t.get("hosts") or {}).values()) for t in self.tasks())

    def explain(self):
        return "rc %s\nstdout tail:\n%s\nstderr tail:\n%s" % (self.rc, self.stdout[-6000:], self.stderr[-3000:])


@pytest.fixture
def runner(automation_kubeconfig, tmp_path):
    return Runner(automation_kubeconfig, tmp_path / "ansible")


# -- workloads ------------------------------------------------------------------------------------------

def ensure_runtime_class(testbed, name="nvidia"):
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}))


def deploy(testbed, namespace, name, node, replicas=1, resources=None, runtime_class=None, labels=None):
    """A Deployment pinned to ``node`` (so evicted pods come back Pending while it is cordoned)."""
    labels = dict(labels or {}, app=name)
    # matchFields on metadata.name: kwok nodes carry no kubernetes.io/hostname label.
    pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pinned]}}},
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": resources or {}}}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))


def pdb(testbed, namespace, name, app, min_available):
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}))


def running_pods(testbed, node, namespace=None):
    """{ns/name: uid} of the pods bound to ``node`` and not being deleted (optionally of one namespace)."""
    pods = testbed.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
    return dict(("%s/%s" % (p.metadata.namespace, p.metadata.name), p.metadata.uid)
                for p in pods if not p.metadata.deletion_timestamp
                and (namespace is None or p.metadata.namespace == namespace))


def wait_running(testbed, node, count, namespace=None):
    def check():
        pods = testbed.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
        pods = [p for p in pods if (namespace is None or p.metadata.namespace == namespace)
                and p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return pods if len(pods) >= count else None
    return testbed.wait_for(check, 90, "%d running pods on %s" % (count, node))


# NVIDIA's node-labeling controller sets this on every GPU node whenever it next reconciles
# (gpu-operator controllers/nodelabeling_controller.go, applyDriverAutoUpgradeAnnotation), which may fall in the middle
# of a test; a rollout never writes it, so a before/after comparison of a node leaves it out.
OPERATOR_TIMED_ANNOTATIONS = ("nvidia.com/gpu-driver-upgrade-enabled",)


def node_view(testbed, node):
    n = testbed.core.read_node(node)
    annotations = {k: v for k, v in (n.metadata.annotations or {}).items() if k not in OPERATOR_TIMED_ANNOTATIONS}
    return {"unschedulable": bool(n.spec.unschedulable), "labels": dict(n.metadata.labels or {}),
            "annotations": annotations, "allocatable": dict(n.status.allocatable or {})}


def assert_nothing_lost(before, after, evicted, node):
    """Every pod on the node before is still there unless the run reported it evicted, and vice versa."""
    gone = sorted(set(before) - set(after))
    assert gone == sorted(evicted), "node %s: pods gone %s but reported evicted %s" % (node, gone, sorted(evicted))
