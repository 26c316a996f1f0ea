#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_operator_status
short_description: Report, or wait for, the readiness of the NVIDIA GPU Operator
version_added: 0.1.0
description:
  - Reads ClusterPolicy C(cluster-policy) and the operand pods in the operator namespace and reports,
    per GPU node, whether each enabled operand (driver, container-toolkit, device-plugin,
    gpu-feature-discovery, dcgm-exporter, operator-validator, mig-manager) is Running or Completed.
  - With O(wait=true) it polls until everything is ready or O(timeout) passes; on timeout it fails with a
    message naming each node and operand that is not ready.
  - When ClusterPolicy leaves the driver to NVIDIADriver resources (chart value C(driver.nvidiaDriverCRD.enabled),
    C(spec.driver.useNvidiaDriverCRD)), a node's driver is the pod of the NVIDIADriver NVIDIA's controller routed the
    node to (node label C(nvidia.com/gpu-operator.driver.owner)), found through the DaemonSets that NVIDIADriver
    controls, and every NVIDIADriver must be in state C(ready); RV(drivers) says which NVIDIADriver each node's
    driver pod comes from.
  - Read-only; never changes the cluster.
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes.no_diff
options:
  namespace:
    description: Namespace the operator and its operands run in.
    type: str
    default: gpu-operator
  nodes:
    description:
      - Names of the nodes that must be ready GPU nodes (for example the inventory's C(gpu_nodes)).
      - When omitted, every GPU node is checked - labelled C(nvidia.com/gpu.present=true) or by GPU Feature
        Discovery (C(nvidia.com/gpu.product)), or advertising a GPU resource.
    type: list
    elements: str
  wait:
    description: Wait until the operator is ready instead of reporting once.
    type: bool
    default: false
  timeout:
    description: Seconds to wait when O(wait=true).
    type: int
    default: 600
  poll_interval:
    description: Seconds between two readings while waiting.
    type: int
    default: 3
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Wait up to ten minutes for the GPU Operator
  gpufleet.gpu_operator.gpu_operator_status:
    kubeconfig: ~/.kube/config
    nodes: "{{ groups['gpu_nodes'] | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
    wait: true
    timeout: 600
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
ready:
  description: Whether the ClusterPolicy is ready and every expected operand pod is Running or Completed.
  returned: always
  type: bool
state:
  description: ClusterPolicy C(status.state), or why it could not be read.
  returned: always
  type: str
  sample: ready
operands:
  description: Operands the ClusterPolicy enables.
  returned: always
  type: list
  elements: str
  sample: [driver, container-toolkit, device-plugin, gpu-feature-discovery, dcgm-exporter, operator-validator, mig-manager]
nodes:
  description:
    - A map of node name to a map of operand name to its status on that node (V(ready) or the reason it is not).
    - A node that was not found, or has no GPU, maps C(node) to the reason instead.
  returned: always
  type: dict
  sample: {"gpu-a": {"device-plugin": "ready", "mig-manager": "paused-for-mig-change"}}
drivers:
  description:
    - A map of node name to the node's driver pod (null when it has none), for each node checked whose driver the
      operator manages.
  returned: always
  type: dict
  sample: {"gpu-a": {"pod": "nvidia-gpu-driver-ubuntu22.04-6b8f5c7d9-x2x4q", "nvidia_driver": "hopper",
                     "source": "NVIDIADriver hopper", "image": "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04",
                     "state": "ready"}}
  contains:
    pod:
      description: The driver pod's name.
      returned: always
      type: str
    nvidia_driver:
      description: The NVIDIADriver whose DaemonSet made the pod; null for ClusterPolicy's C(nvidia-driver-daemonset).
      returned: always
      type: str
    source:
      description: C(NVIDIADriver <name>), C(ClusterPolicy), or the DaemonSet that made the pod.
      returned: always
      type: str
    image:
      description: The driver container's image (C(<repository>/<image>:<version>-<os>)).
      returned: always
      type: str
    state:
      description: V(ready), or why the pod is not.
      returned: always
      type: str
not_ready:
  description:
    - One line per thing that is not ready, naming the node and operand, or the NVIDIADriver and its error.
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds spent, including waiting.
  returned: always
  type: float
"""

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    list_operand_pods,
    read_cluster_policy,
    read_driver_owners,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess


def read_state(api_client, namespace):
    policy = read_cluster_policy(api_client)
    nodes = KubeOps(api_client).list_nodes().get("items") or []
    daemonsets, nvidia_drivers = read_driver_owners(api_client, namespace, policy)
    return policy, nodes, list_operand_pods(api_client, namespace), daemonsets, nvidia_drivers


def status(module):
    started = time.monotonic()
    deadline = started + max(module.params["timeout"], 0)
    while True:
        policy, nodes, pods, daemonsets, nvidia_drivers = read_state(module.api_client, module.params["namespace"])
        result = assess(policy, nodes, pods, module.params["nodes"], daemonsets, nvidia_drivers)
        if result["ready"] or not module.params["wait"] or time.monotonic() >= deadline:
            break
        time.sleep(max(1, module.params["poll_interval"]))
    result["elapsed"] = round(time.monotonic() - started, 1)
    if module.params["wait"] and not result["ready"]:
        module.fail_json(
            msg="GPU Operator not ready after %ss: %s" % (module.params["timeout"], "; ".join(result["not_ready"])),
            changed=False, **result)
    return dict(changed=False, **result)


def main():
    module = KubeModule(dict(
        namespace=dict(type="str", default="gpu-operator"),
        nodes=dict(type="list", elements="str"),
        wait=dict(type="bool", default=False),
        timeout=dict(type="int", default=600),
        poll_interval=dict(type="int", default=3),
    ), names={"namespace": "namespace", "nodes[]": "name"}, numbers={"timeout": {"minimum": 0}, "poll_interval": {"above": 0}},
        supports_check_mode=True)
    module.run(status)


if __name__ == "__main__":
    main()
