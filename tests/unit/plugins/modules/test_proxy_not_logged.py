"""The proxy URL may carry credentials: a module run never returns it, whatever it fails on."""

import json
import socket

import yaml

from tests.unit.plugins.modules.module_runner import run_module


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_proxy_url_with_credentials_is_never_in_a_result(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_API_RETRY_SECONDS", "1")  # the refused connection is not retried for long
    port = closed_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:%d" % port}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    proxy = "http://admin:s3cret-word@127.0.0.1:%d" % port
    for module, args in (("gpu_drain", {"name": "gpu-1", "state": "cordoned"}),
                         ("gpu_operator_status", {}),
                         ("mig_rollout_lock", {"name": "lock", "holder": "me", "state": "present"})):
        result = run_module(tmp_path, module, kubeconfig=str(kubeconfig), proxy=proxy, **args)
        assert result.get("failed"), (module, result)
        assert "s3cret-word" not in json.dumps(result), (module, result)
        assert "127.0.0.1" in result["msg"], (module, result)  # it failed on the connection, not on its options
