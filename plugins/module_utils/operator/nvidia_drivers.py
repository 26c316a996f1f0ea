# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Driver node pools as NVIDIADriver custom resources: check the gpu_operator role's pools, render one NVIDIADriver
per pool, and plan the node labels and deletions against the cluster as read.

Pure Python over plain dicts, no I/O. The NVIDIADriver API is GPU Operator v26.7.0's
(NVIDIA/gpu-operator api/nvidia/v1alpha1/nvidiadriver_types.go, deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml);
what its controller refuses is read from controllers/nvidiadriver_controller.go, internal/validator/validator.go and
internal/nvidiadriver/nvidiadriver.go:

- every NVIDIADriver that is not ``spec.default`` selects the nodes its ``spec.nodeSelector`` matches (all of its
  labels; no selector means ``nvidia.com/gpu.present=true``), among all nodes of the cluster;
- when one node is matched by two such NVIDIADrivers, or two NVIDIADrivers are ``spec.default``, the controller
  refuses to reconcile every NVIDIADriver, not only the two (state ``notReady``, condition ``ConflictingNodeSelector``
  or ``ReconcileFailed``) and routes no node; a nodeSelector may not use its own routing label
  ``nvidia.com/gpu-operator.driver.owner``;
- a GPU node matched by no NVIDIADriver gets no driver (a ``default`` NVIDIADriver takes the nodes no other one matches);
- ``spec.driverType`` cannot be changed once created (CEL rule ``self == oldSelf``);
- the driver image is ``<repository>/<image>:<version>-<os tag>`` (``@<version>`` for a ``sha256:`` digest).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

API_VERSION = "nvidia.com/v1alpha1"
KIND = "NVIDIADriver"
PLURAL = "nvidiadrivers"
# What marks an object the gpu_operator role created (its ConfigMaps carry the same label).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpufleet.gpu_operator"
# The node label the role sets on the hosts of a pool given as an inventory group; the pool's NVIDIADriver selects it.
# The role owns this key: it removes it from every node that is in no such pool.
POOL_LABEL = "gpufleet.io/driver-pool"
# NVIDIA's controller's own routing label (internal/consts/consts.go NVIDIADriverOwnerLabel): the NVIDIADriver that
# owns the node's driver. Reserved: a nodeSelector must not use it.
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"
HELM_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"

# NVIDIA's v26.7.0 controller routes nodes to NVIDIADrivers (AssignOwners) when an NVIDIADriver is created, changed or
# deleted, when the operator's own GPU labels of a node change, or when a label in the nodeSelector of the node's
# current NVIDIADriver changes (controllers/nodelabeling_controller.go SetupWithManager); a label added to a node that
# no NVIDIADriver owns yet is not noticed. The role then creates and deletes this NVIDIADriver, which selects no node.
ROUTE_TRIGGER = "gpufleet-route-nodes"
ROUTE_TRIGGER_SELECTOR = {"gpufleet.io/driver-pool-route": "none"}

DRIVER_TYPES = ("gpu", "vgpu", "vgpu-host-manager")  # CRD enum of spec.driverType
KERNEL_MODULE_TYPES = ("auto", "open", "proprietary")  # CRD enum of spec.kernelModuleType
POOL_KEYS = ("name", "version", "nodes_group", "node_selector", "repository", "image", "driver_type", "kernel_module_type")
# Chart v26.7.0 values.yaml driver.repository and driver.image, what its own default NVIDIADriver uses.
DEFAULT_REPOSITORY = "nvcr.io/nvidia"
DEFAULT_IMAGE = "driver"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# A driver release (580.105.08, 595.91.07; a branch such as 580.105 is accepted too) or an image digest.
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,2}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


def label_key_problem(key):
    """None, or why ``key`` is not a Kubernetes label key ([prefix/]name)."""
    if not isinstance(key, str):
        return "is not a string"
    prefix, _slash, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return "has a prefix that is not a DNS subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return "is not a label name (letters, digits, '-', '_', '.', at most 63 characters)"
    return None


def label_value_problem(value):
    if not isinstance(value, str):
        return "is not a string (quote it)"
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return "is not a label value (letters, digits, '-', '_', '.', at most 63 characters)"
    return None


def selector_matches(selector, labels):
    """Whether a nodeSelector (every key equal) matches ``labels``."""
    return all(labels.get(key) == value for key, value in selector.items())


def _where(index, pool):
    name = pool.get("name") if isinstance(pool, dict) else None
    return "gpu_operator_nvidia_drivers[%d]%s" % (index, " (pool %s)" % name if isinstance(name, str) and name else "")


def pool_problems(pools, group_nodes, driver_enabled=True):
    """Every reason the pools must not be applied, each naming the pool and field; checks that need no cluster.

    ``pools``: the role's list as given. ``group_nodes``: {inventory group: [node names]} for the groups that exist in
    the inventory (a pool's group missing from it is a problem).
    """
    problems = []
    if pools is None:
        return problems
    if not isinstance(pools, list):
        return ["gpu_operator_nvidia_drivers must be a list of driver pools, got %s" % type(pools).__name__]
    if pools and not driver_enabled:
        problems.append("gpu_operator_nvidia_drivers is set but gpu_operator_driver_enabled is false: with the driver "
                        "preinstalled on the hosts no NVIDIADriver installs one")
    names, owner_of = {}, {}
    for index, pool in enumerate(pools):
        where = _where(index, pool)
        if not isinstance(pool, dict):
            problems.append("%s must be a mapping (name, version, nodes_group or node_selector), got %s"
                            % (where, type(pool).__name__))
            continue
        unknown = sorted(str(key) for key in pool if key not in POOL_KEYS)
        if unknown:
            problems.append("%s: unknown key(s) %s (known: %s)" % (where, ", ".join(unknown), ", ".join(POOL_KEYS)))
        name = pool.get("name")
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
            problems.append("%s: name %r is not a DNS-1123 label (lower-case letters, digits and '-', at most 63 "
                            "characters): it names the NVIDIADriver and is the value of node labels" % (where, name))
        elif name == ROUTE_TRIGGER:
            problems.append("%s: name %s is reserved: the role uses an NVIDIADriver of that name for a moment to have "
                            "NVIDIA's controller route newly labelled nodes" % (where, name))
        elif name in names:
            problems.append("%s: name %s is also the name of gpu_operator_nvidia_drivers[%d]" % (where, name, names[name]))
        else:
            names[name] = index
        problems.extend(_version_problems(where, pool.get("version")))
        for key, pattern, what in (("repository", _REPOSITORY, "a registry path such as nvcr.io/nvidia"),
                                   ("image", _IMAGE, "an image name such as driver")):
            value = pool.get(key)
            if value is not None and (not isinstance(value, str) or not pattern.match(value)):
                problems.append("%s: %s %r is not %s" % (where, key, value, what))
        for key, choices in (("driver_type", DRIVER_TYPES), ("kernel_module_type", KERNEL_MODULE_TYPES)):
            value = pool.get(key)
            if value is not None and value not in choices:
                problems.append("%s: %s %r is not one of %s" % (where, key, value, "|".join(choices)))
        has_group, has_selector = pool.get("nodes_group") is not None, pool.get("node_selector") is not None
        if has_group == has_selector:
            problems.append("%s: give the nodes of the pool as exactly one of nodes_group (an inventory group) or "
                            "node_selector (node labels)%s" % (where, ", not both" if has_group else ""))
        elif has_group:
            problems.extend(_group_problems(where, pool, group_nodes, owner_of))
        else:
            problems.extend(_selector_problems(where, pool.get("node_selector")))
    return problems


def _version_problems(where, version):
    if version is None or version == "":
        return ["%s: version is missing: the driver version the pool runs, for example '580.105.08'" % where]
    if not isinstance(version, str):
        return ["%s: version %r is a %s; quote it ('580.105.08'), a YAML number loses digits (580.10 reads as 580.1)"
                % (where, version, type(version).__name__)]
    if not (_VERSION.match(version) or _DIGEST.match(version)):
        return ["%s: version %r is not a driver version (such as 580.105.08) or an image digest (sha256:<64 hex>)"
                % (where, version)]
    return []


def _group_problems(where, pool, group_nodes, owner_of):
    group = pool["nodes_group"]
    if not isinstance(group, str) or not group:
        return ["%s: nodes_group %r is not an inventory group name" % (where, group)]
    if group not in (group_nodes or {}):
        return ["%s: nodes_group %s is not a group of the inventory" % (where, group)]
    nodes = group_nodes[group] or []
    if not nodes:
        return ["%s: nodes_group %s has no hosts: the pool would cover no node" % (where, group)]
    problems = []
    name = pool.get("name")
    for node in nodes:
        other = owner_of.get(node)
        if other is not None and other[0] != name:
            problems.append("%s: node %s is in nodes_group %s and in pool %s (nodes_group %s); a node can be in one "
                            "driver pool only (NVIDIA's controller refuses two NVIDIADrivers that select one node)"
                            % (where, node, group, other[0], other[1]))
        else:
            owner_of[node] = (name, group)
    return problems


def _selector_problems(where, selector):
    if not isinstance(selector, dict):
        return ["%s: node_selector must be a mapping of node label to value, got %s" % (where, type(selector).__name__)]
    if not selector:
        return ["%s: node_selector is empty: the pool would select every node" % where]
    problems = []
    for key, value in sorted(selector.items(), key=lambda item: str(item[0])):
        why = label_key_problem(key)
        if why:
            problems.append("%s: node_selector key %r %s" % (where, key, why))
            continue
        if key == OWNER_LABEL:
            problems.append("%s: node_selector uses %s, the label NVIDIA's controller routes nodes with (it refuses "
                            "such an NVIDIADriver)" % (where, key))
        elif key == POOL_LABEL:
            problems.append("%s: node_selector uses %s, the label this role sets for nodes_group pools; use "
                            "nodes_group instead" % (where, key))
        why = label_value_problem(value)
        if why:
            problems.append("%s: node_selector value of %s, %r, %s" % (where, key, value, why))
    return problems


def render_pools(pools, group_nodes, repository=None, image=None, pull_secrets=None):
    """[{name, nodes_group, nodes, node_selector, manifest}] for pools that passed ``pool_problems``.

    ``repository``/``image``: the chart's driver.repository and driver.image as the role's values set them (a mirror
    registry), used where a pool gives none; ``pull_secrets``: driver.imagePullSecrets.
    """
    rendered = []
    for pool in pools or []:
        group = pool.get("nodes_group")
        selector = {POOL_LABEL: pool["name"]} if group is not None else dict(pool["node_selector"])
        spec = {
            "driverType": pool.get("driver_type") or "gpu",
            "repository": pool.get("repository") or repository or DEFAULT_REPOSITORY,
            "image": pool.get("image") or image or DEFAULT_IMAGE,
            "version": pool["version"],
            "nodeSelector": selector,
        }
        if pool.get("kernel_module_type"):
            spec["kernelModuleType"] = pool["kernel_module_type"]
        if pull_secrets:
            spec["imagePullSecrets"] = list(pull_secrets)
        rendered.append({
            "name": pool["name"],
            "nodes_group": group,
            "nodes": sorted(group_nodes[group]) if group is not None else None,
            "node_selector": selector,
            "manifest": {
                "apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": pool["name"], "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
                "spec": spec,
            },
        })
    return rendered


def _labels(obj):
    return (obj.get("metadata") or {}).get("labels") or {}


def route_trigger():
    """The NVIDIADriver the role creates and deletes at once to have NVIDIA's controller route nodes (ROUTE_TRIGGER):
    its nodeSelector matches no node, so NVIDIA's controller renders nothing for it."""
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": ROUTE_TRIGGER, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {"driverType": "gpu", "repository": DEFAULT_REPOSITORY, "image": DEFAULT_IMAGE,
                     "nodeSelector": dict(ROUTE_TRIGGER_SELECTOR)}}


def is_managed(obj):
    """Whether the gpu_operator role created ``obj`` (its managed-by label)."""
    return _labels(obj).get(MANAGED_BY_LABEL) == MANAGED_BY


def _chart_made(obj, release, namespace):
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(HELM_RELEASE_ANNOTATION) == release and annotations.get(HELM_NAMESPACE_ANNOTATION) == namespace


def effective_selector(driver):
    """The nodeSelector NVIDIA's controller matches nodes with (GetNodeSelector: none means gpu.present=true)."""
    selector = (driver.get("spec") or {}).get("nodeSelector")
    return {GPU_PRESENT_LABEL: "true"} if selector is None else dict(selector)


def plan(pools, nodes, drivers, gpu_nodes=None, release=None, namespace=None):
    """What the role changes in the cluster for ``pools`` (``render_pools``' output), and every reason it must not.

    ``nodes``: the cluster's Node objects; ``drivers``: its NVIDIADriver objects; ``gpu_nodes``: names of the
    inventory's GPU nodes (each must end up with a driver); ``release``/``namespace``: the chart's Helm release, whose
    own ``default`` NVIDIADriver goes away with ``deployDefaultCR: false``.

    Returns {problems, warnings, label_changes [{node, from, to}], delete [names], nodes_by_pool {pool: [nodes]},
    foreign [names], route [nodes]}; label_changes that remove a label come first. ``route``: nodes that get a pool
    label NVIDIA's controller would not notice by itself (see ROUTE_TRIGGER).
    """
    problems, warnings = [], []
    labels = dict((node["metadata"]["name"], dict(_labels(node))) for node in nodes)
    wanted = {}
    for pool in pools:
        for node in pool["nodes"] or []:
            if node not in labels:
                problems.append("pool %s: node %s (nodes_group %s) is not a node of the cluster"
                                % (pool["name"], node, pool["nodes_group"]))
            else:
                wanted[node] = pool["name"]
    removals, additions = [], []
    for name in sorted(labels):
        now = labels[name].get(POOL_LABEL)
        target = wanted.get(name)
        if now == target:
            continue
        (removals if target is None else additions).append({"node": name, "from": now, "to": target})
        if target is None:
            labels[name].pop(POOL_LABEL, None)
        else:
            labels[name][POOL_LABEL] = target
    result = {"problems": problems, "warnings": warnings, "label_changes": removals + additions, "delete": [],
              "nodes_by_pool": dict((pool["name"], []) for pool in pools), "foreign": [], "route": []}
    pool_names = set(pool["name"] for pool in pools)
    existing = dict(((d.get("metadata") or {}).get("name"), d) for d in drivers)
    delete, foreign = result["delete"], result["foreign"]
    for name, driver in sorted(existing.items()):
        if (driver.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if is_managed(driver):
            if name not in pool_names:
                delete.append(name)
            continue
        if name in pool_names:
            problems.append("pool %s: NVIDIADriver %s exists and this role did not create it (it lacks the label %s=%s); "
                            "name the pool differently, or delete that NVIDIADriver" % (name, name, MANAGED_BY_LABEL, MANAGED_BY))
            continue
        if release and (driver.get("spec") or {}).get("default") and _chart_made(driver, release, namespace):
            continue  # the chart's own default NVIDIADriver: helm removes it with deployDefaultCR=false
        foreign.append(name)
    for change in additions:
        owner_name = labels[change["node"]].get(OWNER_LABEL) or ""
        owner = existing.get(owner_name)
        if owner is None or owner_name in delete or (owner.get("spec") or {}).get("default") \
                or POOL_LABEL not in effective_selector(owner):
            result["route"].append(change["node"])  # the label change alone would not make NVIDIA re-route it
    if not pools:
        return result  # the driver goes back to ClusterPolicy: other NVIDIADrivers are not this role's business
    for pool in pools:
        current = existing.get(pool["name"])
        if current is not None and is_managed(current):
            before = (current.get("spec") or {}).get("driverType") or "gpu"
            after = pool["manifest"]["spec"]["driverType"]
            if before != after:
                problems.append("pool %s: driver_type %s, but NVIDIADriver %s has driverType %s, which NVIDIA's CRD does "
                                "not let change; give the pool another name (a new NVIDIADriver)" % (pool["name"], after,
                                                                                                     pool["name"], before))
    selectors = [("pool %s" % pool["name"], pool["name"], pool["node_selector"]) for pool in pools]
    defaults = []
    for name in foreign:
        driver = existing[name]
        if (driver.get("spec") or {}).get("default"):
            defaults.append(name)
        else:
            selectors.append(("NVIDIADriver %s (not this role's)" % name, name, effective_selector(driver)))
    if len(defaults) > 1:
        problems.append("NVIDIADrivers %s are all spec.default; NVIDIA's controller then reconciles no NVIDIADriver"
                        % ", ".join(defaults))
    nodes_by_pool = result["nodes_by_pool"]
    matched = {}
    for name in sorted(labels):
        hits = [(what, driver) for what, driver, selector in selectors if selector_matches(selector, labels[name])]
        if len(hits) > 1:
            problems.append("node %s would be selected by %s; NVIDIA's controller refuses to reconcile any NVIDIADriver "
                            "while two select one node" % (name, " and ".join(what for what, _d in hits)))
        for _what, driver in hits:
            if driver in nodes_by_pool:
                nodes_by_pool[driver].append(name)
        matched[name] = [driver for _what, driver in hits]
    for pool in pools:
        if pool["nodes_group"] is None and not nodes_by_pool[pool["name"]]:
            warnings.append("pool %s: node_selector %s matches no node of the cluster today; its NVIDIADriver is "
                            "applied and takes the nodes that get these labels"
                            % (pool["name"], ", ".join("%s=%s" % item for item in sorted(pool["node_selector"].items()))))
    if not defaults:
        # NVIDIA's controller routes the nodes labelled nvidia.com/gpu.present=true; before the operator has labelled a
        # node, a selector on labels the operator or GFD set later cannot be judged yet.
        uncovered = sorted(name for name in (gpu_nodes or []) if name in labels and not matched.get(name))
        known = [name for name in uncovered if labels[name].get(GPU_PRESENT_LABEL) == "true"]
        if known:
            problems.append("GPU node(s) %s are in no driver pool: with the driver managed by NVIDIADriver resources a GPU "
                            "node no NVIDIADriver selects gets no driver; add them to a pool" % ", ".join(known))
        later = [name for name in uncovered if name not in known]
        if later:
            warnings.append("GPU node(s) %s are in no driver pool today; not labelled %s=true yet, so a pool that selects "
                            "labels the GPU Operator sets later may still take them; one that no NVIDIADriver selects "
                            "gets no driver" % (", ".join(later), GPU_PRESENT_LABEL))
    return result
