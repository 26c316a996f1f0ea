"""Time limits of every request (request_timeout, api_retry_seconds) and the kubeconfig's secrets.

Against real sockets on 127.0.0.1: a server that accepts and never answers, a server that answers 503. The
clock of the retry code is a stand-in (its sleep moves it on), so the retry window is counted, not waited."""

import http.server
import socket
import threading

import pytest
import urllib3

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import client


class Clock(object):
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(client, "time", fake)
    monkeypatch.setattr(urllib3.util.retry, "time", fake)
    client.RETRIES.clear()
    yield fake
    client.RETRIES.clear()


@pytest.fixture
def silent_server():
    """Accepts connections and reads, never answers; counts the connections."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def serve():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % listener.getsockname()[1], accepted
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_read_that_timed_out_is_not_sent_again(silent_server, clock):
    url, accepted = silent_server
    pool = urllib3.PoolManager(retries=client.retry_policy(30))
    with pytest.raises(urllib3.exceptions.MaxRetryError) as caught:
        pool.request("GET", url + "/api/v1/nodes", timeout=urllib3.Timeout(connect=1, read=0.2))
    assert isinstance(caught.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert len(accepted) == 1 and clock.sleeps == []


class Unavailable(http.server.BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        Unavailable.seen.append(self.path)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def unavailable():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    Unavailable.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_retries_stop_at_the_window_and_are_logged(unavailable, clock):
    resp = urllib3.PoolManager(retries=client.retry_policy(10)).request("GET", unavailable + "/api/v1/nodes")
    assert resp.status == 503
    # 0.5 + 1 + 2 + 4 s of backoff fit in 10 s: four retries (urllib3 sends the first at once), five requests.
    assert len(Unavailable.seen) == 5 and sum(clock.sleeps) <= 10
    assert client.RETRIES.lines(10) == ["GET /api/v1/nodes (HTTP 503): retried 4 times over 3 s (api_retry_seconds=10)"]


def test_the_window_is_counted_from_the_first_failure_whatever_the_attempts_left(unavailable, clock):
    policy = client.retry_policy(10)
    policy.total = policy.status = 100  # attempts to spare: the window alone ends the retries
    resp = urllib3.PoolManager(retries=policy).request("GET", unavailable + "/api/v1/nodes")
    assert resp.status == 503
    assert sum(clock.sleeps[:-1]) < 10 <= sum(clock.sleeps)


def test_no_retry_when_the_window_is_zero(unavailable, clock):
    resp = urllib3.PoolManager(retries=client.retry_policy(0)).request("GET", unavailable + "/api/v1/nodes")
    assert resp.status == 503 and len(Unavailable.seen) == 1 and client.RETRIES.lines() == []


def test_request_timeouts_connect_is_at_most_ten_seconds_and_never_longer_than_the_read():
    assert client.request_timeouts() == (10.0, 60.0)
    assert client.request_timeouts(120) == (10.0, 120.0)
    assert client.request_timeouts(3) == (3.0, 3.0)


class Answer(object):
    status = 200


class Rest(object):
    pool_manager = None

    def __init__(self):
        self.sent = []

    def request(self, method, url, *args, **kwargs):
        self.sent.append((method, url, kwargs.get("_request_timeout")))
        return Answer()


class FakeApiClient(object):
    def __init__(self):
        self.rest_client = Rest()


def test_every_request_without_a_timeout_of_its_own_gets_the_module_timeouts():
    api_client = FakeApiClient()
    rest = api_client.rest_client
    calls = rest.sent
    client.trace_calls(api_client, window=3, timeout=client.request_timeouts(7))
    rest.request("GET", "https://h/api/v1/nodes")
    rest.request("PATCH", "https://h/api/v1/nodes/n", body={})
    rest.request("GET", "https://h/api/v1/nodes?watch=true", _request_timeout=(10, 70))  # a watch sets its own
    assert [timeout for _m, _u, timeout in calls] == [(7.0, 7.0), (7.0, 7.0), (10, 70)]


def test_the_api_client_carries_the_window_of_api_retry_seconds(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG_YAML)
    api_client = client.get_api_client({"kubeconfig": str(config), "request_timeout": 7, "api_retry_seconds": 3})
    assert api_client.rest_client.pool_manager.connection_pool_kw["retries"].window == 3


KUBECONFIG_YAML = """
apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: "s3cret-token", exec: {command: get-token, env: [{name: K, value: "env-secret"}]}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
"""


def test_secret_values_are_the_credentials_of_a_kubeconfig_mapping():
    import yaml

    content = yaml.safe_load(KUBECONFIG_YAML)
    assert client.secret_values(content) == {"s3cret-token", "get-token", "K", "env-secret"}
    assert client.secret_values("/home/me/.kube/config") == set()
    assert client.secret_values(None) == set()
    # a malformed mapping has no credentials to hide (the client then refuses it, naming the kubeconfig)
    assert client.secret_values({"clusters": "x", "users": 1}) == set()
    assert client.secret_values({"users": "name"}) == set()


def test_a_missing_kubeconfig_path_and_a_wrong_context_are_named(tmp_path):
    missing = tmp_path / "nope" / "kubeconfig"
    with pytest.raises(client.KubeAuthError, match="^kubeconfig %s does not exist$" % missing):
        client.get_api_client({"kubeconfig": str(missing)})
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG_YAML)
    with pytest.raises(client.KubeAuthError) as caught:
        client.get_api_client({"kubeconfig": str(config), "context": "elsewhere"})
    assert str(caught.value).startswith("cannot load kubeconfig %s (context elsewhere): " % config)
