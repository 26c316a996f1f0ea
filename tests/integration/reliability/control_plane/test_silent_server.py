"""An API server that takes a write of a node's step and never answers it, in the middle of a rollout.

mig-reconfigure.yml on the role's defaults, under the least-privilege ServiceAccount's token through
tests.testbed.faultproxy, which swallows one write of the node's step: the request is read and never forwarded or
answered (a hung kube-apiserver, an etcd that stopped answering). The controller's environment sets the read timeout
to 5 s (GPUFLEET_API_REQUEST_TIMEOUT; the default is 60 s). The client gives up after it and does not send the write
again: whether it landed is unknown, and a second wait would double the time. The node's row fails naming the step
and the timeout, the rollout halts, a node we cordoned is left cordoned and recorded as ours (never cordoned without
our record), no pod outside the plan is evicted, and a re-run resumes the node to the end."""

import re
from pathlib import Path

import pytest
import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, Runner, deploy, node_view, wait_running
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name

TIMEOUT_S = 5
RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}
# write -> (method, path, body, the step the row names, whether our cordon is on the node afterwards)
WRITES = {
    "cordon": ("PATCH", r"^/api/v1/nodes/{node}$", r'"unschedulable":\s*true', "drain", False),
    "eviction": ("POST", r"^/api/v1/namespaces/{namespace}/pods/[^/]+/eviction$", None, "drain", True),
    "mig.config label": ("PATCH", r"^/api/v1/nodes/{node}$", r'"nvidia\.com/mig\.config":\s*"all-1g\.10gb"', "label", True),
    "uncordon": ("PATCH", r"^/api/v1/nodes/{node}$", r'"unschedulable":\s*null', "uncordon", True),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_never_answered_fails_the_node_recorded_and_a_rerun_finishes_it(
        testbed, gpu_cluster, add_gpu_node, automation_kubeconfig, fault_proxy, testbed_namespace, tmp_path, write):
    method, path, body, stage, cordoned = WRITES[write]
    node = add_gpu_node("ss", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(RUNTIME_CLASS))  # the operator's toolkit makes it
    deploy(testbed, testbed_namespace, "gpu-runtime", node, runtime_class="nvidia")  # a GPU pod without a GPU request
    pod = wait_running(testbed, node, 1, testbed_namespace)[0].metadata.name
    token = yaml.safe_load(Path(automation_kubeconfig).read_text())["users"][0]["user"]["token"]
    runner = Runner(fault_proxy.kubeconfig(tmp_path / "kubeconfig", token=token), tmp_path / "ansible",
                    env={"GPUFLEET_API_REQUEST_TIMEOUT": str(TIMEOUT_S)})
    variables = {"profile": "all-1g.10gb", "mig_reconfigure_lock_name": unique_name("ss-lease")}
    names = {"node": re.escape(node), "namespace": re.escape(testbed_namespace)}
    rule = fault_proxy.add("silent", method=method, match=path.format(**names), body=body, count=1)

    result = runner.playbook(PLAYBOOK, [node], variables)

    assert rule.hits == 1, fault_proxy.log
    assert result.rc != 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["stage"] == "api" and row["api_stage"] == stage, row
    assert row["message"] == ("node %s: Kubernetes API server unreachable during %s (Read timed out. "
                              "(read timeout=%.1f)); the node keeps its state, a re-run resumes it"
                              % (node, stage, TIMEOUT_S)), row
    view = node_view(testbed, node)
    assert view["unschedulable"] is cordoned and row["left_cordoned"] is cordoned, (row, view)
    assert (PRIOR_ANNOTATION in view["annotations"]) is cordoned, view["annotations"]  # our cordon is recorded
    if write in ("cordon", "eviction"):
        assert row["evicted"] == [] and view["labels"].get(CONFIG) != "all-1g.10gb", row
        assert [p.metadata.name for p in wait_running(testbed, node, 1, testbed_namespace)] == [pod]
    else:
        assert row["evicted"] == ["%s/%s" % (testbed_namespace, pod)], row

    again = runner.playbook(PLAYBOOK, [node], variables)
    assert again.rc == 0, again.explain()
    assert rows_of(again)[node]["result"] == "reconfigured", rows_of(again)
    view = node_view(testbed, node)
    assert view["labels"][STATE] == "success" and gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}, view
    assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"], view
    wait_running(testbed, node, 1, testbed_namespace)  # the GPU pod runs there again
