"""A real Prometheus server (Debian's `prometheus` package, installed by `make report-deps`) on 127.0.0.1 that
scrapes the simulated dcgm-exporter endpoints; started and stopped by the tests, data in a temporary dir.

    python -m tests.testbed.dcgm.prometheus --check   # prints the binary's version or why it is missing
"""

import base64
import datetime
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

BINARY_CANDIDATES = ("prometheus", "/usr/bin/prometheus")
SCRAPE_INTERVAL_S = 1  # short so tests see a change within seconds; a real exporter is scraped every 15 s


class PrometheusError(RuntimeError):
    pass


def find_binary():
    for candidate in BINARY_CANDIDATES:
        path = shutil.which(candidate)
        if path:
            return path
    raise PrometheusError("prometheus binary not found: run `make report-deps` (apt-get install prometheus)")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_private_ca(directory):
    """A CA and a server certificate for 127.0.0.1 signed by it (PEM files in ``directory``): the private CA a
    production Prometheus often has. Returns {ca, cert, key} paths."""
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel
    import ipaddress  # pylint: disable=import-outside-toplevel

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpufleet test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = dict((name, os.path.join(str(directory), name + ".pem")) for name in ("ca", "cert", "key"))
    with open(paths["ca"], "wb") as handle:
        handle.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert"], "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key"], "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return paths


class Prometheus(object):
    def __init__(self, workdir, targets, scrape_interval_s=SCRAPE_INTERVAL_S, users=None, tls=False):
        """``targets``: {node name: "127.0.0.1:port"} of dcgm-exporter endpoints. ``users`` ({name: password}) turns
        on Prometheus' own basic auth and ``tls`` HTTPS with a private CA (``ca_path``): its web config file
        (https://prometheus.io/docs/prometheus/latest/configuration/https/)."""
        self.workdir = str(workdir)
        self.targets = dict(targets)
        self.scrape_interval_s = scrape_interval_s
        self.users = dict(users or {})
        self.tls = tls
        self.ca_path = None
        self.port = None
        self.process = None

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def _open(self, url, timeout):
        """urlopen as an authorised client: the first user's credentials, the private CA."""
        request = urllib.request.Request(url)
        if self.users:
            user, password = sorted(self.users.items())[0]
            request.add_header("Authorization", "Basic " + base64.b64encode(
                ("%s:%s" % (user, password)).encode()).decode())
        context = ssl.create_default_context(cafile=self.ca_path) if self.tls else None
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def _web_config(self):
        """The --web.config.file, or None without users and TLS."""
        if not (self.users or self.tls):
            return None
        import bcrypt  # pylint: disable=import-outside-toplevel

        config = {}
        if self.users:
            config["basic_auth_users"] = dict(
                (user, bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode())
                for user, password in self.users.items())
        if self.tls:
            paths = write_private_ca(self.workdir)
            self.ca_path = paths["ca"]
            config["tls_server_config"] = {"cert_file": paths["cert"], "key_file": paths["key"]}
        path = os.path.join(self.workdir, "web.yml")
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle)
        return path

    def _config(self):
        return {
            "global": {"scrape_interval": "%ds" % self.scrape_interval_s,
                       "evaluation_interval": "%ds" % self.scrape_interval_s},
            "scrape_configs": [{
                "job_name": "dcgm-exporter",
                "static_configs": [{"targets": [target], "labels": {"node": node}}
                                   for node, target in sorted(self.targets.items())],
            }],
        }

    def start(self, timeout=60):
        binary = find_binary()
        os.makedirs(self.workdir, exist_ok=True)
        config_path = os.path.join(self.workdir, "prometheus.yml")
        with open(config_path, "w") as handle:
            yaml.safe_dump(self._config(), handle)
        self.port = _free_port()
        web_config = self._web_config()
        log = open(os.path.join(self.workdir, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            [binary, "--config.file=" + config_path, "--storage.tsdb.path=" + os.path.join(self.workdir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--web.enable-lifecycle"]
            + (["--web.config.file=" + web_config] if web_config else []),
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError("prometheus exited with %s; log: %s" % (self.process.returncode, self.log_tail()))
            try:
                with self._open(self.url + "/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise PrometheusError("prometheus not ready within %ds on %s" % (timeout, self.url))

    def log_tail(self, lines=20):
        try:
            with open(os.path.join(self.workdir, "prometheus.log")) as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""

    def query(self, expression):
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with self._open(url, timeout=10) as response:
            return json.loads(response.read())["data"]["result"]

    def wait_for_series(self, expression, count, timeout=60):
        """Block until the query returns at least ``count`` series (scrapes have happened)."""
        deadline = time.time() + timeout
        found = []
        while time.time() < deadline:
            found = self.query(expression)
            if len(found) >= count:
                return found
            time.sleep(0.5)
        raise PrometheusError("%s returned %d series, expected %d, within %ds" % (expression, len(found), count,
                                                                                  timeout))

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class TokenProxy(object):
    """A bearer-token gate in front of a Prometheus on 127.0.0.1, as kube-rbac-proxy or an OAuth proxy puts one in
    front of a production Prometheus (Prometheus itself has no bearer-token auth): a GET with
    ``Authorization: Bearer <token>`` is forwarded, anything else answers 401."""

    def __init__(self, upstream, token):
        self.upstream = upstream
        self.token = token
        self.refused = 0
        self.server = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.headers.get("Authorization") != "Bearer " + proxy.token:
                    proxy.refused += 1
                    self._answer(401, b"Unauthorized\n")
                    return
                try:
                    with proxy.upstream._open(proxy.upstream.url + self.path, timeout=10) as response:
                        self._answer(response.status, response.read())
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read())

            def _answer(self, status, body):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


if __name__ == "__main__":
    if "--check" in sys.argv:
        try:
            path = find_binary()
        except PrometheusError as exc:
            sys.exit(str(exc))
        print(subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0])
