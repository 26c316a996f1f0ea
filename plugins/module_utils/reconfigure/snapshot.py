# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What the plan reads, read once: the nodes, their pods, the budgets of the pods a drain would evict and the MIG
config ConfigMaps. ``read_fleet`` reads a fleet in a few lists (for the fleet plan and the room count);
``read_node`` reads one node right before it changes. Planning (preflight.plan_one) reads only a Snapshot: it
answers the reads planning makes from memory and never calls the API server."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import ApiException
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import node_step
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.drain import classify_pods


class NotRead(Exception):
    """Planning asked for something the snapshot did not read (a defect: planning must not read the cluster)."""


class Snapshot(object):
    """The objects read for planning, answering the KubeOps reads that planning makes (get_node,
    list_pods_on_node, list_pdbs, get_configmap, list_nodes, list_pods). A read that failed is raised again
    when planning asks for it, as the API call would have."""

    def __init__(self, namespace):
        self.namespace = namespace
        self.nodes = {}  # name -> node, or the ApiException its read raised
        self.pods = {}  # node name -> pod listing ({items, metadata}), or the ApiException
        self.pdbs = {}  # namespace -> PodDisruptionBudget listing
        self.configmaps = {}  # name in ``namespace`` -> ConfigMap or None (absent)
        self.all_nodes = None  # the cluster's node and pod lists, when read (read_fleet)
        self.all_pods = None

    @staticmethod
    def _answer(value):
        if isinstance(value, Exception):
            raise value
        return value

    def get_node(self, name):
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return self._answer(self.nodes[name])

    def list_pods_on_node(self, node, label_selector=None):
        if label_selector or node not in self.pods:
            raise NotRead("pods of node %s%s" % (node, " with %s" % label_selector if label_selector else ""))
        listing = self._answer(self.pods[node])
        return {"items": list(listing.get("items") or []), "metadata": listing.get("metadata") or {}}

    def pods_read(self, node):
        """The pods read on ``node`` (a list), or None when they were not read or their read failed."""
        listing = self.pods.get(node)
        return None if listing is None or isinstance(listing, Exception) else list(listing.get("items") or [])

    def list_pdbs(self, namespace):
        if namespace not in self.pdbs:
            raise NotRead("PodDisruptionBudgets of namespace %s" % namespace)
        return self._answer(self.pdbs[namespace])

    def get_configmap(self, namespace, name):
        if namespace != self.namespace or name not in self.configmaps:
            raise NotRead("ConfigMap %s/%s" % (namespace, name))
        return self.configmaps[name]

    def list_nodes(self):
        if self.all_nodes is None:
            raise NotRead("the cluster's nodes")
        return self.all_nodes

    def list_pods(self):
        if self.all_pods is None:
            raise NotRead("the cluster's pods")
        return self.all_pods


def _config_names(policy, node_names):
    """The ConfigMaps find_config_source may read for these nodes."""
    custom = node_step.custom_config_name(policy)
    return [custom] if custom else ["%s-mig-config" % name for name in node_names]


def _read_budgets(ops, snap, options, node_names):
    """The budgets of each namespace whose pods a drain of these nodes would evict (one list per namespace)."""
    namespaces = set()
    for name in node_names:
        listing = snap.pods.get(name)
        if listing is None or isinstance(listing, Exception):
            continue
        plan = classify_pods(listing.get("items") or [], options["pod_scope"], force=options["force"],
                             delete_emptydir_data=options["delete_emptydir_data"])
        namespaces.update(p["namespace"] for p in plan["evict"])
    for namespace in sorted(namespaces - set(snap.pdbs)):
        try:
            snap.pdbs[namespace] = ops.list_pdbs(namespace)
        except ApiException as exc:
            snap.pdbs[namespace] = exc


def read_fleet(ops, ctx, node_names):
    """The cluster's nodes and pods and the operator namespace's ConfigMaps in one list each (a ConfigMap by name
    when listing is forbidden: a Role that grants get only), then the budgets the drains would meet."""
    snap = Snapshot(ctx.namespace)
    snap.all_nodes = ops.list_nodes(managed_fields=False)
    for node in snap.all_nodes.get("items") or []:
        snap.nodes[node["metadata"]["name"]] = node
    snap.all_pods = ops.list_pods()
    for name in node_names:
        snap.pods[name] = {"items": []}
    for pod in snap.all_pods.get("items") or []:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in snap.pods:
            snap.pods[node_name]["items"].append(pod)
    wanted = _config_names(ctx.policy, node_names)
    try:
        listed = dict((c["metadata"]["name"], c) for c in ops.list_configmaps(ctx.namespace).get("items") or [])
        snap.configmaps = dict((name, listed.get(name)) for name in wanted)
    except ApiException as exc:
        if exc.status != 403:
            raise
        for name in wanted:
            snap.configmaps[name] = ops.get_configmap(ctx.namespace, name)
    _read_budgets(ops, snap, ctx.options, node_names)
    return snap


def read_node(ops, ctx, name):
    """One node as it is now: the node, its MIG config ConfigMap, its pods and their budgets."""
    snap = Snapshot(ctx.namespace)
    try:
        snap.nodes[name] = ops.get_node(name)
    except ApiException as exc:
        snap.nodes[name] = exc
        return snap
    for config_name in _config_names(ctx.policy, [name]):
        snap.configmaps[config_name] = ops.get_configmap(ctx.namespace, config_name)
    try:
        snap.pods[name] = ops.list_pods_on_node(name)
    except ApiException as exc:
        snap.pods[name] = exc
    _read_budgets(ops, snap, ctx.options, [name])
    return snap
