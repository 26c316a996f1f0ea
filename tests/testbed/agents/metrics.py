"""dcgm-exporter stand-in: Prometheus text per simulated node on 127.0.0.1, values settable per GPU or MIG slice.

Metric and label names follow NVIDIA/dcgm-exporter (reference nvidia-gpu-operator-and-mig.md §8):
series carry gpu, UUID, pci_bus_id, device, modelName, Hostname, and GPU_I_PROFILE/GPU_I_ID for MIG
devices; DCGM_FI_DEV_GPU_UTIL is not reported for MIG-enabled GPUs (use the PROF metrics there).
Values: JSON file `<hosts-dir>/<node>.metrics.json` {"<gpu>" | "<gpu>/<gi_id>": {"METRIC": value}},
default 0; re-read at every scrape.
"""

import http.server
import json
import threading

from tests.testbed.gpusim import hoststate

GPU_METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
)
DEVICE_METRICS = (
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (in MB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (in MB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data."),
)


def _labels(pairs):
    return "{" + ",".join('%s="%s"' % (k, str(v).replace('"', '\\"')) for k, v in pairs) + "}"


def render(node, summary, values):
    """Prometheus text exposition of one host's GPUs and MIG devices."""
    series = {metric[0]: [] for metric in GPU_METRICS + DEVICE_METRICS}
    for gpu in summary["gpus"]:
        base = [("gpu", gpu["index"]), ("UUID", gpu["uuid"]), ("pci_bus_id", gpu["pci_bus_id"]),
                ("device", "nvidia%d" % gpu["index"]), ("modelName", gpu["name"]), ("Hostname", node)]
        own = values.get(str(gpu["index"]), {})
        mig = gpu["mig_mode"]["current"] == 1
        for name in (m[0] for m in GPU_METRICS):
            if name == "DCGM_FI_DEV_GPU_UTIL" and mig:
                continue
            series[name].append((base, own.get(name, 0)))
        if not mig:
            total_mb = gpu["memory_total_bytes"] // 2 ** 20
            used = own.get("DCGM_FI_DEV_FB_USED", 0)
            for name in (m[0] for m in DEVICE_METRICS):
                default = total_mb - used if name == "DCGM_FI_DEV_FB_FREE" else 0
                series[name].append((base, own.get(name, default)))
            continue
        for gi in gpu["gpu_instances"]:
            labels = base + [("GPU_I_PROFILE", gi["profile"]), ("GPU_I_ID", gi["id"])]
            slice_values = values.get("%d/%d" % (gpu["index"], gi["id"]), {})
            used = slice_values.get("DCGM_FI_DEV_FB_USED", 0)
            for name in (m[0] for m in DEVICE_METRICS):
                default = (gi["memory_mb"] or 0) - used if name == "DCGM_FI_DEV_FB_FREE" else 0
                series[name].append((labels, slice_values.get(name, default)))
    lines = []
    for name, kind, text in GPU_METRICS + DEVICE_METRICS:
        if not series[name]:
            continue
        lines += ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind)]
        lines += ["%s%s %s" % (name, _labels(labels), value) for labels, value in series[name]]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """One HTTP server on 127.0.0.1:<free port> for every node's exporter, each under its own path.

    One server thread, not one per node: a thread per node polling for shutdown twice a second kept the GIL busy
    at 1000 nodes, and the agents fell behind the cluster.
    """

    def __init__(self):
        server = self
        self.routes = {}  # "/<node>/<generation>/metrics" -> Exporter
        self.lock = threading.Lock()
        self.generation = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802  # http.server's hook name
                with server.lock:
                    exporter = server.routes.get(self.path.split("?")[0])
                if exporter is None:
                    self.send_error(404)
                    return
                body = exporter.scrape().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # pylint: disable=arguments-differ  # quiet
                return

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        # poll_interval: how often serve_forever looks for shutdown(); the agents stop it only at exit.
        self.thread = threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 30.0}, daemon=True,
                                       name="metrics")
        self.thread.start()

    def start(self, node, state_file, values_file):
        """A new exporter for `node` (a new exporter pod), under a path of its own: a new endpoint URL."""
        with self.lock:
            self.generation += 1
            path = "/%s/%d/metrics" % (node, self.generation)
            exporter = self.routes[path] = Exporter(self, path, node, state_file, values_file)
        return exporter

    def stop(self, exporter):
        with self.lock:
            self.routes.pop(exporter.path, None)


class Exporter:
    """One node's dcgm-exporter endpoint on the shared MetricsServer; started/stopped with its exporter pod."""

    def __init__(self, server, path, node, state_file, values_file):
        self.server, self.path = server, path
        self.node, self.state_file, self.values_file = node, state_file, values_file

    @property
    def url(self):
        return "http://127.0.0.1:%d%s" % (self.server.http.server_address[1], self.path)

    def scrape(self):
        try:
            values = json.loads(self.values_file.read_text())
        except (OSError, ValueError):
            values = {}
        return render(self.node, hoststate.summary(self.state_file), values)

    def stop(self):
        self.server.stop(self)
