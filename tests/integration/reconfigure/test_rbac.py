"""rbac/mig-reconfigure.yaml alone, on the testbed's API server (RBAC enforced), bound to a ServiceAccount of its
own (the other tests' account also holds the opt-in un-wedge file and their own Lease names): a whole rollout runs
under it with the default Lease name; it can neither read nor delete another Lease of the operator namespace
(NVIDIA's controller leads through one there), nor delete a pod there."""

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.reconfigure.conftest import LOCK_NAME, PLAYBOOK, RBAC_FILE, SA_NAME, SA_NAMESPACE, Runner, node_view
from tests.integration.reconfigure.test_lease_keeper import alive
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, rows_of, wait_advertised

CONTROLLER_LEASE = "53822513.nvidia.com"
CHECK_ACCOUNT = "gpufleet-rbac-check"


@pytest.fixture(scope="module")
def narrowed_kubeconfig(testbed):
    """rbac/mig-reconfigure.yaml with its ServiceAccount, roles and bindings renamed, so that it binds a second
    account exactly as the file binds the first."""
    text = RBAC_FILE.read_text().replace(SA_NAME, CHECK_ACCOUNT)
    text = text.replace("gpufleet-mig-reconfigure", "gpufleet-rbac-check-mig-reconfigure")
    testbed.kubectl("create", "namespace", SA_NAMESPACE, check=False)
    testbed.kubectl("apply", "-f", "-", input=text)
    return testbed.serviceaccount_kubeconfig(SA_NAMESPACE, CHECK_ACCOUNT)


def status_of(call, *args):
    with pytest.raises(ApiException) as err:
        call(*args)
    return err.value.status


def test_a_rollout_runs_under_the_file_alone(testbed, gpu_cluster, add_gpu_node, narrowed_kubeconfig, tmp_path):
    node = add_gpu_node("rc-rbac", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    runner = Runner(narrowed_kubeconfig, tmp_path / "ansible")
    result = runner.playbook(PLAYBOOK, [node], {"profile": "all-1g.10gb", "mig_reconfigure_allow_unschedulable": True,
                                                "mig_reconfigure_follow_timeout": 5})
    assert result.rc == 0, result.explain()
    assert rows_of(result)[node]["result"] == "reconfigured", rows_of(result)[node]
    assert result.task("Take the rollout lock")["lease"]["holder"].startswith("mig-reconfigure-")
    assert result.task("Release the rollout lock")["outcome"] == "released"
    # The keeper renewed the Lease between the module calls, and the release stopped it before deleting the Lease.
    keeper = result.task("Release the rollout lock")["keeper"]
    assert keeper["ended"] == "stopped by the release" and keeper["lost"] is None, keeper
    assert not alive(result.task("Take the rollout lock")["keeper"]["pid"])
    labels = node_view(testbed, node)["labels"]
    assert labels[CONFIG] == "all-1g.10gb" and labels[STATE] == "success"
    assert testbed.kubectl("get", "lease", "-n", SA_NAMESPACE, LOCK_NAME, check=False).returncode != 0


def test_no_other_lease_and_no_pod_delete_in_the_operator_namespace(testbed, narrowed_kubeconfig):
    api = config.new_client_from_config(config_file=str(narrowed_kubeconfig))
    leases = client.CoordinationV1Api(api)
    assert status_of(leases.read_namespaced_lease, CONTROLLER_LEASE, SA_NAMESPACE) == 403
    assert status_of(leases.delete_namespaced_lease, CONTROLLER_LEASE, SA_NAMESPACE) == 403
    assert status_of(leases.read_namespaced_lease, "another-rollout", SA_NAMESPACE) == 403
    # A create cannot be limited by name, and cannot replace a Lease that exists.
    admin = client.CoordinationV1Api(testbed.api_client())
    admin.create_namespaced_lease(SA_NAMESPACE, {"metadata": {"name": "rbac-test-other"},
                                                 "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 60}})
    try:
        body = {"metadata": {"name": "rbac-test-other"}, "spec": {"holderIdentity": "intruder"}}
        assert status_of(leases.create_namespaced_lease, SA_NAMESPACE, body) == 409
        assert status_of(leases.delete_namespaced_lease, "rbac-test-other", SA_NAMESPACE) == 403
        assert admin.read_namespaced_lease("rbac-test-other", SA_NAMESPACE).spec.holder_identity == "someone-else"
    finally:
        admin.delete_namespaced_lease("rbac-test-other", SA_NAMESPACE)
    # Un-wedging's pod delete is opt-in (rbac/mig-reconfigure-unwedge.yaml).
    assert status_of(client.CoreV1Api(api).delete_namespaced_pod, "any-pod", SA_NAMESPACE) == 403
