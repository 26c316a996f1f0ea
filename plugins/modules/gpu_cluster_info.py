#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_cluster_info
short_description: Fleet report of GPU nodes, MIG layouts, slices, drift, stuck nodes and idle slices
version_added: 0.1.0
description:
  - Reads nodes and pods from the Kubernetes API and, when given, DCGM metrics from Prometheus or from
    dcgm-exporter endpoints. Never changes the cluster.
  - Per node, GPU and MIG slice it reports the GPU model, MIG strategy, C(nvidia.com/mig.config) and its state
    (and since when, from the node's managed fields), allocatable against what pods request, which pod holds
    which slice, and the recent C(DCGM_FI_PROF_GR_ENGINE_ACTIVE) and C(DCGM_FI_DEV_FB_USED) per MIG instance.
  - Findings, each naming the node and what to do - C(drift) (label, hardware, allocatable and GFD labels
    disagree), C(stuck) (state pending or rebooting beyond O(stuck_after), C(failed), operands left
    C(paused-for-mig-change)), C(idle) (a slice held by a pod whose engine activity stayed below O(idle_below)),
    C(unallocatable) (pods Pending for a resource no node offers), C(suggestion) (a layout per node from
    observed memory use and pending requests, checked with the planner), C(empty) (no GPU node at all).
  - A report of no GPU node is not a clean one - a wrong kubeconfig or context reads a cluster without GPUs just as
    well. It has an C(empty) finding of severity V(warning) and an Ansible warning, both naming the kubeconfig, the
    context (the kubeconfig's current one when O(context) is not set), the API server and the label selector.
  - The report follows a versioned JSON schema (returned in RV(schema)); see docs/report.md.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.prometheus
options:
  label_selector:
    description: Only nodes matching this Kubernetes label selector.
    type: str
  prometheus_url:
    description:
      - Base URL of a Prometheus server that scrapes dcgm-exporter (queried through its HTTP API).
    type: str
  dcgm_endpoints:
    description:
      - dcgm-exporter endpoints to read directly when there is no Prometheus (an instant reading, no window).
    type: list
    elements: dict
    suboptions:
      url:
        description: Metrics URL, for example C(http://10.0.0.5:9400/metrics).
        type: str
        required: true
      node:
        description: Node the endpoint belongs to, used when its series carry no host name label.
        type: str
  dcgm_discover:
    description:
      - Find the GPU Operator's dcgm-exporter pods (label C(app=nvidia-dcgm-exporter)) and read each one at its pod
        IP - for a controller that can reach pod IPs, such as an execution environment running in the cluster.
      - Used when neither O(prometheus_url) nor O(dcgm_endpoints) is given.
    type: bool
    default: false
  dcgm_port:
    description:
      - Port of discovered exporters; default the container port named C(metrics), else 9400.
    type: int
  window:
    description: Seconds of metrics history that activity is averaged (and memory use maximised) over.
    type: int
    default: 600
  idle_below:
    description: Engine activity (0..1) under which a slice held by a pod counts as idle.
    type: float
    default: 0.05
  stuck_after:
    description: Seconds in C(pending) or C(rebooting) after which a node counts as stuck.
    type: int
    default: 900
  formats:
    description:
      - Renderings to return besides the report itself.
      - C(html) is deprecated and will be removed in 1.0.0. The C(gpufleet.gpu_operator.gpu_report) role writes
        report.html from one Jinja2 template (its C(gpu_report_html_template)), which is the collection's report page.
    type: list
    elements: str
    choices: [table, html]
    default: [table]
  metrics_timeout:
    description: Seconds to wait for each metrics request.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Read-only; check mode returns the same report.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
notes:
  - C(DCGM_FI_DEV_GPU_UTIL) is not reported for MIG instances, so activity comes from the profiling field
    C(DCGM_FI_PROF_GR_ENGINE_ACTIVE), which must be enabled in the exporter's metrics list.
  - Without metrics the layout per GPU is what the node's C(mig.config) label means for its GPU model, and pods
    are matched to slices by the resources they request.
requirements:
  - kubernetes >= 30.0.0 (Python client)
"""

EXAMPLES = r"""
- name: Fleet report with Prometheus
  gpufleet.gpu_operator.gpu_cluster_info:
    kubeconfig: ~/.kube/config
    prometheus_url: http://prometheus.monitoring:9090
    formats: [table]
  register: fleet

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ fleet.table }}"

- name: Stop when a node is stuck
  ansible.builtin.assert:
    that: fleet.report.findings | selectattr('kind', 'equalto', 'stuck') | list | length == 0
"""

RETURN = r"""
report:
  description: The fleet report (schema version 1; every key is described in docs/report.md).
  returned: always
  type: dict
  contains:
    schema_version:
      description: Version of the report's layout; bumped on incompatible changes.
      returned: always
      type: int
      sample: 1
    generated_at:
      description:
        - When the report was built, ISO 8601 UTC. With RV(report.nodes[].state_seconds) and the C(seconds) of a stuck
          finding's details, the only part of the report that changes with time alone; the role
          C(gpufleet.gpu_operator.gpu_report) leaves report.json as it is when nothing else changed.
      returned: always
      type: str
    metrics_source:
      description: Where slice activity came from, V(none), V(prometheus) or V(dcgm-exporter).
      returned: always
      type: str
    options:
      description: The thresholds the report was built with (the defaults merged with the module's options).
      returned: always
      type: dict
      contains:
        idle_below:
          description: Engine activity (0..1) under which a held slice counts as idle.
          returned: always
          type: float
        stuck_after_s:
          description: Seconds after which a pending or rebooting MIG state counts as stuck.
          returned: always
          type: int
        window_s:
          description: Metrics window in seconds the activity is averaged over.
          returned: always
          type: int
    nodes:
      description: One entry per GPU node with its GPUs and their slices, by node name.
      returned: always
      type: list
      elements: dict
      contains:
        name:
          description: Node name.
          returned: always
          type: str
        model:
          description: GPU model name, or null when unknown.
          returned: always
          type: str
        product_label:
          description: The node's C(nvidia.com/gpu.product) label.
          returned: always
          type: str
        mig_capable:
          description: Whether the node's GPUs support MIG.
          returned: always
          type: bool
        mig_strategy:
          description: V(none), V(single) or V(mixed), as the node's labels show it.
          returned: always
          type: str
        mig_config:
          description: The node's C(nvidia.com/mig.config) label (the MIG layout asked for).
          returned: always
          type: str
        mig_config_state:
          description: The node's C(nvidia.com/mig.config.state) label (pending, rebooting, success, failed or null).
          returned: always
          type: str
        state_since:
          description: When the MIG state label last changed, ISO 8601, when known.
          returned: always
          type: str
        state_seconds:
          description: Seconds since the MIG state label last changed, when known.
          returned: always
          type: int
        deploy_paused:
          description: GPU Operator operands paused on the node (C(nvidia.com/gpu.deploy.*) labels set to paused).
          returned: always
          type: list
          elements: str
        ready:
          description: Whether the node is Ready.
          returned: always
          type: bool
        unschedulable:
          description: Whether the node is cordoned.
          returned: always
          type: bool
        allocatable:
          description: The node's allocatable GPU resources, a map of resource name to count.
          returned: always
          type: dict
          sample: {nvidia.com/mig-1g.18gb: 7}
        requested:
          description: GPU resources requested by the node's active pods, a map of resource name to count.
          returned: always
          type: dict
        findings:
          description: Number of findings about this node.
          returned: always
          type: int
        gpus:
          description: The node's GPUs by index.
          returned: always
          type: list
          elements: dict
          contains:
            index:
              description: GPU index.
              returned: always
              type: int
            model:
              description: GPU model name, or null.
              returned: always
              type: str
            mig_enabled:
              description: Whether the GPU has MIG on.
              returned: always
              type: bool
            layout_source:
              description: Where the slices come from, V(dcgm) (metrics) or V(label) (the node's labels and the plan).
              returned: always
              type: str
            engine_active:
              description: Whole-GPU engine activity (0..1) without MIG, when metrics have it; else null.
              returned: always
              type: float
            fb_used_mib:
              description: Whole-GPU framebuffer memory used in MiB without MIG, when metrics have it; else null.
              returned: always
              type: float
            slices:
              description: The GPU's MIG slices (one whole-GPU slice without MIG).
              returned: always
              type: list
              elements: dict
              contains:
                gi_id:
                  description: GPU instance id, when metrics have it; else null.
                  returned: always
                  type: int
                profile:
                  description: MIG profile name.
                  returned: always
                  type: str
                start:
                  description: First memory slice of the placement, when known.
                  returned: always
                  type: int
                size:
                  description: Memory slices of the placement, when known.
                  returned: always
                  type: int
                pod:
                  description: The pod (namespace/name) holding the slice, or null.
                  returned: always
                  type: str
                pod_mapping:
                  description: How the pod was matched to the slice, V(dcgm), V(by-request) or null.
                  returned: always
                  type: str
                state:
                  description: V(free), V(busy), V(idle) or V(allocated) (held, activity unknown).
                  returned: always
                  type: str
                engine_active:
                  description: Engine activity (0..1) over the window, or null.
                  returned: always
                  type: float
                fb_used_mib:
                  description: Framebuffer memory used in MiB, or null.
                  returned: always
                  type: float
    findings:
      description: Drift, stuck, idle, unallocatable, suggestion and empty findings, each with node and action.
      returned: always
      type: list
      elements: dict
      contains:
        kind:
          description: V(drift), V(stuck), V(idle), V(unallocatable), V(suggestion) or V(empty) (no GPU node).
          returned: always
          type: str
        severity:
          description: V(info), V(warning) or V(error).
          returned: always
          type: str
        node:
          description: The node concerned, or null for a cluster-wide finding.
          returned: always
          type: str
        gpu:
          description: The GPU index concerned, or null.
          returned: always
          type: int
        message:
          description: What was found.
          returned: always
          type: str
        action:
          description: What to do about it.
          returned: always
          type: str
        details:
          description:
            - The finding's data, whose keys depend on RV(report.findings[].kind) (for example C(pod),
              C(resource), C(count) for unallocatable; C(gpus), C(mig_parted_config), C(feasible) for a suggestion;
              C(kubeconfig), C(context), C(server), C(label_selector), C(nodes_listed) for empty).
          returned: always
          type: dict
    totals:
      description: Node and GPU counts and, per resource, allocatable, requested, idle-but-allocated and free.
      returned: always
      type: dict
      contains:
        nodes:
          description: Number of GPU nodes.
          returned: always
          type: int
        gpus:
          description: Number of GPUs.
          returned: always
          type: int
        per_resource:
          description:
            - A map of GPU resource name (C(nvidia.com/gpu), C(nvidia.com/mig-*)) to its counts, each a dict with
              C(allocatable), C(requested), C(idle_allocated) and C(free) (integers).
          returned: always
          type: dict
          sample: {nvidia.com/mig-1g.18gb: {allocatable: 7, requested: 3, idle_allocated: 1, free: 4}}
table:
  description: The report as a plain-text table.
  returned: when C(table) is in O(formats)
  type: str
html:
  description: The report as a self-contained HTML page with a picture of every GPU's slices (deprecated with
    C(formats=html)).
  returned: when C(html) is in O(formats)
  type: str
schema:
  description: JSON schema (draft 2020-12) of RV(report), a JSON Schema document.
  returned: always
  type: dict
metrics_error:
  description: Why metrics could not be read (the report is then built without them).
  returned: when the metrics source failed
  type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import access
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import metrics as dcgm_metrics
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import render as report_render


def read_metrics(module, pods):
    """Samples, their source, and why metrics could not be read (the report is then built without them)."""
    params = module.params
    samples, source, metrics_error, scrape_errors = [], "none", None, []
    try:
        if params["prometheus_url"]:
            samples = dcgm_metrics.query_prometheus(params["prometheus_url"], params["window"],
                                                    timeout=params["metrics_timeout"],
                                                    auth=dcgm_metrics.prometheus_auth(params))
            source = "prometheus"
        elif params["dcgm_endpoints"]:
            samples = dcgm_metrics.scrape_endpoints(params["dcgm_endpoints"], timeout=params["metrics_timeout"],
                                                    errors=scrape_errors)
            source = "dcgm-exporter" if samples else "none"
        elif params["dcgm_discover"]:
            exporters = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == "nvidia-dcgm-exporter"]
            endpoints = dcgm_metrics.discover_endpoints(exporters, port=params["dcgm_port"])
            if not endpoints:
                raise dcgm_metrics.MetricsError("no running dcgm-exporter pods (label %s) found"
                                                % dcgm_metrics.EXPORTER_POD_SELECTOR)
            samples = dcgm_metrics.scrape_endpoints(endpoints, timeout=params["metrics_timeout"], errors=scrape_errors)
            source = "dcgm-exporter" if samples else "none"
    except dcgm_metrics.MetricsError as exc:
        metrics_error = str(exc)
        module.warn("report built without metrics: %s" % exc)
    if scrape_errors:
        metrics_error = "; ".join(scrape_errors)
        module.warn("%s of the dcgm-exporter endpoints failed, their nodes have no metrics: %s"
                    % (len(scrape_errors), metrics_error))
    return samples, source, metrics_error


def connection(module):
    """Where the nodes are read: the kubeconfig (a path, or "(mapping)"), the context (the kubeconfig's current one
    when none is given), the API server and the label selector."""
    params = module.params
    names = access.connection_used(params)
    names["server"] = module.server
    names["label_selector"] = params["label_selector"] or None
    return names


def fleet_report(module):
    params = module.params
    ops = module.ops()
    nodes = ops.list_nodes(label_selector=params["label_selector"] or None).get("items") or []
    pods = ops.list_pods().get("items") or []
    samples, source, metrics_error = read_metrics(module, pods)
    built = report.build_report(
        nodes, pods, metrics=dcgm_metrics.pivot(samples), metrics_source=source,
        options={"idle_below": params["idle_below"], "stuck_after_s": params["stuck_after"],
                 "window_s": params["window"]}, connection=connection(module))
    for finding in built["findings"]:
        if finding["kind"] == "empty":
            module.warn("%s. %s." % (finding["message"], finding["action"][0].upper() + finding["action"][1:]))
    result = dict(changed=False, report=built, schema=report.REPORT_SCHEMA)
    if "table" in params["formats"]:
        result["table"] = report_render.render_table(built)
    if "html" in params["formats"]:
        module.deprecate("formats 'html' of gpufleet.gpu_operator.gpu_cluster_info: the report page is the "
                         "gpufleet.gpu_operator.gpu_report role's template (gpu_report_html_template)",
                         version="1.0.0", collection_name="gpufleet.gpu_operator")
        result["html"] = report_render.render_html(built)
    if metrics_error:
        result["metrics_error"] = metrics_error
    return result


def main():
    module = KubeModule(dict(
        label_selector=dict(type="str"),
        prometheus_url=dict(type="str"),
        dcgm_endpoints=dict(type="list", elements="dict", options=dict(
            url=dict(type="str", required=True), node=dict(type="str"))),
        dcgm_discover=dict(type="bool", default=False),
        dcgm_port=dict(type="int"),
        window=dict(type="int", default=600),
        idle_below=dict(type="float", default=0.05),
        stuck_after=dict(type="int", default=900),
        formats=dict(type="list", elements="str", choices=["table", "html"], default=["table"]),
        metrics_timeout=dict(type="int", default=10),
        **dcgm_metrics.PROMETHEUS_AUTH_SPEC
    ), numbers={"metrics_timeout": {"above": 0}, "dcgm_port": {"minimum": 1, "maximum": 65535}},
        supports_check_mode=True,
        mutually_exclusive=[("prometheus_url", "dcgm_endpoints")] + dcgm_metrics.PROMETHEUS_AUTH_EXCLUSIVE,
        required_together=dcgm_metrics.PROMETHEUS_AUTH_TOGETHER)
    params = module.params
    if params["window"] <= 0 or params["stuck_after"] < 0 or not 0 <= params["idle_below"] <= 1:
        module.fail_json(msg="window must be > 0, stuck_after >= 0 and idle_below within 0..1 (got %s, %s, %s)"
                         % (params["window"], params["stuck_after"], params["idle_below"]))
    module.run(fleet_report)


if __name__ == "__main__":
    main()
