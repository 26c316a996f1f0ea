"""Simulated dcgm-exporter: one HTTP endpoint per simulated GPU node on 127.0.0.1, Prometheus text format.

Metric and label names are dcgm-exporter's (reference nvidia-gpu-operator-and-mig.md §8): per MIG instance a
series with gpu, UUID, pci_bus_id, device, modelName, GPU_I_PROFILE, GPU_I_ID, Hostname and, when a pod holds
the instance, pod/namespace/container. A whole GPU (MIG off) has no GPU_I_* labels.

The layout of each node comes from its simulated NVML state file (tests/testbed/gpusim hoststate.summary, the
same hardware the node agents configure) or is given explicitly; tests set activity and memory per instance
with ``set_load``. Values are read at every scrape, so a change shows up at the next Prometheus scrape.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "engine"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib"),
)
# DCGM_FI_DEV_GPU_UTIL is absent for MIG instances (§8): served for whole GPUs only, as the exporter does.
WHOLE_GPU_ONLY = ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "gpu_util")


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class SimNode(object):
    """One node's exporter: its hardware source and the per-instance load the test sets."""

    def __init__(self, name, state_path=None, gpus=None):
        self.name = name
        self.state_path = state_path
        self.gpus = gpus  # [{"index", "model", "instances": [{"gi_id", "profile"}]}] when no state file
        self.load = {}  # (gpu, gi_id or None) -> {"engine", "fb_used_mib", "pod", "namespace", "gpu_util"}
        self.lock = threading.Lock()
        self.server = None

    def hardware(self):
        if self.state_path:
            from tests.testbed.gpusim import hoststate

            summary = hoststate.summary(self.state_path)
            return [{"index": g["index"], "model": g["name"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"],
                     "mig": bool(g["mig_mode"]["current"]),
                     "instances": [{"gi_id": gi["id"], "profile": gi["profile"]} for gi in g["gpu_instances"]]}
                    for g in summary["gpus"]]
        return [{"index": g["index"], "model": g["model"], "uuid": "GPU-sim-%s-%d" % (self.name, g["index"]),
                 "pci_bus_id": "00000000:%02X:00.0" % (0x10 + g["index"]), "mig": bool(g.get("instances")),
                 "instances": list(g.get("instances") or [])} for g in self.gpus or []]

    def exposition(self):
        lines = []
        hardware = self.hardware()
        with self.lock:
            load = dict(self.load)
        for metric, kind, help_text, key in METRICS + (WHOLE_GPU_ONLY,):
            lines.append("# HELP %s %s" % (metric, help_text))
            lines.append("# TYPE %s %s" % (metric, kind))
            for gpu in hardware:
                base = [("gpu", gpu["index"]), ("UUID", gpu["uuid"]), ("pci_bus_id", gpu["pci_bus_id"]),
                        ("device", "nvidia%d" % gpu["index"]), ("modelName", gpu["model"])]
                # Per MIG instance; a GPU without instances (MIG off, or on but empty) as the whole device.
                targets = [(inst["gi_id"], inst["profile"]) for inst in gpu["instances"] if gpu["mig"]] or [
                    (None, None)]
                for gi_id, profile in targets:
                    if metric == WHOLE_GPU_ONLY[0] and gi_id is not None:
                        continue
                    values = load.get((gpu["index"], gi_id), {})
                    labels = list(base)
                    if gi_id is not None:
                        labels += [("GPU_I_PROFILE", profile), ("GPU_I_ID", gi_id)]
                    labels.append(("Hostname", self.name))
                    if values.get("pod"):
                        labels += [("pod", values["pod"]), ("namespace", values.get("namespace", "default")),
                                   ("container", values.get("container", "main"))]
                    text = ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels)
                    lines.append("%s{%s} %s" % (metric, text, float(values.get(key, 0.0))))
        return "\n".join(lines) + "\n"


class DcgmSimulator(object):
    """All simulated exporters of a test session; each node gets its own port on 127.0.0.1."""

    def __init__(self):
        self.nodes = {}

    def add_node(self, name, state_path=None, gpus=None):
        node = SimNode(name, state_path=state_path, gpus=gpus)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = node.exposition().encode("utf-8")
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (its scrape timeout) or stopped: nothing to answer

            def log_message(self, *args):
                pass

        node.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        node.server.daemon_threads = True
        threading.Thread(target=node.server.serve_forever, name="dcgm-sim-" + name, daemon=True).start()
        self.nodes[name] = node
        return node

    def url(self, name):
        return "http://127.0.0.1:%d/metrics" % self.nodes[name].server.server_address[1]

    def target(self, name):
        return "127.0.0.1:%d" % self.nodes[name].server.server_address[1]

    def set_load(self, name, gpu, gi_id=None, engine=None, fb_used_mib=None, pod=None, namespace=None,
                 gpu_util=None):
        node = self.nodes[name]
        with node.lock:
            values = node.load.setdefault((gpu, gi_id), {})
            for key, value in (("engine", engine), ("fb_used_mib", fb_used_mib), ("pod", pod),
                               ("namespace", namespace), ("gpu_util", gpu_util)):
                if value is not None:
                    values[key] = value

    def remove_node(self, name):
        node = self.nodes.pop(name, None)
        if node and node.server:
            node.server.shutdown()
            node.server.server_close()

    def stop(self):
        # shutdown() waits for the server's next poll (0.5 s): all at once, not 0.5 s per node (1000 nodes: 8 min).
        servers = [node.server for node in self.nodes.values() if node.server]
        self.nodes.clear()
        stopping = [threading.Thread(target=server.shutdown, daemon=True) for server in servers]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        for server in servers:
            server.server_close()
