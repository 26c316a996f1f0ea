"""Modules against an API server that accepts connections and never answers, and against connection settings
that cannot work (a missing kubeconfig path, a context the kubeconfig lacks, a kubeconfig given as a mapping).

The silent server is a TCP listener on 127.0.0.1 that accepts and reads, and never writes: the TLS handshake
never completes. Each module fails, with request_timeout set low, in one line naming the server and the call;
the subprocess timeout bounds the run (a module that waited for ever fails the test). Nothing in these cases
needs the testbed cluster.
"""

import socket
import threading

import pytest
import yaml

from tests.integration.modules.test_unreachable_api_server import FaultRunner

NODE = "gpu-silent-1"
CASES = [
    ("gpu_drain", {"name": NODE, "state": "cordoned"}),
    ("mig_rollout_lock", {"holder": "silent-test"}),
    ("gpu_cluster_info", {}),
    ("gpu_preflight", {"access": [{"verbs": ["get"], "resource": "nodes"}]}),
]


@pytest.fixture(scope="module")
def silent_server():
    """Accepts and never answers. Yields its port and the connections it accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def kubeconfig_for(port, context="silent"):
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "silent", "cluster": {
            "server": "https://127.0.0.1:%s" % port, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "token-that-must-not-be-shown"}}],
        "contexts": [{"name": context, "context": {"cluster": "silent", "user": "u"}}]}


def run_tasks(runner, cases, common):
    tasks = [{"name": "case %d %s" % (i, name), "gpufleet.gpu_operator.%s" % name: dict(args, **common),
              "ignore_errors": True} for i, (name, args) in enumerate(cases)]
    path = runner.workdir / "silent.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return runner.playbook(path, [], timeout=300)


def test_a_silent_server_fails_each_module_naming_the_server_and_the_call(silent_server, tmp_path):
    port, accepted = silent_server
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_for(port)))
    runner = FaultRunner(path, tmp_path / "ansible", {"GPUFLEET_API_RETRY_SECONDS": "30"})
    run = run_tasks(runner, CASES, {"request_timeout": 2})
    for index, (name, _args) in enumerate(CASES):
        result = run.task("case %d %s" % (index, name))
        msg = result.get("msg") or ""
        assert result.get("failed") is True and result.get("changed") is False, (name, result)
        assert "cannot reach the Kubernetes API server 127.0.0.1:%s (GET /" % port in msg, (name, msg)
        assert "timed out" in msg.lower() and "\n" not in msg, (name, msg)
    # A request that timed out is not sent again: one connection per module (its first request failed).
    assert len(accepted) == len(CASES), len(accepted)
    assert "Traceback" not in run.stdout + run.stderr, run.explain()


def test_a_missing_kubeconfig_path_and_a_wrong_context_are_named(silent_server, tmp_path):
    port, _accepted = silent_server
    good = tmp_path / "kubeconfig"
    good.write_text(yaml.safe_dump(kubeconfig_for(port)))
    missing = tmp_path / "no-such-dir" / "kubeconfig"
    runner = FaultRunner(good, tmp_path / "ansible")
    cases = [("missing", {"holder": "t", "kubeconfig": str(missing)}),
             ("context", {"holder": "t", "kubeconfig": str(good), "context": "no-such-context"}),
             ("mapping", {"holder": "t", "kubeconfig": kubeconfig_for(port), "context": "no-such-context"})]
    tasks = [{"name": name, "gpufleet.gpu_operator.mig_rollout_lock": args, "ignore_errors": True}
             for name, args in cases]
    path = runner.workdir / "kubeconfigs.yml"
    # ansible-core 2.21 returns a task's module arguments (``invocation``) only when asked to (INJECT_INVOCATION).
    play = {"hosts": "localhost", "gather_facts": False, "vars": {"ansible_inject_invocation": True}, "tasks": tasks}
    path.write_text(yaml.safe_dump([play]))
    run = runner.playbook(path, [], timeout=300)
    msg = run.task("missing")["msg"]
    assert msg == "no usable Kubernetes connection: kubeconfig %s does not exist" % missing, msg
    msg = run.task("context")["msg"]
    assert msg.startswith("no usable Kubernetes connection: cannot load kubeconfig %s (context no-such-context): "
                          % good), msg
    mapping = run.task("mapping")
    assert mapping["msg"].startswith(
        "no usable Kubernetes connection: cannot load kubeconfig (the mapping given) (context no-such-context): "), mapping
    # The kubeconfig's credentials are not shown; its server and context are.
    assert "token-that-must-not-be-shown" not in run.stdout + run.stderr
    assert "https://127.0.0.1:%s" % port in str(mapping["invocation"]["module_args"]["kubeconfig"])
