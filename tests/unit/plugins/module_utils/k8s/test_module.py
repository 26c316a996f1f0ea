"""The Kubernetes module base: error translation (one line: server, call, node), the merged auth options,
run()'s results and the call tracing of the client."""

import socket

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import client, module as base
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded, KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import DrainError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import LockHeld
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.node_step import MigStepError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report.metrics import MetricsError

SERVER = "10.1.2.3:6443"
CALL = "GET /api/v1/nodes/gpu-1"


def describe(exc, node=None, call=CALL):
    return base.describe_error(exc, SERVER, call, node)


def api_exception(status, reason, body):
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


def refused():
    pool = urllib3.HTTPSConnectionPool("10.1.2.3", 6443)
    cause = urllib3.exceptions.NewConnectionError(
        pool, "Failed to establish a new connection: [Errno 111] Connection refused")
    return urllib3.exceptions.MaxRetryError(pool, "/api/v1/nodes/gpu-1", cause)


# -- server_of --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, expected", [
    ("https://10.0.0.1:6443", "10.0.0.1:6443"),
    ("https://10.0.0.1", "10.0.0.1:443"),
    ("http://api.example.test", "api.example.test:80"),
    ("https://[fd00::1]:6443/prefix", "[fd00::1]:6443"),
    ("10.0.0.9:8443", "10.0.0.9:8443"),
    (None, None),
    ("", None),
])
def test_server_of(url, expected):
    assert base.server_of(url) == expected


# -- describe_error, one class at a time --------------------------------------------------------------------

def test_connection_refused_names_server_call_and_node():
    line = describe(refused(), node="gpu-1")
    assert line == ("node gpu-1: cannot reach the Kubernetes API server 10.1.2.3:6443 (GET /api/v1/nodes/gpu-1): "
                    "[Errno 111] Connection refused")


def test_name_resolution_failure():
    pool = urllib3.HTTPSConnectionPool("api.invalid", 443)
    cause = urllib3.exceptions.NameResolutionError("api.invalid", pool, socket.gaierror(-2, "Name or service not known"))
    line = describe(urllib3.exceptions.MaxRetryError(pool, "/api/v1/nodes", cause))
    assert line.startswith("cannot reach the Kubernetes API server 10.1.2.3:6443 (%s): " % CALL)
    assert "Name or service not known" in line and "\n" not in line


def test_dropped_watch_protocol_error():
    exc = urllib3.exceptions.ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')",
                                           ConnectionResetError(104, "Connection reset by peer"))
    line = describe(exc, node="gpu-2", call="GET /api/v1/nodes (watch)")
    assert line == ("node gpu-2: cannot reach the Kubernetes API server 10.1.2.3:6443 (GET /api/v1/nodes (watch)): "
                    "connection broken: [Errno 104] Connection reset by peer")


def test_read_timeout():
    pool = urllib3.HTTPSConnectionPool("10.1.2.3", 6443)
    exc = urllib3.exceptions.ReadTimeoutError(pool, "/api/v1/nodes", "Read timed out. (read timeout=5)")
    line = describe(exc)
    assert line == "cannot reach the Kubernetes API server 10.1.2.3:6443 (%s): Read timed out. (read timeout=5)" % CALL


def test_socket_errors():
    assert describe(socket.timeout("timed out")).endswith("(%s): timed out" % CALL)
    assert describe(ConnectionRefusedError(111, "Connection refused")).endswith(
        "(%s): [Errno 111] Connection refused" % CALL)


def test_api_exception_status_reason_and_server_message():
    exc = api_exception(403, "Forbidden", '{"kind":"Status","message":"nodes \\"gpu-1\\" is forbidden: User '
                                          '\\"system:serviceaccount:x:y\\" cannot get resource \\"nodes\\""}')
    line = describe(exc, node="gpu-1")
    assert line == ('node gpu-1: GET /api/v1/nodes/gpu-1 failed on the Kubernetes API server 10.1.2.3:6443: '
                    'HTTP 403 Forbidden: nodes "gpu-1" is forbidden: User "system:serviceaccount:x:y" '
                    'cannot get resource "nodes"')


def test_api_exception_status_zero_is_a_connection_problem_on_one_line():
    exc = ApiException(status=0, reason="SSLError\n[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    line = describe(exc)
    assert line == ("cannot reach the Kubernetes API server 10.1.2.3:6443 (%s): "
                    "SSLError [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed" % CALL)


def test_api_exception_without_a_known_call():
    line = base.describe_error(api_exception(500, "Internal Server Error", ""), SERVER, None)
    assert line == "API call failed on the Kubernetes API server 10.1.2.3:6443: HTTP 500 Internal Server Error"


def test_call_recorded_on_the_exception_wins():
    exc = refused()
    exc.gpufleet_call = "PATCH /api/v1/nodes/gpu-9"
    assert "(PATCH /api/v1/nodes/gpu-9)" in describe(exc)


def test_kube_auth_error():
    line = describe(client.KubeAuthError("cannot load kubeconfig /nope: file not found"))
    assert line == "no usable Kubernetes connection to 10.1.2.3:6443: cannot load kubeconfig /nope: file not found"
    assert base.describe_error(client.KubeAuthError("no Kubernetes connection")).startswith(
        "no usable Kubernetes connection: ")


@pytest.mark.parametrize("exc", [
    PlanningError("1g.99gb is not a profile of NVIDIA H200"),
    DrainError("eviction blocked", result={"evicted": []}),
    MigStepError("MIG Manager reported failed"),
    LockHeld("another MIG rollout holds lock gpu-operator/x", lease={"holder": "other"}),
    DeadlineExceeded("deadline reached"),
    MetricsError("prometheus unreachable"),
])
def test_package_errors_keep_their_message_and_gain_the_node(exc):
    assert base.is_kube_error(exc)
    assert describe(exc) == str(exc)
    assert describe(exc, node="gpu-3") == "node gpu-3: %s" % exc
    assert describe(exc, node=["gpu-3", "gpu-4"]) == "nodes gpu-3, gpu-4: %s" % exc


def test_node_already_named_is_not_repeated():
    assert describe(DrainError("node gpu-1 not found"), node="gpu-1") == "node gpu-1 not found"
    assert describe(PlanningError("node gpu-1: bad"), node=["gpu-1"]) == "node gpu-1: bad"


def test_foreign_errors_are_not_kube_errors():
    assert not base.is_kube_error(KeyError("x"))
    assert not base.is_kube_error(ValueError("x"))


# -- the call tracing of a real client ------------------------------------------------------------------------

@pytest.fixture
def dead_server():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    yield "https://127.0.0.1:%s" % sock.getsockname()[1]
    sock.close()


def test_real_client_names_the_call_of_a_refused_connection(dead_server):
    api_client = client.get_api_client({"host": dead_server, "api_key": "t", "validate_certs": False})
    with pytest.raises(urllib3.exceptions.MaxRetryError) as caught:
        KubeOps(api_client).list_nodes(label_selector="a=b")
    assert caught.value.gpufleet_call == "GET /api/v1/nodes"
    assert client.last_call() == "GET /api/v1/nodes"
    line = base.describe_error(caught.value, base.server_of(api_client.configuration.host), None, "gpu-1")
    assert line.startswith("node gpu-1: cannot reach the Kubernetes API server %s (GET /api/v1/nodes): "
                           % dead_server.split("//")[1])
    assert "refused" in line.lower() and "object at 0x" not in line


def test_call_name_strips_host_and_query_and_marks_watches():
    assert client._call_name("get", "https://h:6443/api/v1/nodes?labelSelector=a") == "GET /api/v1/nodes"
    assert client._call_name("GET", "https://h/api/v1/nodes?watch=true&x=1") == "GET /api/v1/nodes (watch)"


# -- KubeModule --------------------------------------------------------------------------------------------

class Exited(Exception):
    def __init__(self, kind, result):
        super(Exited, self).__init__(kind)
        self.kind, self.result = kind, result


class FakeAnsibleModule(object):
    def __init__(self, argument_spec, **kwargs):
        self.argument_spec = argument_spec
        self.kwargs = kwargs
        self.params = dict((name, None) for name in argument_spec)
        self.params.update(host="https://10.1.2.3:6443", name="gpu-1")
        self.check_mode = False
        self.warnings = []

    def exit_json(self, **result):
        raise Exited("exit", result)

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, **result):
        raise Exited("fail", result)


@pytest.fixture
def kube_module(monkeypatch):
    monkeypatch.setattr(base, "KubeAnsibleModule", FakeAnsibleModule)
    return base.KubeModule(dict(name=dict(type="str", required=True)), supports_check_mode=True)


def test_auth_options_are_merged(kube_module):
    spec = kube_module.module.argument_spec
    assert set(spec) == set(["name"]) | set(client.AUTH_ARG_SPEC) | set(client.REQUEST_ARG_SPEC)
    assert spec["kubeconfig"] == client.AUTH_ARG_SPEC["kubeconfig"]
    assert kube_module.module.kwargs == {"supports_check_mode": True}
    assert kube_module.check_mode is False and kube_module.params["name"] == "gpu-1"  # proxied


def test_redefining_an_auth_option_is_refused(monkeypatch):
    monkeypatch.setattr(base, "KubeAnsibleModule", FakeAnsibleModule)
    with pytest.raises(ValueError, match="kubeconfig"):
        base.KubeModule(dict(kubeconfig=dict(type="str")))


def run(kube_module, handler, **kwargs):
    with pytest.raises(Exited) as caught:
        kube_module.run(handler, **kwargs)
    return caught.value


def test_run_exits_with_the_handler_result(kube_module):
    done = run(kube_module, lambda m: dict(changed=True, node=m.params["name"]))
    assert done.kind == "exit" and done.result == {"changed": True, "node": "gpu-1"}


def test_run_fails_in_one_line_with_changed_false(kube_module, monkeypatch):
    def handler(_module):
        raise refused()

    monkeypatch.setattr(base, "last_call", lambda: CALL)  # the call the client traced last
    failed = run(kube_module, handler, node="gpu-1", result={"node": "gpu-1"})
    assert failed.kind == "fail"
    assert failed.result == {"changed": False, "node": "gpu-1", "msg": (
        "node gpu-1: cannot reach the Kubernetes API server 10.1.2.3:6443 (GET /api/v1/nodes/gpu-1): "
        "[Errno 111] Connection refused")}


def test_run_returns_the_result_an_error_carries(kube_module):
    def handler(_module):
        raise DrainError("node gpu-1: eviction blocked by PDB ns/pdb", result={"changed": True, "cordoned": True})

    failed = run(kube_module, handler, node="gpu-1", result={"node": "gpu-1", "changed": False})
    assert failed.result == {"changed": True, "cordoned": True, "node": "gpu-1",
                             "msg": "node gpu-1: eviction blocked by PDB ns/pdb"}


def test_run_lets_defects_through(kube_module):
    def handler(_module):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        kube_module.run(handler)


def test_bad_connection_settings_fail_in_run(monkeypatch):
    monkeypatch.setattr(base, "KubeAnsibleModule", FakeAnsibleModule)
    kube_module = base.KubeModule(dict(name=dict(type="str")))
    kube_module.params.update(host=None, kubeconfig="/nonexistent/kubeconfig")
    failed = run(kube_module, lambda m: m.ops().list_nodes())
    assert failed.kind == "fail" and failed.result["changed"] is False
    assert failed.result["msg"] == (
        "no usable Kubernetes connection to 10.1.2.3:6443: kubeconfig /nonexistent/kubeconfig does not exist")


def test_server_comes_from_the_built_client(monkeypatch, dead_server):
    monkeypatch.setattr(base, "KubeAnsibleModule", FakeAnsibleModule)
    kube_module = base.KubeModule(dict(name=dict(type="str")))
    kube_module.params.update(host=dead_server, api_key="t", validate_certs=False)
    failed = run(kube_module, lambda m: m.ops().get_node("gpu-7"), node="gpu-7")
    port = dead_server.rsplit(":", 1)[1]
    assert failed.result["msg"].startswith(
        "node gpu-7: cannot reach the Kubernetes API server 127.0.0.1:%s (GET /api/v1/nodes/gpu-7): " % port)
