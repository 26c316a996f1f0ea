"""Generated bad input pointed at the testbed cluster: refused, and the cluster left exactly as it was.

A sample of the bad inputs of tests/unit/reliability (same strategies, derandomized) is aimed at real objects:
simulated GPU nodes with GPU and CPU workloads, NVIDIA's ClusterPolicy, a Lease. The modules that can change the
cluster (drain, MIG config label, rollout, Lease, smoke pods) and the read-only ones run as Ansible runs them
(one process per module, arguments through AnsibleModule) under the testbed's admin kubeconfig, so a missing check
would be free to act. A few bad role inputs run through ansible-playbook (mig-reconfigure.yml, the gpu_operator
role's reconfigure entry point). Before and after every run the cluster is read: node labels, annotations, taints
and unschedulable; pods; ConfigMaps; ClusterPolicies; Leases. Any difference fails the test naming the input.
"""

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.reconfigure.conftest import PLAYBOOK, Runner, deploy, wait_running
from tests.testbed.pytest_cluster import unique_name
from tests.unit.plugins.modules.module_runner import ModuleWorker
from tests.unit.reliability import bad_inputs

HERE = Path(__file__).resolve().parent
OPERATOR_RECONFIGURE = HERE.parent / "operator" / "reconfigure.yml"
# Modules that talk to the cluster; the ones that can change it first.
API_MODULES = ["gpu_drain", "node_mig_config", "mig_rollout", "mig_rollout_lock", "gpu_smoke_test",
               "gpu_operator_status", "gpu_operator_upgrade_check", "gpu_node_validate", "gpu_cluster_info"]
PER_MODULE = 4  # distinct bad inputs per module: 36 module runs, plus the playbook runs
PLACEHOLDER = "gpu-node-1"  # the node name bad_inputs.MODULE_BASE uses; replaced by a real node here
CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"


def sample_cases(node):
    """PER_MODULE distinct bad inputs per API module (derandomized: the same ones every run), aimed at ``node``."""
    specs = bad_inputs.load_module_specs()
    cases = []
    for module in API_MODULES:
        strategies = [s for kind, s in bad_inputs.module_faults(module, specs[module]) if kind != "malformed kubeconfig"]
        for case in _first_distinct(st.sampled_from(strategies).flatmap(lambda s: s), PER_MODULE):
            args = json.loads(json.dumps(case.args, default=repr).replace(PLACEHOLDER, node))
            cases.append(case._replace(args=args))
    return cases


def _first_distinct(strategy, count):
    """``count`` distinct cases, as many kinds of fault as there are first (derandomized draws)."""
    found = {}

    @settings(max_examples=80, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(case=strategy)
    def collect(case):
        found.setdefault(json.dumps(case.args, sort_keys=True, default=repr), case)

    collect()
    by_kind = {}
    for case in found.values():
        by_kind.setdefault(case.kind, []).append(case)
    picked = []
    while len(picked) < count and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(picked) < count:
                picked.append(by_kind[kind].pop(0))
    return picked


# -- the cluster, read ----------------------------------------------------------------------------------------------
def _kubectl_items(testbed, kind):
    out = testbed.kubectl("get", kind, "--all-namespaces", "-o", "json").stdout
    return json.loads(out)["items"]


def snapshot(testbed):
    """What bad input must not change. Fields the cluster itself rewrites all the time are left out: Lease renewTime
    (leader election and node heartbeats), status, resourceVersion."""
    nodes = {}
    for node in testbed.core.list_node().items:
        nodes[node.metadata.name] = {
            "labels": dict(node.metadata.labels or {}), "annotations": dict(node.metadata.annotations or {}),
            "taints": sorted((t.key, t.value, t.effect) for t in node.spec.taints or []),
            "unschedulable": bool(node.spec.unschedulable)}
    pods = dict(("%s/%s" % (p.metadata.namespace, p.metadata.name),
                 (p.metadata.uid, p.spec.node_name, bool(p.metadata.deletion_timestamp)))
                for p in testbed.core.list_pod_for_all_namespaces().items)
    configmaps = dict(("%s/%s" % (c.metadata.namespace, c.metadata.name), (c.metadata.uid, c.data, c.metadata.labels))
                      for c in testbed.core.list_config_map_for_all_namespaces().items)
    policies = dict((p["metadata"]["name"], (p["metadata"].get("generation"), p["spec"]))
                    for p in _kubectl_items(testbed, "clusterpolicies.nvidia.com"))
    leases = {}
    for lease in _kubectl_items(testbed, "leases.coordination.k8s.io"):
        spec = dict(lease.get("spec") or {})
        spec.pop("renewTime", None)
        leases["%s/%s" % (lease["metadata"]["namespace"], lease["metadata"]["name"])] = (lease["metadata"]["uid"], spec)
    return {"nodes": nodes, "pods": pods, "configmaps": configmaps, "clusterpolicies": policies, "leases": leases}


def differences(before, after):
    out = []
    for part in sorted(before):
        for key in sorted(set(before[part]) | set(after[part])):
            was, now = before[part].get(key), after[part].get(key)
            if was != now and not (part == "pods" and _scheduler_bound(was, now)):
                out.append("%s %s: %r -> %r" % (part, key, was, now))
    return out


def _scheduler_bound(was, now):
    """A pod that was Pending is now bound to a node: kube-scheduler's work (it retries unschedulable pods on its own
    clock, e.g. an earlier test's operator pod), never a module's: none of them binds pods."""
    return bool(was and now and was[0] == now[0] and was[1] is None and now[1] and was[2] == now[2])


def leftovers(testbed):
    """What earlier tests' deleted nodes leave behind for a while: pods bound to a node that no longer exists (the
    pod garbage collector removes them only after its quarantine, tens of seconds; a controller's replacement
    follows) and ConfigMaps owned by pods that no longer exist (removed by the garbage collector after them)."""
    nodes = set(n.metadata.name for n in testbed.core.list_node().items)
    pods = testbed.core.list_pod_for_all_namespaces().items
    found = ["pod %s/%s on deleted node %s" % (p.metadata.namespace, p.metadata.name, p.spec.node_name)
             for p in pods if p.spec.node_name and p.spec.node_name not in nodes]
    pod_uids = set(p.metadata.uid for p in pods)
    found += ["configmap %s/%s of a deleted pod" % (c.metadata.namespace, c.metadata.name)
              for c in testbed.core.list_config_map_for_all_namespaces().items
              if any(o.kind == "Pod" and o.uid not in pod_uids for o in c.metadata.owner_references or [])]
    return found


def settled_snapshot(testbed, timeout=180):
    """A snapshot once earlier tests' leftovers are gone and two snapshots in a row, 3 s apart, agree."""
    deadline = time.time() + timeout
    testbed.wait_for(lambda: not leftovers(testbed), timeout, "earlier tests' leftovers to go", interval=2)
    last = snapshot(testbed)
    while True:
        time.sleep(3)
        now = snapshot(testbed)
        if now == last:
            return now
        if time.time() > deadline:
            raise AssertionError("the cluster did not settle before the bad input: %s" % differences(last, now)[:10])
        last = now


def unchanged_since(testbed, before, what):
    """Fail naming ``what`` when the cluster differs from ``before`` (read again once after 2 s: background noise of
    the testbed passes, a change made by the bad input stays)."""
    diff = differences(before, snapshot(testbed))
    if diff:
        time.sleep(2)
        diff = differences(before, snapshot(testbed))
    assert not diff, "%s changed the cluster:\n%s" % (what, "\n".join(diff[:20]))


# -- the test -------------------------------------------------------------------------------------------------------
@pytest.fixture
def fleet(testbed, testbed_namespace, gpu_cluster, add_gpu_node):
    """Two simulated GPU nodes (H100 x2, A100 x1) with a GPU and a CPU workload each, settled; and a Lease held by
    someone else in the test namespace."""
    names = [add_gpu_node("bad-in-h100", "H100-80GB-HBM3", 2), add_gpu_node("bad-in-a100", "A100-SXM4-40GB", 1)]

    def settled(node):
        labels = dict(testbed.core.read_node(node).metadata.labels or {})
        allocatable = dict(testbed.core.read_node(node).status.allocatable or {})
        return labels.get(CONFIG) and labels.get(STATE) == "success" and any(k.startswith("nvidia.com/") and v != "0"
                                                                             for k, v in allocatable.items())

    for node in names:
        testbed.wait_for(lambda node=node: settled(node), 90, "GPUs advertised and the MIG config settled on %s" % node)
        deploy(testbed, testbed_namespace, "gpu-" + node[-6:], node, resources={"nvidia.com/gpu": "1"})
        deploy(testbed, testbed_namespace, "cpu-" + node[-6:], node, resources={"cpu": "100m"})
    for node in names:
        wait_running(testbed, node, 2, testbed_namespace)
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gpufleet-mig-rollout", "namespace": testbed_namespace},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600}}))
    return names


def test_bad_input_against_the_testbed_changes_nothing(testbed, testbed_namespace, fleet, tmp_path):
    node = fleet[0]
    cases = sample_cases(node)
    assert len(cases) >= 30
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("K8S_AUTH_", "KUBECONFIG")))
    env["K8S_AUTH_KUBECONFIG"] = testbed.kubeconfig  # admin: a missing check would be free to act
    workers = {}
    before = settled_snapshot(testbed)
    problems = []
    try:
        for case in cases:
            worker = workers.get(case.target) or workers.setdefault(case.target, ModuleWorker(case.target, env=env))
            args = case.args
            problem = bad_inputs.problem_of(case, worker.run(args))
            if problem:
                problems.append("%s %s %s: %s" % (case.target, case.kind, json.dumps(args)[:200], problem))
            unchanged_since(testbed, before, "%s with %s (%s)" % (case.target, json.dumps(args)[:200], case.kind))
    finally:
        for worker in workers.values():
            worker.close()
    assert not problems, "bad inputs not refused clearly on the testbed:\n%s" % "\n".join(problems)
    assert len(set(c.target for c in cases)) == len(API_MODULES)

    # Roles, as users run them: one ansible-playbook each.
    runner = Runner(testbed.kubeconfig, tmp_path / "ansible")
    lock = {"mig_reconfigure_lock_name": unique_name("bad-input-lock"), "mig_reconfigure_lock_duration": 10}
    playbook_cases = [
        ("max_unavailable 150%", PLAYBOOK, dict(lock, profile="all-balanced", max_unavailable="150%"), "max_unavailable"),
        ("canary not a boolean", PLAYBOOK, dict(lock, profile="all-balanced", mig_reconfigure_canary="maybe"),
         "mig_reconfigure_canary"),
        ("negative drain timeout", PLAYBOOK, dict(lock, profile="all-balanced", mig_reconfigure_drain_timeout=-5),
         "drain_timeout"),
        ("device-plugin config replicas 1", OPERATOR_RECONFIGURE, {
            "gpufleet_kubeconfig": testbed.kubeconfig, "gpu_operator_mig_strategy": "mixed",
            "gpu_operator_device_plugin_config": {"default": {"version": "v1", "sharing": {"timeSlicing": {
                "resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}}},
         "device_plugin_config[default].sharing.timeSlicing.resources[0].replicas"),
    ]
    for what, playbook, extra_vars, name in playbook_cases:
        result = runner.playbook(playbook, fleet, extra_vars)
        assert result.rc != 0, "%s was accepted: %s" % (what, result.explain())
        failures = [h for t in result.tasks() for h in (t.get("hosts") or {}).values() if h.get("failed")]
        assert failures, "%s: no failed task\n%s" % (what, result.explain())
        messages = [str(h.get("msg", "")) for h in failures]
        assert any(name in m for m in messages), "%s: no message names %s: %s" % (what, name, messages)
        assert not any(h.get("changed") for t in result.tasks() for h in (t.get("hosts") or {}).values()), what
        unchanged_since(testbed, before, "ansible-playbook %s with %s" % (Path(playbook).name, what))
