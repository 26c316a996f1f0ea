"""Generated bad input pointed at the testbed cluster: refused, and the cluster left exactly as it was.

A sample of the bad inputs of tests/unit/reliability (same strategies, derandomized) is aimed at real objects:
simulated GPU nodes with GPU and CPU workloads, NVIDIA's ClusterPolicy, a Lease. Through ansible-playbook, under the
testbed's admin kubeconfig (a missing check would be free to act): the options of the modules that can change the
cluster (drain, MIG config label, rollout, Lease, smoke pods) and of the read-only ones, and the variables of every
entry point of the roles that act on the cluster, drawn per option (types, sizes, structures), one task each in one
playbook; then the playbooks users run with a bad variable each. Before and after, the cluster is read: node labels,
annotations, taints and unschedulable; pods; ConfigMaps; ClusterPolicies; Leases. Any difference fails the test.
"""

import json
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.reconfigure.conftest import PLAYBOOK, Runner, deploy, wait_running
from tests.testbed.pytest_cluster import unique_name
from tests.unit.reliability import bad_inputs

HERE = Path(__file__).resolve().parent
OPERATOR_RECONFIGURE = HERE.parent / "operator" / "reconfigure.yml"
# Modules that talk to the cluster; the ones that can change it first.
API_MODULES = ["gpu_drain", "node_mig_config", "mig_rollout", "mig_rollout_lock", "gpu_smoke_test",
               "gpu_operator_status", "gpu_operator_upgrade_check", "gpu_operator_driver_pools", "gpu_node_validate",
               "gpu_cluster_info"]
PER_MODULE = 8  # distinct bad inputs per module
ROLE_CASES = 6  # distinct bad variables per role entry point
CLUSTER_ROLES = ("gpu_operator", "gpu_report", "gpu_validate", "mig_reconfigure")  # the host roles act on the host
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


class Unsafe(str):
    """A string Ansible must not template (a bad input may hold "{{"): written with YAML's ``!unsafe`` tag."""


def _unsafe_strings(value):
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, dict):
        return dict((k, _unsafe_strings(v)) for k, v in value.items())  # names are the option's, as given
    if isinstance(value, list):
        return [_unsafe_strings(v) for v in value]
    return value


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Unsafe, lambda dumper, data: dumper.represent_scalar("!unsafe", str(data)))


def bad_input_playbook(module_cases, role_cases):
    """One play on localhost: a task per module case (ignore_errors), then a block per role case whose rescue shows
    why the role stopped. Task names carry the case's index."""
    tasks = [{"name": "module case %d" % i, "gpufleet.gpu_operator.%s" % case.target: _unsafe_strings(case.args),
              "ignore_errors": True} for i, case in enumerate(module_cases)]
    for i, case in enumerate(role_cases):
        role, entry = case.target.split(":")
        tasks.append({"name": "role case %d" % i, "block": [{
            "name": "role case %d runs" % i,
            "ansible.builtin.include_role": {"name": "gpufleet.gpu_operator.%s" % role, "tasks_from": entry},
            "vars": _unsafe_strings(case.args)}],
            "rescue": [{"name": "role case %d refused" % i,
                        "ansible.builtin.debug": {"var": "ansible_failed_result"}}]})
    return yaml.dump([{"name": "generated bad input", "hosts": "localhost", "gather_facts": False, "tasks": tasks}],
                     Dumper=_Dumper, sort_keys=False)


def role_cases(node):
    """ROLE_CASES distinct bad variables per entry point of the roles that act on the cluster (derandomized)."""
    cases = []
    for entry, options in sorted(bad_inputs.load_role_specs().items()):
        if entry.split(":")[0] not in CLUSTER_ROLES:
            continue
        strategies = [s for _kind, s in bad_inputs.role_faults(entry, options)]
        for case in _first_distinct(st.sampled_from(strategies).flatmap(lambda s: s), ROLE_CASES):
            cases.append(case._replace(args=json.loads(json.dumps(case.args, default=repr).replace(PLACEHOLDER, node))))
    return cases


def host_result(result, name):
    """The localhost result of the task named exactly ``name``, or None when it did not run."""
    for task in result.tasks():
        if task["task"]["name"] == name:
            for host in (task.get("hosts") or {}).values():
                return host
    return None


# ansible-core's validate_argument_spec task puts this line above the argument checks' own message.
ROLE_VALIDATION_HEADING = "Validation of arguments failed:\n"


def role_result(result, index):
    """What stopped role case ``index``: the failed task's result (from the rescue), its message without ansible-core's
    heading line; None if nothing failed."""
    rescue = host_result(result, "role case %d refused" % index)
    if rescue is None:
        return None
    failed = dict(rescue.get("ansible_failed_result") or {})
    msg = str(failed.get("msg", ""))
    if msg.startswith(ROLE_VALIDATION_HEADING):
        failed["msg"] = msg[len(ROLE_VALIDATION_HEADING):]
    return failed


def test_bad_input_against_the_testbed_changes_nothing(testbed, testbed_namespace, fleet, tmp_path):
    """Generated bad input through ansible-playbook, with the testbed's admin kubeconfig (a missing check would be
    free to act): every API module's options, and the variables of every entry point of the roles that act on the
    cluster, one playbook with one task per case; then the playbooks users run with a bad variable each. The cluster
    is compared before and after each playbook."""
    node = fleet[0]
    modules, roles = sample_cases(node), role_cases(node)
    print("generated bad inputs: %d module options, %d role variables" % (len(modules), len(roles)))
    assert len(set(c.target for c in modules)) == len(API_MODULES) and len(modules) >= 8 * len(API_MODULES)
    assert set(c.target.split(":")[0] for c in roles) == set(CLUSTER_ROLES)
    runner = Runner(testbed.kubeconfig, tmp_path / "ansible")
    book = tmp_path / "bad-input.yml"
    book.write_text(bad_input_playbook(modules, roles))
    before = settled_snapshot(testbed)

    result = runner.playbook(book, [])

    problems = []
    for i, case in enumerate(modules):
        outcome = host_result(result, "module case %d" % i)
        problem = "did not run" if outcome is None else bad_inputs.problem_of(case, outcome)
        if problem:
            problems.append("%s %s %s: %s" % (case.target, case.kind, json.dumps(case.args)[:200], problem))
    for i, case in enumerate(roles):
        outcome = role_result(result, i)
        problem = "accepted" if outcome is None else bad_inputs.problem_of(case, outcome)
        if problem:
            problems.append("%s %s %s: %s" % (case.target, case.kind, json.dumps(case.args)[:200], problem))
    assert not problems, "bad inputs not refused clearly on the testbed:\n%s" % "\n".join(problems)
    unchanged_since(testbed, before, "ansible-playbook %s (%d module cases, %d role cases)" % (
        book.name, len(modules), len(roles)))

    # The playbooks users run, with a bad variable each: one ansible-playbook each.
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
