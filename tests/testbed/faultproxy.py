"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the testbed's real kube-apiserver.

Clients talk plain HTTP to the proxy (kubeconfig ``server: http://127.0.0.1:<port>``); the proxy forwards each
request over TLS to the real API server with the cluster's admin client certificate and streams the answer back
(watches included). It is not a fake API server: every request that no fault rule matches is answered by the
real one. Rules (first match wins, each with an optional count) make it instead:

- ``status``: answer ``code`` itself (e.g. 503, or 429 with ``Retry-After``) without forwarding;
- ``reset``: forward nothing and reset the connection (RST: SO_LINGER 0), as a crashed server or middlebox does;
- ``cut``: forward, stream the answer for ``after`` seconds, then reset the connection (a dropped watch);
- ``stall``: forward, send the answer's headers, then forward nothing more while holding the connection open
  (a half-open connection that never sends);
- ``silent``: take the request, forward nothing and answer nothing, holding the connection open until the client
  gives up or the proxy stops (a server that accepts and never answers: a hung apiserver, an etcd that stopped);
- ``refuse()``: stop listening for some seconds (connection refused), then listen on the same port again.

A rule matches a request by method, a regular expression on the path (with query) and one on the body (a write's
JSON), so a test can aim at one write among several to the same object. A request that carries its own
``Authorization`` (a ServiceAccount token: ``kubeconfig(path, token=...)``) is forwarded without the admin
certificate, so the API server authenticates and authorizes the token's account, not the admin.

Every request is logged as (method, path with query, action) in ``.log``. Used by tests/integration/reliability/control_plane/.
"""

import contextlib
import http.client
import http.server
import re
import socket
import socketserver
import ssl
import struct
import threading
import time
from pathlib import Path

import yaml

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade"}


class Rule:
    def __init__(self, action, match=None, method=None, count=None, code=503, retry_after=None, after=0.0, body=None):
        self.action = action
        self.match = re.compile(match) if match else None
        self.body = re.compile(body) if body else None
        self.method = method
        self.count = count  # None: unlimited
        self.code = code
        self.retry_after = retry_after
        self.after = after
        self.hits = 0

    def applies(self, method, path, body=b""):
        if self.count is not None and self.hits >= self.count:
            return False
        if self.method and method != self.method:
            return False
        if self.body and not self.body.search((body or b"").decode("utf-8", "replace")):
            return False
        return not self.match or bool(self.match.search(path))


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


class FaultProxy:
    """``FaultProxy(upstream_host, upstream_port, cert, key).start()``; ``.url``; rules via ``add``/``clear``."""

    def __init__(self, upstream_host, upstream_port, client_cert, client_key, port=0):
        self.upstream = (upstream_host, int(upstream_port))
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # the testbed's self-signed serving cert on loopback
        self.context.load_cert_chain(str(client_cert), str(client_key))
        self.token_context = ssl.create_default_context()  # for requests that bring their own credentials
        self.token_context.check_hostname = False
        self.token_context.verify_mode = ssl.CERT_NONE
        self.rules = []
        self.log = []
        self.port = port
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self._stopping = threading.Event()  # set by stop(): stalled connections are let go

    @classmethod
    def for_kubeconfig(cls, kubeconfig, cluster_dir):
        """A proxy for the testbed cluster whose admin kubeconfig and pki directory are given."""
        config = yaml.safe_load(Path(kubeconfig).read_text())
        server = config["clusters"][0]["cluster"]["server"]
        host, port = re.match(r"https://([^:/]+):(\d+)", server).groups()
        pki = Path(cluster_dir) / "pki"
        return cls(host, int(port), pki / "admin.crt", pki / "admin.key")

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def kubeconfig(self, path, token=None):
        """Write a kubeconfig that reaches the API server through this proxy, as the admin or, with ``token``, as
        that token's account; returns the path."""
        Path(path).write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}]}))
        return Path(path)

    # -- rules ------------------------------------------------------------------------------------------
    def add(self, action, **kwargs):
        rule = Rule(action, **kwargs)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self):
        """Remove the rules (the log stays, for the assertions after a run)."""
        with self._lock:
            self.rules = []

    def reset(self):
        """Remove the rules and forget the log: a proxy shared by several tests starts each one afresh."""
        with self._lock:
            self.rules = []
            self.log = []

    def _pick(self, method, path, body=None):
        with self._lock:
            for rule in self.rules:
                if rule.applies(method, path, body):
                    rule.hits += 1
                    return rule
        return None

    def _record(self, method, path, action):
        with self._lock:
            self.log.append((method, path, action))

    def actions(self, action):
        with self._lock:
            return [entry for entry in self.log if entry[2] == action]

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _any

        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._stopping.set()

    def refuse(self, seconds):
        """Stop listening for ``seconds`` (connections are refused), then listen on the same port again."""
        self.stop()
        self._record("-", "-", "refuse %.1fs" % seconds)
        time.sleep(seconds)
        self.start()

    # -- one request ------------------------------------------------------------------------------------
    @staticmethod
    def _reset(handler):
        sock = handler.connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        handler.close_connection = True

    def _handle(self, handler):
        method, path = handler.command, handler.path
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        rule = self._pick(method, path, body)
        action = rule.action if rule else "forward"
        self._record(method, path, action)
        if action == "status":
            payload = ('{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the fault proxy",'
                       '"code":%d}' % rule.code).encode()
            handler.send_response(rule.code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            if rule.retry_after is not None:
                handler.send_header("Retry-After", str(rule.retry_after))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        if action == "reset":
            self._reset(handler)
            return
        if action == "silent":
            handler.close_connection = True
            self._stopping.wait()
            return
        headers = dict((k, v) for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS | {"host"})
        own_credentials = any(k.lower() == "authorization" for k in headers)
        conn = http.client.HTTPSConnection(*self.upstream, context=self.token_context if own_credentials else self.context,
                                           timeout=None)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError:
            self._reset(handler)
            conn.close()
            return
        # One request per connection. A chunked answer (a watch) is sent on chunked, each piece as it comes: a client
        # reading an answer delimited by the connection's close would see a watch's events only when it ends.
        chunked = bool(resp.chunked)
        handler.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_HEADERS:
                handler.send_header(key, value)
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        handler.close_connection = True
        try:
            if action == "stall":
                # Hold the connection open, send nothing more, until the proxy stops (the handler thread stays).
                self._stopping.wait()
                return
            if action == "cut":
                timer = threading.Timer(rule.after, self._cut, (handler, conn))
                timer.daemon = True
                timer.start()
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    if chunked:
                        handler.wfile.write(b"0\r\n\r\n")
                    return
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                handler.wfile.flush()
        except (OSError, ValueError, http.client.HTTPException):
            return
        finally:
            conn.close()

    def _cut(self, handler, conn):
        self._reset(handler)
        with contextlib.suppress(OSError, AttributeError):
            conn.sock.shutdown(socket.SHUT_RDWR)  # unblocks the read of the upstream answer
