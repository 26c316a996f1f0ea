#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_smoke_test
short_description: Run one nvidia-smi pod per node and GPU resource, check what it saw, and clean up
version_added: 0.1.0
description:
  - For each entry of O(targets) creates a pod pinned to the node (through the scheduler, so the node's
    allocatable is really exercised) that requests one unit of each listed resource (C(nvidia.com/gpu), a
    mixed-strategy C(nvidia.com/mig-<profile>), or their time-sliced C(.shared) forms) and runs O(command).
  - Waits for every pod to finish, reads the container's termination message or, when empty, its logs, and
    checks that it lists exactly one device of the kind requested on a GPU of the node's model.
  - Deletes every pod it created, whatever happened. Leaves nothing behind, so it reports C(changed=false).
  - A resource whose every unit on the node is held by pods there is not tested (the pod would wait for the
    timeout and fail a node that is only busy); the result says so, with a warning, and is not a failed check.
  - In check mode it only returns the pods it would run.
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes.no_diff
options:
  targets:
    description: What to test.
    type: list
    elements: dict
    required: true
    suboptions:
      node:
        description: Node name.
        type: str
        required: true
      resources:
        description: Extended resources to request, one pod each.
        type: list
        elements: str
        default: [nvidia.com/gpu]
      product:
        description: The node's GFD product label without MIG/SHARED suffix; when set the device seen must match it.
        type: str
  strategy:
    description: The cluster's MIG strategy (changes what a C(nvidia.com/gpu) pod should see).
    type: str
    choices: [none, single, mixed]
    default: mixed
  namespace:
    description: Namespace for the smoke pods.
    type: str
    default: gpu-operator
  image:
    description: Container image with nvidia-smi.
    type: str
    default: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
  command:
    description: Command of the smoke container.
    type: list
    elements: str
    default: [nvidia-smi, -L]
  runtime_class_name:
    description: RuntimeClass for the pods (for example C(nvidia)); omitted when empty.
    type: str
  timeout:
    description: Seconds to wait for all pods to finish.
    type: int
    default: 300
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Smoke-test every advertised resource of two nodes
  gpufleet.gpu_operator.gpu_smoke_test:
    targets:
      - node: gpu-node-01
        resources: [nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb]
        product: NVIDIA-H100-80GB-HBM3
      - node: gpu-node-02
        resources: [nvidia.com/gpu]
    strategy: mixed
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
results:
  description: One entry per pod.
  returned: always
  type: list
  elements: dict
  sample:
    - {"node": "gpu-a", "resource": "nvidia.com/gpu", "pod": "smoke-gpu-a-gpu-1a2b3c4d", "ok": true,
       "output": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)", "problem": null}
  contains:
    node:
      description: Node the pod ran on.
      returned: always
      type: str
    resource:
      description: The GPU resource the pod requested.
      returned: always
      type: str
    pod:
      description: The smoke-test pod's name (deleted afterwards).
      returned: always
      type: str
    ok:
      description:
        - Whether the pod saw the GPU it asked for.
        - Null when nothing ran, in check mode or when every unit of the resource on the node is held by its pods
          (RV(results[].busy)); then RV(results[].problem) says why.
      returned: always
      type: bool
    busy:
      description: True when the pod was not run because all of the node's units of the resource were held by pods.
      returned: when true
      type: bool
    output:
      description: The pod's log (empty in check mode).
      returned: always
      type: str
    problem:
      description: What was wrong, or null when RV(results[].ok) is true.
      returned: always
      type: str
failed_checks:
  description: One line per failed pod naming the node, the resource and what was wrong (busy resources excluded).
  returned: always
  type: list
  elements: str
"""

import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import ApiException, api_reason
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import RESOURCE_GPU, is_gpu_resource
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.smoke import (
    busy_reason,
    check_output,
    pending_reason,
    pod_manifest,
    terminated_state,
)


class SmokeRun(object):
    def __init__(self, module, api_client):
        self.module = module
        self.ops = KubeOps(api_client)
        self.namespace = module.params["namespace"]

    def read(self, name):
        return self.ops.get_pod(self.namespace, name)

    def delete(self, name):
        try:
            self.ops.delete_pod(self.namespace, name, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def wait_gone(self, names, deadline):
        pending = set(names)
        while pending and time.monotonic() < deadline:
            pending = set(name for name in pending if self.read(name) is not None)
            if pending:
                time.sleep(0.5)
        return sorted(pending)

    def output_of(self, pod, message):
        if message:
            return message
        try:
            return self.ops.pod_log(self.namespace, pod["metadata"]["name"], tail_lines=None, container="nvidia-smi")
        except ApiException as exc:
            return "(no output: logs unreadable, %s)" % api_reason(exc)

    def run(self, plans):
        params = self.module.params
        deadline = time.monotonic() + params["timeout"]
        names = [plan["manifest"]["metadata"]["name"] for plan in plans]
        # A pod left by an interrupted run would be mistaken for this run's result.
        for name in names:
            self.delete(name)
        leftover = self.wait_gone(names, deadline)
        if leftover:
            self.module.fail_json(msg="stale smoke pod(s) %s in %s are not going away" % (", ".join(leftover), self.namespace))
        results = []
        try:
            for plan in plans:
                try:
                    self.ops.create_pod(self.namespace, plan["manifest"])
                except ApiException as exc:
                    # 409 AlreadyExists: our create was retried after its answer was lost (stale pods of
                    # that name were deleted above, so the pod is this run's).
                    if exc.status != 409:
                        raise
            waiting = dict((plan["manifest"]["metadata"]["name"], plan) for plan in plans)
            while waiting:
                for name in sorted(waiting):
                    plan = waiting[name]
                    pod = self.read(name)
                    phase = ((pod or {}).get("status") or {}).get("phase")
                    if pod is None or phase in ("Succeeded", "Failed"):
                        results.append(self.verdict(plan, pod))
                        del waiting[name]
                if not waiting:
                    break
                if time.monotonic() >= deadline:
                    for name in sorted(waiting):
                        pod = self.read(name)
                        results.append(self.result(waiting[name], False, "", "did not finish within %ss (%s)"
                                                   % (params["timeout"], pending_reason(pod or {}))))
                    break
                time.sleep(1)
        finally:
            for name in names:
                self.delete(name)
            self.wait_gone(names, time.monotonic() + 60)
        return sorted(results, key=lambda r: (r["node"], r["resource"]))

    def result(self, plan, ok, output, problem):
        return {"node": plan["node"], "resource": plan["resource"], "pod": plan["manifest"]["metadata"]["name"],
                "ok": ok, "output": output, "problem": problem}

    def verdict(self, plan, pod):
        if pod is None:
            return self.result(plan, False, "", "pod disappeared before it finished")
        exit_code, message = terminated_state(pod)
        output = self.output_of(pod, message)
        if pod["status"]["phase"] == "Failed" and exit_code in (0, None):
            exit_code = exit_code if exit_code else "unknown (pod Failed: %s)" % (pod["status"].get("reason") or "")
        problem = check_output(plan["resource"], output, exit_code, plan["product"], self.module.params["strategy"])
        return self.result(plan, problem is None, output, problem)


def smoke_plans(module):
    """One pod per target node and resource; a resource that is no GPU resource fails before any change."""
    params, plans = module.params, []
    for target in params["targets"]:
        for resource in target["resources"] or [RESOURCE_GPU]:
            if not is_gpu_resource(resource):
                module.fail_json(msg="node %s: %r is not a GPU resource (nvidia.com/gpu, nvidia.com/mig-<profile> or their "
                                     ".shared forms)" % (target["node"], resource))
            plans.append({"node": target["node"], "resource": resource, "product": target.get("product"),
                          "manifest": pod_manifest(target["node"], resource, params["namespace"], params["image"],
                                                   params["command"], params["runtime_class_name"])})
    return plans


def smoke(module):
    plans = smoke_plans(module)
    if module.check_mode:
        return dict(changed=False, failed_checks=[], results=[
            {"node": p["node"], "resource": p["resource"], "pod": p["manifest"]["metadata"]["name"], "ok": None,
             "output": "", "problem": "not run in check mode"} for p in plans])
    plans, busy = split_busy(module, plans)
    results = SmokeRun(module, module.api_client).run(plans) if plans else []
    for result in busy:
        module.warn("%s: smoke %s %s" % (result["node"], result["resource"], result["problem"]))
    results = sorted(results + busy, key=lambda r: (r["node"], r["resource"]))
    failed = ["%s: %s: %s" % (r["node"], r["resource"], r["problem"]) for r in results if r["ok"] is False]
    return dict(changed=False, results=results, failed_checks=failed)


def split_busy(module, plans):
    """(plans to run, results of those not run): a pod for a resource whose every unit on the node is held by
    pods there would only wait for the timeout. One node read and one list of its pods per node."""
    ops = KubeOps(module.api_client)
    node_state = {}
    to_run, busy = [], []
    for plan in plans:
        name = plan["node"]
        if name not in node_state:
            try:
                node = ops.get_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                node = None  # the smoke pod's failure names the missing node
            pods = (ops.list_pods_on_node(name).get("items") or []) if node else []
            node_state[name] = (node, pods)
        node, pods = node_state[name]
        reason = busy_reason(node, pods, plan["resource"]) if node else None
        if reason:
            busy.append({"node": name, "resource": plan["resource"], "pod": plan["manifest"]["metadata"]["name"],
                         "ok": None, "output": "", "problem": reason, "busy": True})
        else:
            to_run.append(plan)
    return to_run, busy


def main():
    module = KubeModule(dict(
        targets=dict(type="list", elements="dict", required=True, options=dict(
            node=dict(type="str", required=True),
            resources=dict(type="list", elements="str", default=[RESOURCE_GPU]),
            product=dict(type="str"),
        )),
        strategy=dict(type="str", choices=["none", "single", "mixed"], default="mixed"),
        namespace=dict(type="str", default="gpu-operator"),
        image=dict(type="str", default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"),
        command=dict(type="list", elements="str", default=["nvidia-smi", "-L"]),
        runtime_class_name=dict(type="str"),
        timeout=dict(type="int", default=300),
    ), names={"namespace": "namespace", "targets[].node": "name"}, numbers={"timeout": {"above": 0}},
        supports_check_mode=True)
    module.run(smoke, node=sorted(set(target["node"] for target in module.params["targets"])))


if __name__ == "__main__":
    main()
