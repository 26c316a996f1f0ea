"""Connection settings: an empty field (as AWX renders an empty credential input) counts as unset."""

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import client

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
    "clusters": [{"name": "testbed", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "admin", "user": {"token": "not-a-real-token"}}],
    "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "admin"}},
                 {"name": "other", "context": {"cluster": "testbed", "user": "admin"}}],
}


@pytest.fixture
def kubeconfig_file(tmp_path, monkeypatch):
    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "K8S_AUTH_HOST", "K8S_AUTH_VERIFY_SSL", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    return str(path)


def validated(params):
    result = ArgumentSpecValidator(client.AUTH_ARG_SPEC).validate(params)
    assert not result.error_messages, result.error_messages
    return result.validated_parameters


def test_empty_context_env_is_unset_and_the_current_context_is_used(kubeconfig_file, monkeypatch):
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", kubeconfig_file)
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "")
    params = validated({})
    assert params["kubeconfig"] == kubeconfig_file and params["context"] is None
    assert client.get_api_client(params).configuration.host == "https://127.0.0.1:6443"


def test_empty_verify_ssl_env_is_unset_not_false(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "")
    assert validated({})["validate_certs"] is None
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "no")
    assert validated({})["validate_certs"] is False


def test_set_env_values_still_count(kubeconfig_file, monkeypatch):
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", kubeconfig_file)
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "other")
    assert validated({})["context"] == "other"


def test_empty_context_parameter_is_unset(kubeconfig_file):
    """module_defaults with an empty gpufleet_kube_context pass context: ""."""
    api = client.get_api_client({"kubeconfig": kubeconfig_file, "context": "", "host": " ", "proxy": ""})
    assert api.configuration.host == "https://127.0.0.1:6443" and not api.configuration.proxy


def test_a_context_that_does_not_exist_is_still_an_error(kubeconfig_file):
    with pytest.raises(client.KubeAuthError, match="nowhere"):
        client.get_api_client({"kubeconfig": kubeconfig_file, "context": "nowhere"})


def test_unset_empty_keeps_other_values():
    assert client.unset_empty({"a": "", "b": "  ", "c": "x", "d": False, "e": None, "f": {"k": ""}}) == {
        "a": None, "b": None, "c": "x", "d": False, "e": None, "f": {"k": ""}}
