"""An API server that takes a write and never answers it, in the middle of a rollout.

mig-reconfigure.yml on the role's defaults, under the least-privilege ServiceAccount's token through
tests.testbed.faultproxy, which swallows the uncordon of the node's step: the request is read and never forwarded or
answered (a hung kube-apiserver, an etcd that stopped answering), so the node stays cordoned. The client gives up
after request_timeout (60 s) and does not send the write again: whether it landed is unknown, and a second wait
would double the time. The node's row fails naming the write and the timeout, the node is left cordoned and
recorded as ours, and a re-run resumes it to the end."""

import re
from pathlib import Path

import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, Runner, node_view
from tests.integration.reconfigure.test_rollout import STATE, gpu_allocatable, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name


def test_a_write_never_answered_fails_the_node_recorded_and_a_rerun_finishes_it(
        testbed, gpu_cluster, add_gpu_node, automation_kubeconfig, fault_proxy, tmp_path):
    node = add_gpu_node("ss", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    token = yaml.safe_load(Path(automation_kubeconfig).read_text())["users"][0]["user"]["token"]
    runner = Runner(fault_proxy.kubeconfig(tmp_path / "kubeconfig", token=token), tmp_path / "ansible")
    variables = {"profile": "all-1g.10gb", "mig_reconfigure_lock_name": unique_name("ss-lease")}
    uncordon = fault_proxy.add("silent", method="PATCH", match=r"^/api/v1/nodes/%s$" % re.escape(node),
                               body=r'"unschedulable":\s*null', count=1)

    result = runner.playbook(PLAYBOOK, [node], variables)

    assert uncordon.hits == 1, fault_proxy.log
    assert result.rc != 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "failed" and row["stage"] == "api" and row["api_stage"] == "uncordon", row
    assert row["message"] == ("node %s: Kubernetes API server unreachable during uncordon (Read timed out. "
                              "(read timeout=60.0)); the node keeps its state, a re-run resumes it" % node), row
    assert row["left_cordoned"] is True, row
    view = node_view(testbed, node)
    assert view["unschedulable"] is True and PRIOR_ANNOTATION in view["annotations"], view
    assert view["labels"][STATE] == "success", view["labels"]

    again = runner.playbook(PLAYBOOK, [node], variables)
    assert again.rc == 0, again.explain()
    assert rows_of(again)[node]["result"] == "reconfigured", rows_of(again)
    view = node_view(testbed, node)
    assert gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}, view
    assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"], view
