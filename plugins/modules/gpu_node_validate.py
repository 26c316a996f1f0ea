#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_validate
short_description: Check GPU nodes' operands, GFD labels and advertised resources against each other and the hardware
version_added: 0.1.0
description:
  - For each node, checks that the GPU Operator's enabled operands run there, that the GPU Feature
    Discovery labels (C(nvidia.com/gpu.product), C(gpu.memory), C(gpu.count), C(mig.strategy), per-profile
    C(nvidia.com/mig-<profile>.count) under the mixed strategy) agree with the device plugin's allocatable
    and with the hardware, either O(nodes[].hardware) as given (for example from C(gpu_info) on each host) or, with
    O(hardware_source=dcgm), the GPU Operator's dcgm-exporter series read from Prometheus in one query for the fleet.
  - Returns the problems per node and the GPU resources a smoke test should request there.
  - Read-only; reports problems without failing unless O(fail_on_problems=true).
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.prometheus
  - gpufleet.gpu_operator.attributes.no_diff
options:
  nodes:
    description: Nodes to check.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Node name.
        type: str
        required: true
      hardware:
        description:
          - "The node's GPUs as the hardware reports them: the C(gpus) list of M(gpufleet.gpu_operator.gpu_info)
            (name, memory_mb, mig.current, instances), or per GPU C(name), C(memory_mib), C(mig_enabled), C(mig_devices)."
          - Omit when the host cannot be reached; then only labels and allocatable are compared.
        type: dict
      hardware_error:
        description: Why the hardware could not be read on a reachable host; reported as a problem of the node.
        type: str
  hardware_source:
    description:
      - Where the hardware facts come from.
      - C(given) uses O(nodes[].hardware) and O(nodes[].hardware_error) as passed.
      - C(dcgm) reads every node's GPUs from the dcgm-exporter series in Prometheus at O(prometheus_url), one
        request for all nodes instead of a module run per host. It replaces O(nodes[].hardware); a node without
        series gets a problem. The series give each GPU's model, the MIG mode and the GPU instances' profiles,
        not the memory size or compute instances smaller than their GPU instance (not compared), and a GPU in MIG
        mode without instances reads as a GPU without MIG. They are as fresh as the last scrape.
    type: str
    choices: [given, dcgm]
    default: given
  prometheus_url:
    description: Base URL of the Prometheus that scrapes the dcgm-exporter pods (for example V(http://prometheus:9090)).
    type: str
  namespace:
    description: Namespace of the operator's operand pods.
    type: str
    default: gpu-operator
  fail_on_problems:
    description: Fail the task when any node has a problem.
    type: bool
    default: false
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
# In a play on the GPU hosts. Kubernetes node names are the hosts' gpu_node_name (the gpu_node_names and
# hardware_by_node filters fall back to the host name), not the inventory host names.
- name: Read each host's GPUs
  gpufleet.gpu_operator.gpu_info:
    processes: false
  register: gpu_read

- name: Check every GPU node against the GPUs read on its host
  gpufleet.gpu_operator.gpu_node_validate:
    nodes: >-
      {{ ansible_play_hosts | gpufleet.gpu_operator.hardware_by_node(hostvars, 'gpu_read')
         | dict2items(key_name='name', value_name='hardware') }}
  delegate_to: localhost
  run_once: true
  register: gpu_validate_nodes

- name: Check every GPU node against the hardware as dcgm-exporter reports it
  gpufleet.gpu_operator.gpu_node_validate:
    nodes: >-
      {% set found = namespace(nodes=[]) %}{% for node in groups['gpu_nodes'] | gpufleet.gpu_operator.gpu_node_names(hostvars) %}{%
      set found.nodes = found.nodes + [{'name': node}] %}{% endfor %}{{ found.nodes }}
    hardware_source: dcgm
    prometheus_url: http://prometheus.monitoring:9090
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
strategy:
  description: The MIG strategy from ClusterPolicy C(cluster-policy) (C(none) when unset or missing).
  returned: always
  type: str
nodes:
  description:
    - A map of node name (each node of O(nodes)) to its result, a dict with C(problems) (list of strings),
      C(smoke_resources) (the GPU resources to smoke-test, list of strings), C(product) (GPU model or null),
      C(summary) (the node's GPU facts from its labels, as in M(gpufleet.gpu_operator.gpu_cluster_info); empty
      for a node not found), C(hardware_checked) (bool, whether labels were compared with hardware facts) and
      C(hardware_source) (V(given), V(dcgm), or null when not compared) and C(driver) (the node's driver pod as
      M(gpufleet.gpu_operator.gpu_operator_status) returns it in C(drivers) - C(pod), C(nvidia_driver), C(source),
      C(image), C(state) - or null when the operator runs no driver there).
    - When ClusterPolicy leaves the driver to NVIDIADriver resources, the driver operand is healthy only when the
      NVIDIADriver NVIDIA's controller routed the node to (label C(nvidia.com/gpu-operator.driver.owner)) has a
      ready pod on it.
  returned: always
  type: dict
  sample: {"gpu-a": {"problems": [], "smoke_resources": ["nvidia.com/mig-1g.18gb"], "product": "NVIDIA H200",
           "summary": {"node_name": "gpu-a", "mig_strategy": "mixed"}, "hardware_checked": true,
           "hardware_source": "given", "driver": {"pod": "nvidia-gpu-driver-ubuntu22.04-6b8f5c7d9-x2x4q",
           "nvidia_driver": "hopper", "source": "NVIDIADriver hopper",
           "image": "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04", "state": "ready"}}}
smoke_targets:
  description: Input for M(gpufleet.gpu_operator.gpu_smoke_test) O(gpufleet.gpu_operator.gpu_smoke_test#module:targets), one per node found.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      returned: always
      type: str
    resources:
      description: GPU resources to smoke-test on the node.
      returned: always
      type: list
      elements: str
    product:
      description: GPU model name from the node's labels, or null.
      returned: always
      type: str
problems:
  description: Every problem, one line each, prefixed with the node name.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import RESOURCE_GPU
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate import dcgm
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import metrics
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    list_operand_pods,
    read_cluster_policy,
    read_driver_owners,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import (
    driver_daemonset_owners,
    enabled_operands,
    node_report,
    uses_nvidia_drivers,
)


# Up to this many nodes are read one GET each; more in one list of every node (1000 GETs took 35 s at 1000 nodes).
NODE_GETS_MAX = 20


def read_nodes(ops, names):
    """{name: node} of the named nodes that exist."""
    if len(names) > NODE_GETS_MAX:
        wanted = set(names)
        return dict((node["metadata"]["name"], node) for node in ops.list_nodes(managed_fields=False).get("items") or []
                    if node["metadata"]["name"] in wanted)
    nodes = {}
    for name in names:
        try:
            nodes[name] = ops.get_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return nodes


def hardware_entries(module):
    """The nodes option with each node's hardware from the chosen source (dcgm: one Prometheus query)."""
    params = module.params
    if params["hardware_source"] != "dcgm":
        return params["nodes"]
    try:
        by_node = dcgm.hardware_by_node(metrics.query_layout(params["prometheus_url"], auth=metrics.prometheus_auth(params)))
    except metrics.MetricsError as exc:
        module.fail_json(msg="hardware_source=dcgm: %s; nothing was checked" % exc)
    source = "Prometheus %s" % params["prometheus_url"]
    return [dict(entry, hardware=by_node.get(entry["name"]),
                 hardware_error=None if entry["name"] in by_node else dcgm.missing_reason(source))
            for entry in params["nodes"]]


def validate(module):
    entries = hardware_entries(module)
    source = module.params["hardware_source"]
    api_client = module.api_client
    ops = module.ops()
    policy = read_cluster_policy(api_client)
    pods = list_operand_pods(api_client, module.params["namespace"])
    nodes = read_nodes(ops, [entry["name"] for entry in entries])
    strategy = (((policy or {}).get("spec") or {}).get("mig") or {}).get("strategy") or "none"
    operands = enabled_operands(policy) if policy else []
    daemonsets, _nvidia_drivers = read_driver_owners(api_client, module.params["namespace"], policy)
    crd_mode, owners = uses_nvidia_drivers(policy), (driver_daemonset_owners(daemonsets) if daemonsets is not None else None)
    drivers = {}
    results, problems = {}, []
    for entry in entries:
        name = entry["name"]
        node = nodes.get(name)
        if node is None:
            results[name] = {"problems": ["node not found in the cluster"], "smoke_resources": [], "product": None, "summary": {},
                             "hardware_checked": False, "hardware_source": None, "driver": None}
        else:
            checked = validate_node(node, strategy, entry.get("hardware"),
                                    node_report(node, operands, pods, crd_mode, owners, drivers))
            if policy is None:
                checked["problems"].insert(0, "ClusterPolicy cluster-policy not found")
            if entry.get("hardware_error"):
                where = "from dcgm-exporter" if source == "dcgm" else "on the host"
                checked["problems"].append("hardware not readable %s: %s" % (where, entry["hardware_error"]))
            results[name] = {"problems": checked["problems"], "smoke_resources": checked["smoke_resources"] or [RESOURCE_GPU],
                             "product": checked["summary"]["model"], "summary": checked["summary"],
                             "hardware_checked": entry.get("hardware") is not None,
                             "hardware_source": source if entry.get("hardware") is not None else None,
                             "driver": drivers.get(name)}
        problems.extend("%s: %s" % (name, problem) for problem in results[name]["problems"])
    smoke_targets = [{"node": name, "resources": entry["smoke_resources"], "product": entry["product"]}
                     for name, entry in sorted(results.items()) if name in nodes]
    outcome = dict(strategy=strategy, nodes=results, problems=problems, smoke_targets=smoke_targets)
    if problems and module.params["fail_on_problems"]:
        module.fail_json(msg="GPU node validation failed: " + "; ".join(problems), **outcome)
    return dict(changed=False, **outcome)


def main():
    module = KubeModule(dict(
        nodes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            hardware=dict(type="dict"),
            hardware_error=dict(type="str"),
        )),
        hardware_source=dict(type="str", choices=["given", "dcgm"], default="given"),
        prometheus_url=dict(type="str"),
        namespace=dict(type="str", default="gpu-operator"),
        fail_on_problems=dict(type="bool", default=False),
        **metrics.PROMETHEUS_AUTH_SPEC
    ), names={"namespace": "namespace", "nodes[].name": "name"},
        required_if=[("hardware_source", "dcgm", ("prometheus_url",))],
        mutually_exclusive=metrics.PROMETHEUS_AUTH_EXCLUSIVE, required_together=metrics.PROMETHEUS_AUTH_TOGETHER,
        supports_check_mode=True)
    module.run(validate, node=[entry["name"] for entry in module.params["nodes"]])


if __name__ == "__main__":
    main()
