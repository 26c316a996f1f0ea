"""rbac/mig-reconfigure.yaml on the testbed's API server (RBAC enforced): the automation ServiceAccount takes,
renews and releases the rollout's Lease by its name, and can neither read nor delete another Lease of the operator
namespace (NVIDIA's controller leads through one there) nor delete a pod there without the opt-in un-wedge grant."""

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.reconfigure.conftest import LOCK_NAME, SA_NAMESPACE

CONTROLLER_LEASE = "53822513.nvidia.com"


def forbidden(call, *args):
    with pytest.raises(ApiException) as err:
        call(*args)
    return err.value.status


def test_the_rollout_lease_by_name_and_nothing_else_in_the_operator_namespace(testbed, automation_kubeconfig, runner):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "take", "register": "taken", "gpufleet.gpu_operator.mig_rollout_lock": {
            "name": LOCK_NAME, "holder": "rbac-test", "duration": 30}},
        {"name": "renew", "register": "renewed", "gpufleet.gpu_operator.mig_rollout_lock": {
            "name": LOCK_NAME, "holder": "rbac-test", "duration": 30}},
        {"name": "release", "register": "released", "gpufleet.gpu_operator.mig_rollout_lock": {
            "name": LOCK_NAME, "holder": "rbac-test", "state": "absent"}}]}]
    path = runner.workdir / "lease.yml"
    path.write_text(yaml.safe_dump(play))
    result = runner.playbook(path, [])
    assert result.rc == 0, result.explain()
    assert result.task("take")["changed"] and result.task("release")["changed"], result.explain()

    api = config.new_client_from_config(config_file=str(automation_kubeconfig))
    leases = client.CoordinationV1Api(api)
    assert forbidden(leases.read_namespaced_lease, CONTROLLER_LEASE, SA_NAMESPACE) == 403
    assert forbidden(leases.delete_namespaced_lease, CONTROLLER_LEASE, SA_NAMESPACE) == 403
    assert forbidden(leases.read_namespaced_lease, "another-rollout", SA_NAMESPACE) == 403
    # A create cannot be limited by name, and cannot replace a Lease that exists.
    testbed.kubectl("create", "namespace", SA_NAMESPACE, check=False)
    admin = client.CoordinationV1Api(testbed.api_client())
    admin.create_namespaced_lease(SA_NAMESPACE, {"metadata": {"name": "rbac-test-other"},
                                                 "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 60}})
    try:
        body = {"metadata": {"name": "rbac-test-other"}, "spec": {"holderIdentity": "intruder"}}
        assert forbidden(leases.create_namespaced_lease, SA_NAMESPACE, body) == 409
        assert forbidden(leases.delete_namespaced_lease, "rbac-test-other", SA_NAMESPACE) == 403
        assert admin.read_namespaced_lease("rbac-test-other", SA_NAMESPACE).spec.holder_identity == "someone-else"
    finally:
        admin.delete_namespaced_lease("rbac-test-other", SA_NAMESPACE)
    # Un-wedging's pod delete is opt-in (rbac/mig-reconfigure-unwedge.yaml).
    assert forbidden(client.CoreV1Api(api).delete_namespaced_pod, "any-pod", SA_NAMESPACE) == 403
