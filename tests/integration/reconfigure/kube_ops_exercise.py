"""Run every KubeOps call once against a cluster with whatever kubernetes client this interpreter has, and print
what came back as JSON. Used by test_kube_ops_clients.py under the pinned client and an older one, because
KubeOps.request has a path for each client generation (param_serialize in kubernetes >= 37, the legacy call_api
before). Usage: python kube_ops_exercise.py COLLECTIONS_DIR KUBECONFIG NODE NAMESPACE POD
"""

import json
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])

import kubernetes  # noqa: E402
from kubernetes import config as kube_config  # noqa: E402

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import (  # noqa: E402
    ApiException,
    DeadlineExceeded,
    KubeOps,
)


def status_of(call):
    try:
        call()
    except ApiException as exc:
        return exc.status
    return "no error"


def main():
    kubeconfig, node_name, namespace, pod = sys.argv[2:6]
    ops = KubeOps(kube_config.new_client_from_config(kubeconfig))
    out = {"client": kubernetes.__version__, "new_generator": hasattr(ops.api_client, "param_serialize")}
    out["node_listed"] = node_name in [n["metadata"]["name"] for n in ops.list_nodes()["items"]]
    out["node_by_selector"] = [n["metadata"]["name"] for n in
                               ops.list_nodes(label_selector="kube-ops-exercise=%s" % node_name)["items"]]
    out["get_node"] = ops.get_node(node_name)["metadata"]["name"]
    out["missing_node_status"] = status_of(lambda: ops.get_node(node_name + "-missing"))
    out["missing_configmap"] = ops.get_configmap(namespace, "kube-ops-exercise-missing")
    out["configmap_data"] = (ops.get_configmap(namespace, "kube-ops-exercise") or {}).get("data")
    out["pods_on_node"] = sorted(p["metadata"]["name"] for p in ops.list_pods_on_node(node_name)["items"])
    out["pod_in_all"] = pod in [p["metadata"]["name"] for p in ops.list_pods()["items"]]
    out["pdbs"] = [b["metadata"]["name"] for b in ops.list_pdbs(namespace)["items"]]
    out["patched_label"] = ops.patch_node(node_name, {"metadata": {"labels": {"kube-ops-patched": "yes"}}})[
        "metadata"]["labels"].get("kube-ops-patched")
    out["label_removed"] = "kube-ops-patched" not in ops.patch_node(
        node_name, {"metadata": {"labels": {"kube-ops-patched": None}}})["metadata"]["labels"]
    # A watch that sees a change made while it waits, then one that runs into its deadline.
    timer = threading.Timer(1.0, ops.patch_node, (node_name, {"metadata": {"labels": {"kube-ops-watched": "yes"}}}))
    timer.start()
    seen = ops.watch_node(node_name, time.monotonic() + 30,
                          lambda n: (n["metadata"].get("labels") or {}).get("kube-ops-watched") == "yes",
                          ops.get_node(node_name))
    timer.join()
    out["watched_label"] = seen["metadata"]["labels"]["kube-ops-watched"]
    ops.patch_node(node_name, {"metadata": {"labels": {"kube-ops-watched": None}}})
    try:
        ops.watch_node(node_name, time.monotonic() + 2, lambda n: False, ops.get_node(node_name))
        out["deadline"] = "not reached"
    except DeadlineExceeded as exc:
        out["deadline"] = "reached, last %s" % ((exc.last or {}).get("metadata") or {}).get("name")
    out["log_missing_pod_status"] = status_of(lambda: ops.pod_log(namespace, pod + "-missing"))
    out["evict_missing_pod_status"] = status_of(lambda: ops.evict(namespace, pod + "-missing"))
    out["delete_missing_pod_status"] = status_of(lambda: ops.delete_pod(namespace, pod + "-missing", 0))
    ops.evict(namespace, pod, grace_period_seconds=0)
    out["evicted_pod_deleting"] = bool(
        [p for p in ops.list_pods_on_node(node_name)["items"]
         if p["metadata"]["name"] == pod and p["metadata"].get("deletionTimestamp")]
        or pod not in [p["metadata"]["name"] for p in ops.list_pods_on_node(node_name)["items"]])
    out["cluster_policies_is_list"] = isinstance(ops.list_cluster_policies(), list)
    out["requests"] = ops.counter.by_verb
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
