"""Transient API faults (issue 18 items 2 and 3): the pool's urllib3 Retry against a real local HTTP server that
answers 503/429 first, the hand-written write retry, and KubeOps.watch over a fault-injecting transport (a list
function whose watch responses break, stall or answer 410/5xx as scripted).

Each test fails on the code before this change: there the client had no Retry (the first 503 was the answer),
writes were never retried, and a watch broken by ProtocolError or a read timeout raised out of the rollout."""

import http.server
import json
import threading
import time

import pytest
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import api, client
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded, KubeOps


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """Backoff in hundredths: the schedule is the same, the test is fast."""
    monkeypatch.setattr(client, "BACKOFF_FACTOR", 0.01)
    monkeypatch.setattr(client, "BACKOFF_MAX", 0.05)
    monkeypatch.setattr(api, "WATCH_MIN_REOPEN_INTERVAL", 0.0)


# -- the pool's Retry, against a real HTTP server on 127.0.0.1 ------------------------------------------------

class Scripted(http.server.BaseHTTPRequestHandler):
    answers = []  # (status, headers) consumed per request; then 200
    seen = []

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        Scripted.seen.append((self.command, time.monotonic()))
        status, headers = Scripted.answers.pop(0) if Scripted.answers else (200, {})
        body = b'{"kind":"Status","code":%d}' % status if status != 200 else b'{"ok":true}'
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_POST = _answer


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    Scripted.answers, Scripted.seen = [], []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_reads_are_retried_by_the_pool_on_5xx_and_429_with_retry_after(server, monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    Scripted.answers = [(503, {}), (429, {"Retry-After": "1"}), (500, {})]
    pool = urllib3.PoolManager(retries=client.retry_policy())
    started = time.monotonic()
    resp = pool.request("GET", server + "/api/v1/nodes")
    assert resp.status == 200 and len(Scripted.seen) == 4
    # The server's Retry-After (1 s) was waited, not the short backoff.
    assert Scripted.seen[2][1] - Scripted.seen[1][1] >= 0.9
    assert time.monotonic() - started < 5


def test_a_persistent_5xx_ends_with_the_servers_answer_within_the_window(server, monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "0.2")
    Scripted.answers = [(503, {})] * 50
    resp = urllib3.PoolManager(retries=client.retry_policy()).request("GET", server + "/api/v1/nodes")
    assert resp.status == 503  # raise_on_status=False: the caller sees the status and raises ApiException
    assert 2 <= len(Scripted.seen) < 50


def test_the_pool_does_not_repeat_a_write_after_a_status(server, monkeypatch):
    """urllib3 retries only idempotent methods after a status; writes are retry_write's (next tests)."""
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    Scripted.answers = [(503, {})]
    resp = urllib3.PoolManager(retries=client.retry_policy()).request("PATCH", server + "/api/v1/nodes/x", body=b"{}")
    assert resp.status == 503 and len(Scripted.seen) == 1


def test_connection_refused_is_retried_then_reported(monkeypatch):
    import socket

    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "0.2")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
    try:
        policy = client.retry_policy()
        with pytest.raises(urllib3.exceptions.MaxRetryError) as caught:
            urllib3.PoolManager(retries=policy).request("GET", "http://127.0.0.1:%d/" % sock.getsockname()[1])
    finally:
        sock.close()
    assert "refused" in str(caught.value.reason).lower()
    assert policy.connect >= 2


def test_api_client_of_the_collection_carries_the_retry(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    api_client = client.get_api_client({"kubeconfig": str(config)})
    retries = api_client.rest_client.pool_manager.connection_pool_kw["retries"]
    assert retries.status_forcelist == client.RETRY_STATUSES and retries.respect_retry_after_header


# -- writes --------------------------------------------------------------------------------------------------

class Resp(object):
    def __init__(self, status, headers=None):
        self.status = status
        self.headers = headers or {}

    def read(self):
        return b""


def scripted_send(outcomes):
    calls = []

    def send(method, url, *args, **kwargs):
        calls.append((method, url))
        outcome = outcomes.pop(0) if outcomes else Resp(200)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return send, calls


def test_a_write_is_retried_after_5xx_429_and_a_broken_connection(monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    send, calls = scripted_send([Resp(503), Resp(429, {"Retry-After": "0"}), ProtocolError("reset"), Resp(200)])
    assert client.retry_write(send, "PATCH", "https://h/api/v1/nodes/n").status == 200
    assert len(calls) == 4


def test_an_eviction_refused_by_a_budget_is_not_retried_here(monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    send, calls = scripted_send([Resp(429)])
    assert client.retry_write(send, "POST", "https://h/api/v1/namespaces/a/pods/p/eviction").status == 429
    assert len(calls) == 1
    send, calls = scripted_send([Resp(503), Resp(201)])
    assert client.retry_write(send, "POST", "https://h/api/v1/namespaces/a/pods/p/eviction").status == 201


def test_a_write_gives_up_at_the_window_with_the_last_answer_or_error(monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "0.1")
    send, calls = scripted_send([Resp(503)] * 100)
    assert client.retry_write(send, "DELETE", "https://h/x").status == 503
    assert 1 < len(calls) < 100
    send, calls = scripted_send([ProtocolError("reset")] * 100)
    with pytest.raises(ProtocolError):
        client.retry_write(send, "PATCH", "https://h/x")


def test_client_errors_are_not_retried(monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    for status in (400, 403, 404, 409, 422):
        send, calls = scripted_send([Resp(status)])
        assert client.retry_write(send, "PATCH", "https://h/x").status == status and len(calls) == 1


# -- watches over a fault-injecting transport -------------------------------------------------------------------

def node(rv, label=None):
    return {"metadata": {"name": "n1", "resourceVersion": str(rv), "labels": {"step": label} if label else {}}}


class WatchResp(object):
    """A watch response: yields its events as JSON lines, then ends, or raises ``fault`` (a broken or stalled
    connection) after them."""

    status = 200

    def __init__(self, events, fault=None):
        self.events = events
        self.fault = fault

    def stream(self, amt=None, decode_content=False):
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.fault is not None:
            raise self.fault

    def close(self):
        pass

    def release_conn(self):
        pass


class ListResp(object):
    def __init__(self, items, rv):
        self.data = json.dumps({"items": items, "metadata": {"resourceVersion": str(rv)}}).encode()


class Transport(object):
    """list_func for KubeOps.watch: each watch request takes the next scripted answer (a WatchResp or an
    exception raised at the request); list requests answer ``listing``."""

    def __init__(self, watches, listing):
        self.watches = list(watches)
        self.listing = listing
        self.requests = []

    def __call__(self, _preload_content=False, **params):
        self.requests.append(dict(params))
        if params.get("watch"):
            answer = self.watches.pop(0) if self.watches else WatchResp([])
            if isinstance(answer, Exception):
                raise answer  # pylint: disable=raising-non-exception  # an Exception instance (checked above)
            return answer
        return self.listing


@pytest.fixture
def ops():
    return KubeOps(ApiClient(), watch_timeout=7, read_margin=3)


def is_done(_event_type, obj):
    return ((obj.get("metadata") or {}).get("labels") or {}).get("step") == "done"


def test_a_dropped_watch_is_re_listed_and_resumed(ops):
    reset = ProtocolError("Connection broken", ConnectionResetError(104, "Connection reset by peer"))
    transport = Transport([WatchResp([{"type": "MODIFIED", "object": node(11)}], fault=reset),
                           WatchResp([{"type": "MODIFIED", "object": node(21, "done")}])],
                          ListResp([node(20)], 20))
    found = ops.watch(transport, time.monotonic() + 5, is_done, node(10))
    assert found["metadata"]["resourceVersion"] == "21"
    watches = [r for r in transport.requests if r.get("watch")]
    lists = [r for r in transport.requests if not r.get("watch")]
    assert [w["resource_version"] for w in watches] == ["10", "20"]  # resumed from the re-list's version
    assert len(lists) == 1
    # Every request bounds the read: server-side timeoutSeconds and a client read timeout a little longer.
    assert all(w["timeout_seconds"] <= 7 and w["_request_timeout"][1] == 10 for w in watches)
    assert ops.watch_errors and "ProtocolError" in ops.watch_errors[0]


def test_a_stalled_watch_times_out_and_the_change_is_found_by_the_re_list(ops):
    stall = ReadTimeoutError(None, "/api/v1/nodes", "Read timed out. (read timeout=10)")
    transport = Transport([WatchResp([], fault=stall)], ListResp([node(30, "done")], 30))
    found = ops.watch(transport, time.monotonic() + 5, is_done, node(10))
    assert found["metadata"]["resourceVersion"] == "30"


def test_gone_410_re_lists_without_counting_as_a_failure(ops):
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    transport = Transport([WatchResp([gone]), WatchResp([{"type": "MODIFIED", "object": node(41, "done")}])],
                          ListResp([node(40)], 40))
    assert ops.watch(transport, time.monotonic() + 5, is_done, node(10))["metadata"]["resourceVersion"] == "41"
    assert not ops.watch_errors


def test_an_unreachable_server_is_retried_until_it_answers(ops):
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", ConnectionRefusedError(111, "Connection refused"))
    unavailable = ApiException(status=503, reason="Service Unavailable")
    transport = Transport([refused, unavailable, refused, WatchResp([{"type": "MODIFIED", "object": node(51, "done")}])],
                          ListResp([node(50)], 50))
    assert ops.watch(transport, time.monotonic() + 5, is_done, node(10))["metadata"]["resourceVersion"] == "51"
    assert len(ops.watch_errors) == 3


def test_at_the_deadline_the_connection_error_is_raised_not_a_timeout(ops):
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", ConnectionRefusedError(111, "Connection refused"))
    transport = Transport([refused] * 1000, ListResp([node(50)], 50))
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        ops.watch(transport, time.monotonic() + 0.5, is_done, node(10))


def test_a_quiet_healthy_watch_still_ends_in_deadline_exceeded(ops):
    transport = Transport([], ListResp([], 1))
    with pytest.raises(DeadlineExceeded):
        ops.watch(transport, time.monotonic() + 0.3, is_done, node(10))


def test_other_api_errors_are_not_swallowed(ops):
    transport = Transport([ApiException(status=403, reason="Forbidden")], ListResp([], 1))
    with pytest.raises(ApiException):
        ops.watch(transport, time.monotonic() + 5, is_done, node(10))


def test_relisted_sees_objects_deleted_while_the_watch_was_down(ops):
    """drain.wait_gone's case: a pod deleted during the outage has no DELETED event; the re-list shows it gone."""
    waiting = {"p1", "p2"}

    def done(event_type, pod):
        if event_type == "DELETED":
            waiting.discard(pod["metadata"]["name"])
        return not waiting

    def relisted(items):
        present = set(i["metadata"]["name"] for i in items)
        waiting.intersection_update(present)
        return not waiting

    reset = ProtocolError("Connection broken", ConnectionResetError(104, "reset"))
    pod = {"metadata": {"name": "p1", "resourceVersion": "5"}}
    transport = Transport([WatchResp([{"type": "DELETED", "object": pod}], fault=reset)], ListResp([], 60))
    ops.watch(transport, time.monotonic() + 5, done, node(1), relisted=relisted)
    assert not waiting


def test_forbidden_right_after_an_outage_is_retried_and_otherwise_not(monkeypatch):
    """A kube-apiserver that has just restarted answers 403 until its RBAC cache has synced (seen in the testbed)."""
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    monkeypatch.setitem(client._REACHABILITY, "failed", None)
    send, calls = scripted_send([Resp(403), Resp(200)])
    assert client.retry_after_restart(send, "GET", "https://h/api/v1/nodes").status == 403 and len(calls) == 1
    client.note_unreachable()
    send, calls = scripted_send([Resp(403), Resp(401), Resp(200)])
    assert client.retry_after_restart(send, "GET", "https://h/api/v1/nodes").status == 200 and len(calls) == 3
    monkeypatch.setitem(client._REACHABILITY, "failed", None)
