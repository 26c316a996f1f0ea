# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Smoke pods: one pod per (node, GPU resource) running ``nvidia-smi -L``, and the check of its output.

Pure Python (manifests in, verdicts out). The output format is nvidia-smi's device listing:
``GPU <i>: <name> (UUID: GPU-...)`` and, under it, ``  MIG <profile> Device <j>: (UUID: MIG-...)``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    GPU_TAINT_KEY,
    RESOURCE_MIG_PREFIX,
    VENDOR_PREFIX,
    node_gpu_allocatable,
    pod_gpu_requests,
    product_label,
    resource_mig_profile,
)

SMOKE_LABEL = "gpufleet.io/smoke-test"
APP_LABEL = "gpufleet-smoke-test"
_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")
_NAME_SAFE = re.compile(r"[^a-z0-9-]+")


def pod_name(node, resource):
    """A stable, valid pod name for (node, resource): readable prefix plus a short hash."""
    digest = hashlib.sha256(("%s/%s" % (node, resource)).encode("utf-8")).hexdigest()[:8]
    suffix = resource[len(RESOURCE_MIG_PREFIX):] if resource.startswith(RESOURCE_MIG_PREFIX) else resource.replace(VENDOR_PREFIX, "", 1)
    readable = _NAME_SAFE.sub("-", ("smoke-%s-%s" % (node, suffix)).lower()).strip("-")
    return "%s-%s" % (readable[:53].rstrip("-"), digest)


def pod_manifest(node, resource, namespace, image, command, runtime_class_name=None):
    """A pod for ``node`` (placed by the scheduler, so allocatable is really tested) asking one ``resource``."""
    spec = {
        "restartPolicy": "Never",
        # Node affinity on the node's name (as DaemonSets pin their pods): the scheduler still checks the
        # node's allocatable, and no hostname label is needed.
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
        # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule; the operator's own pods tolerate it too
        # (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml daemonsets.tolerations).
        "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "nvidia-smi",
            "image": image,
            "command": list(command),
            "resources": {"limits": {resource: "1"}},
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
    }
    if runtime_class_name:
        spec["runtimeClassName"] = runtime_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node, resource),
            "namespace": namespace,
            "labels": {"app": APP_LABEL, SMOKE_LABEL: "true"},
            "annotations": {"gpufleet.io/node": node, "gpufleet.io/resource": resource},
        },
        "spec": spec,
    }


def parse_listing(text):
    """[{'index', 'name', 'uuid', 'mig': [{'profile', 'index', 'uuid'}]}] from ``nvidia-smi -L`` output."""
    gpus = []
    for line in (text or "").splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            gpus.append({"index": int(gpu.group("index")), "name": gpu.group("name"), "uuid": gpu.group("uuid"), "mig": []})
            continue
        mig = _MIG_LINE.match(line)
        if mig and gpus:
            gpus[-1]["mig"].append({"profile": mig.group("profile"), "index": int(mig.group("index")), "uuid": mig.group("uuid")})
    return gpus


def check_output(resource, output, exit_code, expected_product=None, strategy="mixed"):
    """Why the smoke output is wrong, or None when it shows exactly the one device asked for.

    ``expected_product``: the node's GFD product label without suffix (e.g. NVIDIA-H100-80GB-HBM3).
    """
    if exit_code not in (0, None):
        first = (output or "").strip().splitlines()[:1]
        return "nvidia-smi exited %s%s" % (exit_code, (": " + first[0]) if first else "")
    gpus = parse_listing(output)
    if not gpus:
        return "nvidia-smi listed no GPU (output: %r)" % (output or "")[:200]
    if len(gpus) != 1:
        return "container sees %d GPUs, asked for one" % len(gpus)
    gpu = gpus[0]
    if expected_product and product_label(gpu["name"]) != expected_product:
        return "container sees %s, node is labelled %s" % (gpu["name"], expected_product)
    wanted = resource_mig_profile(resource)
    if wanted:
        if len(gpu["mig"]) != 1:
            return "container sees %d MIG devices, asked for one %s" % (len(gpu["mig"]), wanted)
        if gpu["mig"][0]["profile"].replace("+", ".") != wanted:
            return "container got MIG device %s, asked for %s" % (gpu["mig"][0]["profile"], wanted)
    elif strategy == "single":
        if len(gpu["mig"]) > 1:
            return "container sees %d MIG devices, asked for one" % len(gpu["mig"])
    elif gpu["mig"]:
        return "asked for a full GPU, container got MIG device(s) %s" % ", ".join(m["profile"] for m in gpu["mig"])
    return None


def pending_reason(pod):
    """Why a pod is not running yet: the scheduler's message, or a waiting container's reason."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            return "not scheduled: %s" % (condition.get("message") or condition.get("reason") or "pending")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return "container waiting: %s %s" % (waiting.get("reason", ""), waiting.get("message", "")).strip()
    return "phase %s" % (status.get("phase") or "Pending")


def terminated_state(pod):
    """(exit_code, termination message) of the smoke container, or (None, None) if it has not finished."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return terminated.get("exitCode"), terminated.get("message") or ""
    return None, None


def busy_reason(node, pods, resource):
    """Why a smoke pod for ``resource`` cannot be scheduled on ``node`` right now (every unit is held by the
    node's running or pending pods), or None when at least one unit is free. ``pods``: the pods bound to the node.

    Such a pod would stay Pending until the timeout and fail a healthy node whose GPUs are simply in use; the
    smoke test is not run there and the reason is reported instead."""
    allocatable = node_gpu_allocatable(node).get(resource, 0)
    if allocatable < 1:
        return None  # nothing advertised: the smoke pod's failure is the finding
    held = 0
    for pod in pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        held += pod_gpu_requests(pod).get(resource, 0)
    if held < allocatable:
        return None
    return "not run: all %d %s of the node are held by its pods" % (allocatable, resource)
