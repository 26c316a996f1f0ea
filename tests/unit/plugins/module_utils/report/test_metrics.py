"""DCGM exporter metrics: exposition parsing, endpoints from exporter pods, scrape errors."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import metrics as dcgm_metrics

from .test_build import H100


def test_exposition_parsing_and_sample_labels():
    text = "\n".join([
        "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio",
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb+me",'
        'GPU_I_ID="9",Hostname="n",pod="p",namespace="ml"} 0.25',
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n"} 1234 1700000000000',
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",Hostname="n"} 1980',
        'DCGM_FI_DEV_FB_USED{gpu="0"} 5',
    ])
    parsed = list(dcgm_metrics.parse_exposition(text))
    assert [p[0] for p in parsed] == ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED"]
    first = dcgm_metrics.sample_from_labels(*parsed[0])
    assert first == {"node": "n", "gpu": 1, "gi_id": 9, "profile": "1g.10gb+me", "model": H100,
                     "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "value": 0.25, "pod": "ml/p"}
    assert dcgm_metrics.sample_from_labels(*parsed[2]) is None, "a series without a host cannot be placed"


def test_exporter_pods_become_endpoints():
    def exporter(name, node_name, ip, phase="Running", ports=None):
        return {"metadata": {"name": name}, "spec": {"nodeName": node_name, "containers": [{"ports": ports or []}]},
                "status": {"phase": phase, "podIP": ip}}
    pods = [exporter("a", "n2", "10.0.0.2", ports=[{"name": "metrics", "containerPort": 9500}]),
            exporter("b", "n1", "fd00::1"), exporter("c", "n3", "10.0.0.3", phase="Pending"),
            exporter("d", "n4", None)]
    assert dcgm_metrics.discover_endpoints(pods) == [
        {"url": "http://[fd00::1]:9400/metrics", "node": "n1"}, {"url": "http://10.0.0.2:9500/metrics", "node": "n2"}]
    assert dcgm_metrics.discover_endpoints(pods[:1], port=9401)[0]["url"] == "http://10.0.0.2:9401/metrics"


def test_one_failing_endpoint_does_not_hide_the_others():
    errors = []
    assert dcgm_metrics.scrape_endpoints([{"url": "http://127.0.0.1:9/metrics", "node": "n"}], timeout=2,
                                         errors=errors) == []
    assert len(errors) == 1 and "127.0.0.1:9" in errors[0] and "node n" in errors[0]
    with pytest.raises(dcgm_metrics.MetricsError):
        dcgm_metrics.scrape_endpoints([{"url": "http://127.0.0.1:9/metrics"}], timeout=2)


@pytest.mark.parametrize("answer, says", [
    ({"status": "success"}, "no data.result list"),
    ({"status": "success", "data": {"resultType": "vector"}}, "no data.result list"),
    ({"status": "success", "data": {"result": [{"metric": {"gpu": "0", "Hostname": "n"}}]}}, "series 0"),
    ({"status": "success", "data": {"result": [{"metric": {"gpu": "0", "Hostname": "n"}, "value": [1, "x"]}]}},
     "series 0"),
    ([1, 2], "not a JSON object"),
    ({"status": "error", "error": "bad query"}, "bad query"),
])
def test_a_malformed_prometheus_answer_is_a_metrics_error_naming_the_url(answer, says):
    import http.server
    import json
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    try:
        with pytest.raises(dcgm_metrics.MetricsError) as raised:
            dcgm_metrics.query_layout(url, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert url in str(raised.value) and says in str(raised.value)
