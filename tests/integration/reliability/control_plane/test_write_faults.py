"""An API outage on each write of a node's step, on the rollout's defaults.

mig-reconfigure.yml runs as a user runs it: the role's defaults (the room check on, the default Lease duration of
120 s, renewed every 40 s), under the least-privilege ServiceAccount of rbac/mig-reconfigure.yaml, whose token goes
through tests.testbed.faultproxy to the real API server. In one rollout the proxy resets the first two attempts of
each write of the node's step (the connection drops after the request was read, so the outcome is unknown to the
client): the cordon, the eviction of the node's GPU pod, the nvidia.com/mig.config label, the uncordon and a
renewal of the rollout Lease. Each is tried again within the retry window and the rollout ends verified, with the
evicted pod back on the node and nothing left cordoned. The Lease has a name of its own per test (the tests'
RBAC file lets the account renew it), so that its only update is a renewal."""

import re
from pathlib import Path

import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, Runner, deploy, node_view, wait_running
from tests.integration.reconfigure.test_rollout import STATE, gpu_allocatable, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name

# (write, method, path, body): each request of the node's step the outage meets, twice.
WRITES = [
    ("cordon", "PATCH", r"^/api/v1/nodes/{node}$", r'"unschedulable":\s*true'),
    ("eviction", "POST", r"^/api/v1/namespaces/{namespace}/pods/[^/]+/eviction$", None),
    ("mig.config label", "PATCH", r"^/api/v1/nodes/{node}$", r'"nvidia\.com/mig\.config":\s*"all-1g\.10gb"'),
    ("uncordon", "PATCH", r"^/api/v1/nodes/{node}$", r'"unschedulable":\s*null'),
    ("Lease renewal", "PUT", r"^/apis/coordination\.k8s\.io/v1/namespaces/gpu-operator/leases/{lease}$", None),
]
RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


def test_an_outage_on_each_write_of_a_node_step_is_ridden_through(
        testbed, gpu_cluster, add_gpu_node, automation_kubeconfig, fault_proxy, testbed_namespace, tmp_path):
    # "slow": 30 s in the hardware step, so the run lasts past the Lease's first renewal (at 40 s).
    node = add_gpu_node("wf", "H100-80GB-HBM3", 1, faults=["slow"])
    wait_advertised(testbed, node)
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(RUNTIME_CLASS))  # the operator's toolkit makes it
    deploy(testbed, testbed_namespace, "gpu-runtime", node, runtime_class="nvidia")  # a GPU pod without a GPU request
    evicted = wait_running(testbed, node, 1, testbed_namespace)[0].metadata.name
    lease = unique_name("wf-lease")
    token = yaml.safe_load(Path(automation_kubeconfig).read_text())["users"][0]["user"]["token"]
    runner = Runner(fault_proxy.kubeconfig(tmp_path / "kubeconfig", token=token), tmp_path / "ansible")
    names = {"node": re.escape(node), "namespace": re.escape(testbed_namespace), "lease": re.escape(lease)}
    rules = dict((write, fault_proxy.add("reset", method=method, match=path.format(**names), body=body, count=2))
                 for write, method, path, body in WRITES)

    result = runner.playbook(PLAYBOOK, [node], {"profile": "all-1g.10gb", "mig_reconfigure_lock_name": lease})

    missed = [write for write, rule in rules.items() if rule.hits != 2]
    assert not missed, "writes the outage did not meet: %s; %s" % (missed, fault_proxy.log)
    assert result.rc == 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "reconfigured", row
    assert row["evicted"] == ["%s/%s" % (testbed_namespace, evicted)], row
    view = node_view(testbed, node)
    assert view["labels"][STATE] == "success" and gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}, view
    assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"], view
    wait_running(testbed, node, 1, testbed_namespace)  # the evicted pod's replacement runs there again
