"""gpu_preflight against the testbed's API server (RBAC enforced) under the least-privilege ServiceAccount of
rbac/mig-reconfigure.yaml: the verbs it grants pass, a verb it does not grant is named as not allowed, and a
program missing from PATH or a Python package not installed is named, all in one failure."""

from tests.integration.reconfigure.conftest import SA_NAME, SA_NAMESPACE

GRANTED = [
    {"verbs": ["get", "list", "watch", "patch"], "resource": "nodes"},
    {"verbs": ["create"], "resource": "pods/eviction"},
    {"verbs": ["get"], "resource": "configmaps", "namespace": SA_NAMESPACE},
]
USER = "system:serviceaccount:%s:%s" % (SA_NAMESPACE, SA_NAME)


def test_granted_verbs_pass_and_the_connection_is_named(runner, automation_kubeconfig):
    result = runner.module("gpu_preflight", {"access": GRANTED, "executables": ["ansible-playbook"],
                                             "python_packages": ["kubernetes>=30.0.0"]})
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["denied"] == [] and result["checked"] == 6
    assert result["missing_executables"] == [] and result["missing_python_packages"] == []
    assert result["kubeconfig"] == str(automation_kubeconfig)
    assert result["user"] == USER
    assert result["server_version"].startswith("v1.")
    assert result["msg"].startswith("pre-flight: ok (kubeconfig %s" % automation_kubeconfig), result["msg"]


def test_a_verb_the_role_lacks_and_a_missing_program_are_named(runner, automation_kubeconfig):
    access = GRANTED + [{"verbs": ["create"], "resource": "namespaces"},
                        {"verbs": ["get", "delete"], "resource": "nodes"}]
    result = runner.module("gpu_preflight", {"access": access, "executables": ["gpufleet-no-such-program"],
                                             "python_packages": ["gpufleet-no-such-distribution"]})
    assert result.get("failed") is True and result["changed"] is False, result
    assert result["denied"] == ["create namespaces", "delete nodes"], result["denied"]
    assert result["checked"] == 8
    assert result["missing_executables"] == ["gpufleet-no-such-program"]
    assert result["missing_python_packages"] == ["gpufleet-no-such-distribution (not installed)"]
    msg = result["msg"]
    assert msg.startswith("pre-flight: executables not found on PATH: gpufleet-no-such-program; "
                          "Python packages missing: gpufleet-no-such-distribution (not installed); "
                          "not allowed: create namespaces; delete nodes (kubeconfig %s" % automation_kubeconfig), msg
    assert "user %s" % USER in msg and "\n" not in msg, msg


def test_check_mode_runs_every_check(runner):
    result = runner.module("gpu_preflight", {"access": [{"verbs": ["create"], "resource": "namespaces"}]},
                           check=True)
    assert result.get("failed") is True and result["denied"] == ["create namespaces"], result
