# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The GPU Operator's state as the Kubernetes API holds it: ClusterPolicy and operand pods, as plain dicts.

The I/O half of ``operator_status`` (which stays pure): the modules that report on the operator read
through these.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.kube import ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.kube_ops import KubeOps


def read_cluster_policy(api_client):
    """ClusterPolicy ``cluster-policy`` (nvidia.com/v1) as a dict, or None when it does not exist."""
    from kubernetes import client

    try:
        return client.CustomObjectsApi(api_client).get_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None


def list_operand_pods(api_client, namespace):
    """Every pod of the operator's namespace (its operands), as dicts."""
    return KubeOps(api_client).list_pods_in_namespace(namespace).get("items") or []
