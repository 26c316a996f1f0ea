#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_operator_upgrade_check
short_description: Refuse a GPU Operator upgrade while MIG changes run or the operator is not ready
version_added: 0.1.0
description:
  - Read-only pre-flight check before C(helm upgrade) of the NVIDIA GPU Operator.
  - Fails, naming every blocker, when a node's C(nvidia.com/mig.config.state) is C(pending) or C(rebooting)
    (MIG Manager is mid-change), when a MIG rollout holds its Lease (the one M(gpufleet.gpu_operator.mig_rollout_lock)
    takes; an expired lease does not count), or when ClusterPolicy C(cluster-policy) or an operand on a GPU node is
    not ready (the same reading as M(gpufleet.gpu_operator.gpu_operator_status)).
  - Never changes the cluster.
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
      - When omitted, every GPU node is checked (see M(gpufleet.gpu_operator.gpu_operator_status)).
    type: list
    elements: str
  lease_namespace:
    description: Namespace of the MIG rollout Lease; defaults to O(namespace).
    type: str
  lease_name:
    description: Name of the MIG rollout Lease.
    type: str
    default: gpufleet-mig-rollout
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Refuse the upgrade while MIG changes run
  gpufleet.gpu_operator.gpu_operator_upgrade_check:
    nodes: "{{ groups['gpu_nodes'] | gpufleet.gpu_operator.gpu_node_names(hostvars) | list }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
blockers:
  description: One line per reason the upgrade is refused (node and label, lease holder, operand); empty when allowed.
  returned: always
  type: list
  elements: str
  sample: ["node gpu-a: nvidia.com/mig.config.state=pending (applying nvidia.com/mig.config=all-1g.10gb)"]
state:
  description: ClusterPolicy C(status.state), or why it could not be read.
  returned: always
  type: str
  sample: ready
lease:
  description: The MIG rollout Lease as read, or null when there is none.
  returned: always
  type: dict
  contains:
    holder:
      description: The Lease's C(spec.holderIdentity).
      returned: when there is a Lease
      type: str
    acquired:
      description: The Lease's C(spec.acquireTime) (RFC 3339 MicroTime).
      returned: when there is a Lease
      type: str
    renewed:
      description: The Lease's C(spec.renewTime).
      returned: when there is a Lease
      type: str
    duration_s:
      description: The Lease's C(spec.leaseDurationSeconds).
      returned: when there is a Lease
      type: int
    expires:
      description: When the Lease expires unless renewed; null when unknown. An expired Lease blocks nothing.
      returned: when there is a Lease
      type: str
    rollout:
      description: The rollout's description (annotation C(gpufleet.io/rollout)), or null.
      returned: when there is a Lease
      type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (
    list_operand_pods,
    read_cluster_policy,
    read_driver_owners,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.status import assess
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.upgrade import upgrade_blockers
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import RolloutLock, lease_view


def check(module):
    params = module.params
    lease_namespace = params["lease_namespace"] or params["namespace"]
    policy = read_cluster_policy(module.api_client)
    nodes = KubeOps(module.api_client).list_nodes().get("items") or []
    pods = list_operand_pods(module.api_client, params["namespace"])
    # holder/duration are unused for a read
    lease = RolloutLock(module.ops().custom, lease_namespace, params["lease_name"], None, 0).read()
    daemonsets, nvidia_drivers = read_driver_owners(module.api_client, params["namespace"], policy)
    assessment = assess(policy, nodes, pods, params["nodes"], daemonsets, nvidia_drivers)
    blockers = upgrade_blockers(nodes, lease, assessment, lease_namespace, params["lease_name"])
    result = dict(changed=False, blockers=blockers, state=assessment["state"],
                  lease=lease_view(lease) if lease else None)
    if blockers:
        module.fail_json(msg="GPU Operator upgrade refused, nothing changed: %s" % "; ".join(blockers), **result)
    return result


def main():
    module = KubeModule(dict(
        namespace=dict(type="str", default="gpu-operator"),
        nodes=dict(type="list", elements="str"),
        lease_namespace=dict(type="str"),
        lease_name=dict(type="str", default="gpufleet-mig-rollout"),
    ), names={"namespace": "namespace", "nodes[]": "name", "lease_namespace": "namespace", "lease_name": "name"},
        supports_check_mode=True)
    module.run(check)


if __name__ == "__main__":
    main()
