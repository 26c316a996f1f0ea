# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Per-MIG-instance activity and memory from Prometheus (HTTP API) or straight from dcgm-exporter endpoints.

Metric and label names are dcgm-exporter's (NVIDIA/dcgm-exporter etc/default-counters.csv,
internal/pkg/collector/gpu_collector.go): series carry
``gpu``, ``modelName``, ``GPU_I_ID``/``GPU_I_PROFILE`` (MIG only), the host name and, when pod mapping is on,
``pod``/``namespace``. Samples come back as flat dicts for report.build_report.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import open_url

METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")
# The exporter names the node in `Hostname` (older docs: `hostname`); Prometheus relabelling often adds `node`.
HOST_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")
# Activity averaged over the window; memory as its peak, which is what a slice must hold.
WINDOW_FUNCTION = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "avg_over_time", "DCGM_FI_DEV_FB_USED": "max_over_time"}


class MetricsError(Exception):
    """The metrics source answered badly or not at all (message names the URL)."""


# How a module reaches a Prometheus that is not open to all: a bearer token (a Prometheus behind kube-rbac-proxy or
# an OAuth proxy, as on OpenShift), basic auth (Prometheus' own web config), a CA bundle for a private TLS CA.
PROMETHEUS_AUTH_SPEC = dict(
    prometheus_validate_certs=dict(type="bool", default=True),
    prometheus_ca_path=dict(type="path"),
    prometheus_token=dict(type="str", no_log=True),
    prometheus_username=dict(type="str"),
    prometheus_password=dict(type="str", no_log=True),
)
PROMETHEUS_AUTH_EXCLUSIVE = [("prometheus_token", "prometheus_username")]
PROMETHEUS_AUTH_TOGETHER = [("prometheus_username", "prometheus_password")]


def prometheus_auth(params):
    """open_url's keyword arguments from a module's PROMETHEUS_AUTH_SPEC options."""
    auth = {"validate_certs": params.get("prometheus_validate_certs", True)}
    if params.get("prometheus_ca_path"):
        auth["ca_path"] = params["prometheus_ca_path"]
    if params.get("prometheus_token"):
        auth["headers"] = {"Authorization": "Bearer %s" % params["prometheus_token"]}
    if params.get("prometheus_username"):
        auth.update(url_username=params["prometheus_username"], url_password=params.get("prometheus_password") or "",
                    force_basic_auth=True)
    return auth


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def sample_from_labels(metric, labels, value):
    """A flat sample, or None when the series names no node or GPU."""
    node = next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
    gpu = _int_or_none(labels.get("gpu"))
    if node is None or gpu is None:
        return None
    pod = labels.get("pod")
    if pod and labels.get("namespace"):
        pod = "%s/%s" % (labels["namespace"], pod)
    return {"node": node, "gpu": gpu, "gi_id": _int_or_none(labels.get("GPU_I_ID")),
            "profile": labels.get("GPU_I_PROFILE") or None, "model": labels.get("modelName"),
            "metric": metric, "value": float(value), "pod": pod or None}


def _instant_query(base_url, query, metric, timeout, auth):
    url = "%s/api/v1/query?%s" % (base_url.rstrip("/"), urlencode({"query": query}))
    try:
        response = open_url(url, timeout=timeout, **auth)
        body = json.loads(response.read())
    except Exception as exc:  # URLError, HTTPError, socket errors, bad JSON: all mean "no data from here"
        hint = ""
        if getattr(exc, "code", None) in (401, 403):
            hint = " (Prometheus refused the credentials: prometheus_token or prometheus_username/prometheus_password)"
        raise MetricsError("Prometheus query %s failed: %s%s" % (url, exc, hint))
    if not isinstance(body, dict):
        raise MetricsError("Prometheus query %s: the answer is not a JSON object" % url)
    if body.get("status") != "success":
        raise MetricsError("Prometheus query %s: %s" % (url, body.get("error") or body.get("status")))
    result = (body.get("data") or {}).get("result") if isinstance(body.get("data"), dict) else None
    if not isinstance(result, list):
        raise MetricsError("Prometheus query %s: the answer has no data.result list (an instant vector query "
                           "answers {status, data: {resultType, result: [...]}})" % url)
    samples = []
    for position, series in enumerate(result):
        try:
            sample = sample_from_labels(metric, dict(series["metric"]), series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise MetricsError("Prometheus query %s: series %d of the answer is not {metric: {...}, value: [time, "
                               "number]}: %s" % (url, position, exc))
        if sample:
            samples.append(sample)
    return samples


def query_prometheus(base_url, window_s, timeout=10, auth=None):
    """Samples of every MIG-relevant metric over the window, through /api/v1/query (``auth``: prometheus_auth())."""
    samples = []
    for metric in METRICS:
        query = "%s(%s[%ds])" % (WINDOW_FUNCTION[metric], metric, int(window_s))
        samples.extend(_instant_query(base_url, query, metric, timeout, auth or {}))
    return samples


# One series per whole GPU and per MIG GPU instance (dcgm-exporter watches the instances of a MIG GPU, the GPU
# itself otherwise): its labels are the layout. The last scrape only: a gone instance or exporter is marked stale
# by Prometheus at the next scrape, so an instant query no longer returns it.
LAYOUT_METRIC = "DCGM_FI_DEV_FB_USED"


def query_layout(base_url, timeout=10, auth=None):
    """Samples of the layout metric as last scraped, for every exporter Prometheus scrapes (one request)."""
    return _instant_query(base_url, LAYOUT_METRIC, LAYOUT_METRIC, timeout, auth or {})


_LINE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """(metric, labels, value) from the Prometheus text format (comments and other metrics skipped)."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match or match.group("name") not in METRICS:
            continue
        labels = dict((m.group("key"), m.group("value").replace('\\"', '"').replace("\\\\", "\\"))
                      for m in _LABEL.finditer(match.group("labels") or ""))
        yield match.group("name"), labels, match.group("value")


def scrape_endpoints(endpoints, timeout=10, errors=None):
    """Samples read now from dcgm-exporter endpoints ([{url, node?}]); ``node`` fills in a missing host label.

    An endpoint that fails raises MetricsError, or - when ``errors`` is a list - is recorded there and skipped,
    so one unreachable exporter does not hide the others' data.
    """
    samples = []
    for endpoint in endpoints:
        try:
            text = open_url(endpoint["url"], timeout=timeout).read().decode("utf-8")
        except Exception as exc:
            message = "dcgm-exporter endpoint %s (node %s) failed: %s" % (
                endpoint["url"], endpoint.get("node") or "?", exc)
            if errors is None:
                raise MetricsError(message)
            errors.append(message)
            continue
        for metric, labels, value in parse_exposition(text):
            if endpoint.get("node") and not any(labels.get(k) for k in HOST_LABELS):
                labels["Hostname"] = endpoint["node"]
            sample = sample_from_labels(metric, labels, value)
            if sample:
                samples.append(sample)
    return samples


# The GPU Operator's dcgm-exporter DaemonSet pods (NVIDIA/gpu-operator assets/state-dcgm-exporter/0800_daemonset.yaml).
EXPORTER_POD_SELECTOR = "app=nvidia-dcgm-exporter"
EXPORTER_DEFAULT_PORT = 9400  # dcgm-exporter's default listener (NVIDIA dcgm-exporter command reference)


def discover_endpoints(pods, port=None):
    """Endpoints of running dcgm-exporter pods (API dicts): pod IP, the container port named ``metrics``
    (else ``port`` or 9400), and the node the pod runs on."""
    endpoints = []
    for pod in pods:
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        if status.get("phase") != "Running" or not status.get("podIP") or not spec.get("nodeName"):
            continue
        named = [p.get("containerPort") for c in spec.get("containers") or [] for p in c.get("ports") or []
                 if p.get("name") == "metrics" and p.get("containerPort")]
        chosen = port or (named[0] if named else EXPORTER_DEFAULT_PORT)
        host = status["podIP"]
        if ":" in host:
            host = "[%s]" % host  # IPv6
        endpoints.append({"url": "http://%s:%d/metrics" % (host, chosen), "node": spec["nodeName"]})
    return sorted(endpoints, key=lambda e: e["node"])


def pivot(samples):
    """One sample per (node, gpu, gi_id, metric) is what build_report expects; keep the last seen."""
    seen = {}
    for sample in samples:
        seen[(sample["node"], sample["gpu"], sample["gi_id"], sample["metric"])] = sample
    return list(seen.values())
