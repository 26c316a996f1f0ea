"""Transient API faults: the pool's urllib3 Retry against a real local HTTP server that
answers 503/429 first, the hand-written write retry, and KubeOps.watch over a fault-injecting transport (a list
function whose watch responses break, stall or answer 410/5xx as scripted).

Each test fails on a client without that Retry (the first 503 would be the answer), on writes that are not
retried, and on a watch that lets ProtocolError or a read timeout raise out of the rollout.

No test here reads the real clock: ``clock`` (autouse) stands in for ``time`` in the retry code (k8s/client.py),
the watch (k8s/api.py) and urllib3's Retry; its ``sleep`` records the wait and moves the clock on. So each test
asserts the exact attempts that fit in the window and the exact backoff waits, with the real constants."""

import http.server
import json
import threading

import pytest
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import api, client
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import DeadlineExceeded, KubeOps
from tests.support import kube


class FakeClock(object):
    """``time`` for the code under test: monotonic() and time() read ``now``; sleep() records and advances it."""

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

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(client, "time", fake)
    monkeypatch.setattr(api, "time", fake)
    monkeypatch.setattr(urllib3.util.retry, "time", fake)  # Retry.sleep's waits (backoff and Retry-After)
    return fake


# -- the pool's Retry, against a real HTTP server on 127.0.0.1 ------------------------------------------------

class Scripted(http.server.BaseHTTPRequestHandler):
    answers = []  # (status, headers) consumed per request; then 200
    seen = []
    paths = []
    auth = []

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        Scripted.seen.append(self.command)
        Scripted.paths.append(self.path)
        Scripted.auth.append(self.headers.get("Authorization"))
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
    Scripted.answers, Scripted.seen, Scripted.paths, Scripted.auth = [], [], [], []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_reads_are_retried_by_the_pool_on_5xx_and_429_with_retry_after(server, monkeypatch, clock):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    Scripted.answers = [(503, {}), (429, {"Retry-After": "3"}), (500, {})]
    pool = urllib3.PoolManager(retries=client.retry_policy())
    resp = pool.request("GET", server + "/api/v1/nodes")
    assert resp.status == 200 and len(Scripted.seen) == 4
    # urllib3's schedule: the first retry at once; then the server's Retry-After (3 s), not the backoff; then
    # BACKOFF_FACTOR * 2 ** (3 - 1) after the third error in a row.
    assert clock.sleeps == [3, 2.0]


def test_a_persistent_5xx_ends_with_the_servers_answer_within_the_window(server, monkeypatch, clock):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "10")
    Scripted.answers = [(503, {})] * 50
    resp = urllib3.PoolManager(retries=client.retry_policy()).request("GET", server + "/api/v1/nodes")
    assert resp.status == 503  # raise_on_status=False: the caller sees the status and raises ApiException
    # backoff 0.5 + 1 + 2 + 4 = 7.5 s fits in 10 s, a fifth retry (+ 8 s) does not: 4 retries, 5 requests.
    assert client.retry_attempts() == 4 and len(Scripted.seen) == 5
    assert clock.sleeps == [1.0, 2.0, 4.0] and sum(clock.sleeps) <= 10  # urllib3 sends the first retry at once


def test_the_pool_does_not_repeat_a_write_after_a_status(server, monkeypatch):
    """urllib3 retries only idempotent methods after a status; writes are retry_write's (next tests)."""
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    Scripted.answers = [(503, {})]
    resp = urllib3.PoolManager(retries=client.retry_policy()).request("PATCH", server + "/api/v1/nodes/x", body=b"{}")
    assert resp.status == 503 and len(Scripted.seen) == 1


def test_connection_refused_is_retried_then_reported(monkeypatch, clock):
    import socket

    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "10")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
    try:
        policy = client.retry_policy()
        with pytest.raises(urllib3.exceptions.MaxRetryError) as caught:
            urllib3.PoolManager(retries=policy).request("GET", "http://127.0.0.1:%d/" % sock.getsockname()[1])
    finally:
        sock.close()
    assert "refused" in str(caught.value.reason).lower()
    assert policy.connect == 4 and clock.sleeps == [1.0, 2.0, 4.0]


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


def test_a_write_is_retried_after_5xx_429_and_a_broken_connection(monkeypatch, clock):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "10")
    send, calls = scripted_send([Resp(503), Resp(429, {"Retry-After": "3"}), ProtocolError("reset"), Resp(200)])
    assert client.retry_write(send, "PATCH", "https://h/api/v1/nodes/n").status == 200
    assert len(calls) == 4
    # backoff(1) after the 503, the server's Retry-After after the 429, backoff(3) after the broken connection.
    assert clock.sleeps == [0.5, 3.0, 2.0]


def test_an_eviction_refused_by_a_budget_is_not_retried_here(monkeypatch):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    send, calls = scripted_send([Resp(429)])
    assert client.retry_write(send, "POST", "https://h/api/v1/namespaces/a/pods/p/eviction").status == 429
    assert len(calls) == 1
    send, calls = scripted_send([Resp(503), Resp(201)])
    assert client.retry_write(send, "POST", "https://h/api/v1/namespaces/a/pods/p/eviction").status == 201


def slow(send, clock, seconds):
    """``send`` whose every request takes ``seconds`` on the clock: the window counts them too."""
    def timed(*args, **kwargs):
        clock.advance(seconds)
        return send(*args, **kwargs)
    return timed


def test_a_write_gives_up_at_the_window_with_the_last_answer_or_error(monkeypatch, clock):
    """Default window (40 s), each request 1 s: attempts at 0, 1.5, 3.5, 6.5, 11.5, 20.5, 29.5 and 38.5 s; a
    ninth would start after 39.5 + 8 s, past the window, so the eighth answer is the result."""
    monkeypatch.delenv(client.RETRY_SECONDS_ENV, raising=False)
    schedule = [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    send, calls = scripted_send([Resp(503)] * 100)
    started = clock.now
    assert client.retry_write(slow(send, clock, 1.0), "DELETE", "https://h/x").status == 503
    assert len(calls) == 8 and clock.sleeps == schedule
    assert clock.now - started == 39.5
    clock.sleeps[:] = []
    send, calls = scripted_send([ProtocolError("reset")] * 100)
    with pytest.raises(ProtocolError):
        client.retry_write(slow(send, clock, 1.0), "PATCH", "https://h/x")
    assert len(calls) == 8 and clock.sleeps == schedule


def test_a_server_retry_after_past_the_window_ends_the_write_with_that_answer(monkeypatch, clock):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    send, calls = scripted_send([Resp(503), Resp(429, {"Retry-After": "30"})])
    assert client.retry_write(send, "PATCH", "https://h/x").status == 429
    assert len(calls) == 2 and clock.sleeps == [0.5]


def test_client_errors_are_not_retried(monkeypatch, clock):
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    for status in (400, 403, 404, 409, 422):
        send, calls = scripted_send([Resp(status)])
        assert client.retry_write(send, "PATCH", "https://h/x").status == status and len(calls) == 1
    assert clock.sleeps == []


# -- watches over a fault-injecting transport -------------------------------------------------------------------

def node(rv, label=None):
    return kube.node("n1", resource_version=rv, labels={"step": label} if label else {})


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


def test_a_dropped_watch_is_re_listed_and_resumed(ops, clock):
    reset = ProtocolError("Connection broken", ConnectionResetError(104, "Connection reset by peer"))
    transport = Transport([WatchResp([{"type": "MODIFIED", "object": node(11)}], fault=reset),
                           WatchResp([{"type": "MODIFIED", "object": node(21, "done")}])],
                          ListResp([node(20)], 20))
    found = ops.watch(transport, clock.monotonic() + 5, is_done, node(10))
    assert found["metadata"]["resourceVersion"] == "21"
    watches = [r for r in transport.requests if r.get("watch")]
    lists = [r for r in transport.requests if not r.get("watch")]
    assert [w["resource_version"] for w in watches] == ["10", "20"]  # resumed from the re-list's version
    assert len(lists) == 1
    # Every request bounds the read: server-side timeoutSeconds (no later than the deadline) and a client read
    # timeout read_margin longer.
    assert all(w["timeout_seconds"] <= 5 and w["_request_timeout"][1] == w["timeout_seconds"] + 3 for w in watches)
    assert ops.watch_errors and "ProtocolError" in ops.watch_errors[0]
    assert clock.sleeps == [api.WATCH_MIN_REOPEN_INTERVAL]  # backoff(1) is shorter than the re-open interval


def test_a_stalled_watch_times_out_and_the_change_is_found_by_the_re_list(ops, clock):
    stall = ReadTimeoutError(None, "/api/v1/nodes", "Read timed out. (read timeout=10)")
    transport = Transport([WatchResp([], fault=stall)], ListResp([node(30, "done")], 30))
    found = ops.watch(transport, clock.monotonic() + 5, is_done, node(10))
    assert found["metadata"]["resourceVersion"] == "30"
    assert clock.sleeps == [1.0] and [bool(r.get("watch")) for r in transport.requests] == [True, False]


def test_gone_410_re_lists_without_counting_as_a_failure(ops, clock):
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    transport = Transport([WatchResp([gone]), WatchResp([{"type": "MODIFIED", "object": node(41, "done")}])],
                          ListResp([node(40)], 40))
    assert ops.watch(transport, clock.monotonic() + 5, is_done, node(10))["metadata"]["resourceVersion"] == "41"
    assert not ops.watch_errors
    assert clock.sleeps == [api.WATCH_MIN_REOPEN_INTERVAL]  # no backoff: 410 is not a failure


def test_an_unreachable_server_is_retried_until_it_answers(ops, clock):
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", ConnectionRefusedError(111, "Connection refused"))
    unavailable = ApiException(status=503, reason="Service Unavailable")
    transport = Transport([refused, unavailable, refused, WatchResp([{"type": "MODIFIED", "object": node(51, "done")}])],
                          ListResp([node(50)], 50))
    assert ops.watch(transport, clock.monotonic() + 5, is_done, node(10))["metadata"]["resourceVersion"] == "51"
    assert len(ops.watch_errors) == 3
    # max(re-open interval, backoff(failures in a row)): 1, max(1, 1), max(1, 2).
    assert clock.sleeps == [1.0, 1.0, 2.0]


def test_at_the_deadline_the_connection_error_is_raised_not_a_timeout(ops, clock):
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", ConnectionRefusedError(111, "Connection refused"))
    transport = Transport([refused] * 1000, ListResp([node(50)], 50))
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        ops.watch(transport, clock.monotonic() + 0.5, is_done, node(10))
    # One attempt, then the pause is cut at the deadline; the second error ends the wait.
    assert clock.sleeps == [0.5] and len(transport.requests) == 1


def test_a_quiet_healthy_watch_still_ends_in_deadline_exceeded(ops, clock):
    transport = Transport([], ListResp([], 1))
    with pytest.raises(DeadlineExceeded):
        ops.watch(transport, clock.monotonic() + 0.25, is_done, node(10))
    assert clock.sleeps == [0.25] and len(transport.requests) == 1 and transport.requests[0]["timeout_seconds"] == 1


def test_other_api_errors_are_not_swallowed(ops, clock):
    transport = Transport([ApiException(status=403, reason="Forbidden")], ListResp([], 1))
    with pytest.raises(ApiException):
        ops.watch(transport, clock.monotonic() + 5, is_done, node(10))


def test_relisted_sees_objects_deleted_while_the_watch_was_down(ops, clock):
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
    ops.watch(transport, clock.monotonic() + 5, done, node(1), relisted=relisted)
    assert not waiting


def test_forbidden_is_retried_only_while_the_server_says_it_is_not_ready(monkeypatch, clock):
    """A kube-apiserver that has just (re)started answers 403 to a ServiceAccount until its RBAC informers have
    synced, while its /readyz answers 500 (measured in the testbed, docs/reliability.md)."""
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    readiness = []

    def not_ready():
        readiness.append(True)
        return len(readiness) <= 2  # /readyz: 500, 500, then ok

    send, calls = scripted_send([Resp(403), Resp(401), Resp(200)])
    assert client.retry_while_not_ready(send, not_ready, "GET", "https://h/api/v1/nodes").status == 200
    assert len(calls) == 3 and clock.sleeps == [0.5, 1.0] and len(readiness) == 2
    # A ready server's 403 is the answer at once (one look at /readyz, no wait).
    send, calls = scripted_send([Resp(403), Resp(200)])
    assert client.retry_while_not_ready(send, lambda: False, "PATCH", "https://h/api/v1/nodes/n").status == 403
    assert len(calls) == 1 and clock.sleeps == [0.5, 1.0]
    # Never ready: retried for STARTING_SECONDS (longer than this window: a start-up is an outage in progress):
    # 0.5 + 1 + 2 + 4 + 8 * 14 = 119.5 s; + 8 s is past 120 s. Then the 403.
    clock.sleeps[:] = []
    send, calls = scripted_send([Resp(403)] * 100)
    assert client.retry_while_not_ready(send, lambda: True, "GET", "https://h/api/v1/nodes").status == 403
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0] + [8.0] * 14 and len(calls) == 19
    # A longer retry window is the bound then.
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "200")
    clock.sleeps[:] = []
    send, calls = scripted_send([Resp(403)] * 100)
    assert client.retry_while_not_ready(send, lambda: True, "GET", "https://h/api/v1/nodes").status == 403
    assert sum(clock.sleeps) == 199.5 and len(calls) == 29


def test_forbidden_raised_by_an_older_client_is_retried_the_same_way(monkeypatch, clock):
    """kubernetes < 37: the client's request raises ApiException for a non-2xx status."""
    monkeypatch.setenv(client.RETRY_SECONDS_ENV, "5")
    send, calls = scripted_send([ApiException(status=403, reason="Forbidden"), Resp(200)])
    assert client.retry_while_not_ready(send, lambda: True, "GET", "https://h/api/v1/nodes").status == 200
    assert len(calls) == 2 and clock.sleeps == [0.5]
    send, calls = scripted_send([ApiException(status=403, reason="Forbidden"), Resp(200)])
    with pytest.raises(ApiException):
        client.retry_while_not_ready(send, lambda: False, "GET", "https://h/api/v1/nodes")
    send, calls = scripted_send([ApiException(status=404, reason="Not Found")])
    with pytest.raises(ApiException):
        client.retry_while_not_ready(send, lambda: True, "GET", "https://h/api/v1/nodes/x")
    assert len(calls) == 1 and clock.sleeps == [0.5]


@pytest.mark.parametrize("status,not_ready", [(500, True), (503, True), (200, False), (404, False), (403, False)])
def test_server_not_ready_asks_readyz_once_with_the_requests_credentials(server, status, not_ready):
    Scripted.answers = [(status, {})]
    pool = urllib3.PoolManager(retries=client.retry_policy())
    headers = {"Authorization": "Bearer t", "Content-Type": "application/json"}
    assert client.server_not_ready(pool, server + "/api/v1/nodes?limit=1", headers) is not_ready
    assert Scripted.seen == ["GET"] and Scripted.paths == ["/readyz"] and Scripted.auth == ["Bearer t"]


def test_server_not_ready_without_an_answer_is_no_evidence():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
    try:
        assert client.server_not_ready(urllib3.PoolManager(), "http://127.0.0.1:%d/api/v1/nodes" % sock.getsockname()[1]) \
            is False
    finally:
        sock.close()
