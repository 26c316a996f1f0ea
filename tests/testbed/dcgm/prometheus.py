"""A real Prometheus server (Debian's `prometheus` package, installed by `make report-deps`) on 127.0.0.1 that
scrapes the simulated dcgm-exporter endpoints; started and stopped by the tests, data in a temporary dir.

    python -m tests.testbed.dcgm.prometheus --check   # prints the binary's version or why it is missing
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
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


class Prometheus(object):
    def __init__(self, workdir, targets, scrape_interval_s=SCRAPE_INTERVAL_S):
        """``targets``: {node name: "127.0.0.1:port"} of dcgm-exporter endpoints."""
        self.workdir = str(workdir)
        self.targets = dict(targets)
        self.scrape_interval_s = scrape_interval_s
        self.port = None
        self.process = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

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
        log = open(os.path.join(self.workdir, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            [binary, "--config.file=" + config_path, "--storage.tsdb.path=" + os.path.join(self.workdir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError("prometheus exited with %s; log: %s" % (self.process.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
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
        with urllib.request.urlopen(url, timeout=10) as response:
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


if __name__ == "__main__":
    if "--check" in sys.argv:
        try:
            path = find_binary()
        except PrometheusError as exc:
            sys.exit(str(exc))
        print(subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0])
