#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_operator_driver_pools
short_description: Check driver node pools against the cluster and plan their node labels and NVIDIADriver deletions
version_added: 0.2.0
description:
  - Read-only. Takes the driver pools M(gpufleet.gpu_operator.gpu_operator_values) rendered (one NVIDIADriver custom
    resource of GPU Operator v26.7.0 per pool), reads the cluster's nodes and NVIDIADrivers, and says what the
    M(gpufleet.gpu_operator.gpu_operator) role changes - the node label C(gpufleet.io/driver-pool) to set on the nodes
    of each pool given as an inventory group and to remove from every other node, and the NVIDIADrivers the role
    created (label C(app.kubernetes.io/managed-by=gpufleet.gpu_operator)) that no pool names any more - or fails,
    naming the pool and node, when the pools cannot be applied.
  - Refused, with every reason at once and nothing changed - a node that two NVIDIADrivers would select once the labels
    are set (two pools, or a pool and an NVIDIADriver the role did not create; NVIDIA's controller then reconciles no
    NVIDIADriver at all, see its C(internal/validator/validator.go)), two C(spec.default) NVIDIADrivers, a pool named
    like an NVIDIADriver the role did not create, a pool whose C(driver_type) differs from its existing NVIDIADriver's
    (immutable in NVIDIA's CRD), a node of a group pool that is not in the cluster, and a node of O(gpu_nodes) that no
    NVIDIADriver would select (it would get no driver).
  - A C(node_selector) pool that matches no node today is a warning (a node group scaled to zero), not a refusal.
  - With no pools, plans only the removal of the role's node labels and NVIDIADrivers (the driver goes back to
    ClusterPolicy).
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes.no_diff
options:
  pools:
    description:
      - The pools as M(gpufleet.gpu_operator.gpu_operator_values) returns them in C(nvidia_drivers) (C(name),
        C(nodes_group), C(nodes), C(node_selector), C(manifest)).
    type: list
    elements: dict
    default: []
  gpu_nodes:
    description:
      - Names of the nodes that must get a driver (the inventory's GPU nodes); each must be selected by a pool or by
        an NVIDIADriver the role did not create. Names that are not nodes of the cluster are left to
        M(gpufleet.gpu_operator.gpu_operator_status).
    type: list
    elements: str
    default: []
  release_name:
    description:
      - The chart's Helm release. Its own C(default) NVIDIADriver (chart value C(driver.nvidiaDriverCRD.deployDefaultCR))
        goes away when the role installs the chart with C(deployDefaultCR=false), so it is not counted.
    type: str
    default: gpu-operator
  release_namespace:
    description: Namespace of the Helm release.
    type: str
    default: gpu-operator
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Render one NVIDIADriver per driver pool
  gpufleet.gpu_operator.gpu_operator_values:
    nvidia_drivers:
      - name: fleet
        version: "580.105.08"
        nodes_group: gpu_nodes
    driver_group_nodes:
      gpu_nodes: "{{ groups['gpu_nodes'] | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
  delegate_to: localhost
  run_once: true
  register: gpu_operator_rendered

- name: Check the driver pools against the cluster, before anything changes
  gpufleet.gpu_operator.gpu_operator_driver_pools:
    pools: "{{ gpu_operator_rendered.nvidia_drivers }}"
    gpu_nodes: "{{ groups['gpu_nodes'] | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
  delegate_to: localhost
  run_once: true
  register: gpu_operator_driver_plan
"""

RETURN = r"""
label_changes:
  description:
    - The C(gpufleet.io/driver-pool) node labels to change, removals first - C(node), C(from) (the value now, or
      null) and C(to) (the pool, or null to remove the label).
  returned: success
  type: list
  elements: dict
  sample: [{"node": "gpu-9", "from": "ampere", "to": null}, {"node": "gpu-1", "from": null, "to": "hopper"}]
  contains:
    node:
      description: The node's name.
      returned: always
      type: str
    from:
      description: The label's value now, or null when the node has none.
      returned: always
      type: str
    to:
      description: The pool whose NVIDIADriver selects the node, or null to remove the label.
      returned: always
      type: str
delete:
  description: NVIDIADrivers the role created that no pool names any more.
  returned: success
  type: list
  elements: str
  sample: [ampere]
nodes_by_pool:
  description: The nodes each pool's NVIDIADriver selects once the labels are set, a map of pool name to node names.
  returned: success
  type: dict
  sample: {"hopper": ["gpu-1", "gpu-2"], "ampere": ["gpu-3"]}
route:
  description:
    - Nodes that get the C(gpufleet.io/driver-pool) label while no NVIDIADriver whose nodeSelector has that label owns
      them. NVIDIA's v26.7.0 controller re-routes nodes to NVIDIADrivers when an NVIDIADriver is created, changed or
      deleted, or when a label in the nodeSelector of a node's current NVIDIADriver changes
      (C(controllers/nodelabeling_controller.go)); it would not notice these by themselves.
  returned: success
  type: list
  elements: str
route_trigger:
  description:
    - With RV(route), the NVIDIADriver the role creates and deletes right after applying the pools' so that NVIDIA's
      controller routes those nodes; it selects no node (C(gpufleet.io/driver-pool-route=none)), so NVIDIA's controller
      deploys nothing for it. Null without RV(route).
  returned: success
  type: dict
  contains:
    metadata:
      description: Name C(gpufleet-route-nodes), label C(app.kubernetes.io/managed-by=gpufleet.gpu_operator).
      returned: always
      type: dict
    spec:
      description: The NVIDIADriver's spec.
      returned: always
      type: dict
summary:
  description: One line per pool - its NVIDIADriver, driver version and the nodes it selects.
  returned: success
  type: list
  elements: str
  sample: ["NVIDIADriver hopper, driver 580.105.08 (nodes_group gpu_hopper): gpu-1, gpu-2"]
foreign:
  description: NVIDIADrivers the role did not create that stay (each checked against the pools).
  returned: success
  type: list
  elements: str
warnings:
  description: Pools whose node_selector matches no node today.
  returned: success
  type: list
  elements: str
problems:
  description: Every reason the pools were refused.
  returned: failure
  type: list
  elements: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.nvidia_drivers import plan, route_trigger


def check(module):
    params = module.params
    ops = module.ops()
    nodes = ops.list_nodes(managed_fields=False).get("items") or []
    drivers = ops.list_nvidia_drivers()
    result = plan(params["pools"], nodes, drivers, params["gpu_nodes"], params["release_name"], params["release_namespace"])
    problems = result.pop("problems")
    if problems:
        module.fail_json(msg="driver pools refused before any change: %s" % "; ".join(problems), problems=problems,
                         changed=False)
    for warning in result["warnings"]:
        module.warn(warning)
    result["route_trigger"] = route_trigger() if result["route"] else None
    result["summary"] = [summary_line(pool, result["nodes_by_pool"].get(pool["name"]) or []) for pool in params["pools"]]
    return dict(changed=False, **result)


def summary_line(pool, nodes):
    spec = (pool.get("manifest") or {}).get("spec") or {}
    if pool.get("nodes_group"):
        given = "nodes_group %s" % pool["nodes_group"]
    else:
        given = "node_selector %s" % ", ".join("%s=%s" % item for item in sorted((pool.get("node_selector") or {}).items()))
    covered = ", ".join(nodes) if nodes else "no node yet"
    return "NVIDIADriver %s, driver %s (%s): %s" % (pool.get("name"), spec.get("version"), given, covered)


def main():
    module = KubeModule(dict(
        pools=dict(type="list", elements="dict", default=[]),
        gpu_nodes=dict(type="list", elements="str", default=[]),
        release_name=dict(type="str", default="gpu-operator"),
        release_namespace=dict(type="str", default="gpu-operator"),
    ), names={"gpu_nodes[]": "name", "release_namespace": "namespace"}, supports_check_mode=True)
    module.run(check)


if __name__ == "__main__":
    main()
