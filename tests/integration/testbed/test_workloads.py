# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The testbed behaves like a cluster for the things this collection relies on.

Each test creates its own uniquely named nodes and namespace, so they share one cluster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.testbed.pytest_cluster import unique_name


def _pods(testbed, namespace, selector):
    return testbed.core.list_namespaced_pod(namespace, label_selector=selector).items


def _running(pods):
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def _deployment(name, replicas, node_selector, labels):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    node_selector=node_selector,
                    containers=[client.V1Container(name="main", image="registry.invalid/never-pulled:1")],
                ),
            ),
        ),
    )


@pytest.fixture
def node_label(request):
    """A label key/value pair unique to this test, to pin its workloads to its own nodes."""
    return "gpufleet.test/pool", unique_name(request.node.name[:30])


def test_deployment_pods_run_on_kwok_nodes_and_can_be_deleted(testbed, testbed_namespace, testbed_node, node_label):
    key, value = node_label
    nodes = [testbed_node("deploy", labels={key: value}).metadata.name for dummy in range(2)]
    apps = client.AppsV1Api(testbed.api_client())
    labels = {"app": "sleeper"}
    apps.create_namespaced_deployment(testbed_namespace, _deployment("sleeper", 4, {key: value}, labels))

    def four_running():
        running = _running(_pods(testbed, testbed_namespace, "app=sleeper"))
        return running if len(running) == 4 else None

    pods = testbed.wait_for(four_running, 60, "4 sleeper pods Running")
    assert {p.spec.node_name for p in pods} <= set(nodes)
    assert all(p.status.pod_ip for p in pods), "kwok gives Running pods an IP"

    victim = pods[0].spec.node_name
    on_victim = {p.metadata.uid for p in pods if p.spec.node_name == victim}
    testbed.kubectl("delete", "pods", "-n", testbed_namespace, "--field-selector", "spec.nodeName=%s" % victim,
                    "--wait=true", "--timeout=60s")
    remaining = {p.metadata.uid for p in _pods(testbed, testbed_namespace, "app=sleeper")}
    assert not on_victim & remaining, "deleted pods are gone from the API"
    # The Deployment replaces them; the replacements reach Running as well.
    testbed.wait_for(
        lambda: len([p for p in _running(_pods(testbed, testbed_namespace, "app=sleeper"))
                     if p.metadata.uid not in on_victim]) == 4,
        60, "4 Running sleeper pods after the deletion")


def test_daemonset_follows_node_selector_label(testbed, testbed_namespace, testbed_node, node_label):
    key, value = node_label
    matching = [testbed_node("ds-on", labels={key: value}).metadata.name for dummy in range(2)]
    other = testbed_node("ds-off", labels={key: "elsewhere"}).metadata.name
    apps = client.AppsV1Api(testbed.api_client())
    labels = {"app": "agent"}
    apps.create_namespaced_daemon_set(testbed_namespace, client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="agent"),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(node_selector={key: value},
                                      containers=[client.V1Container(name="agent", image="registry.invalid/agent:1")]),
            ),
        ),
    ))

    def pods_by_node():
        return {p.spec.node_name for p in _running(_pods(testbed, testbed_namespace, "app=agent"))}

    testbed.wait_for(lambda: pods_by_node() == set(matching), 60, "one agent pod on each matching node")

    # The GPU Operator's pause protocol: flipping the label removes the DaemonSet pod from that node.
    testbed.core.patch_node(matching[0], {"metadata": {"labels": {key: "paused"}}})
    testbed.wait_for(lambda: {p.spec.node_name for p in _pods(testbed, testbed_namespace, "app=agent")}
                     == {matching[1]}, 60, "agent pod removed from %s after its label changed" % matching[0])

    testbed.core.patch_node(other, {"metadata": {"labels": {key: value}}})
    testbed.wait_for(lambda: pods_by_node() == {matching[1], other}, 60, "agent pod placed on newly labelled node")


def test_eviction_api_respects_pod_disruption_budget(testbed, testbed_namespace, testbed_node, node_label):
    key, value = node_label
    testbed_node("evict", labels={key: value})
    apps = client.AppsV1Api(testbed.api_client())
    policy = client.PolicyV1Api(testbed.api_client())
    labels = {"app": "guarded"}
    apps.create_namespaced_deployment(testbed_namespace, _deployment("guarded", 2, {key: value}, labels))
    policy.create_namespaced_pod_disruption_budget(testbed_namespace, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="guarded"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=2, selector=client.V1LabelSelector(match_labels=labels)),
    ))

    def budget(allowed):
        pdb = policy.read_namespaced_pod_disruption_budget("guarded", testbed_namespace)
        s = pdb.status
        return (s is not None and s.observed_generation == pdb.metadata.generation and s.current_healthy == 2
                and s.disruptions_allowed == allowed)

    testbed.wait_for(lambda: budget(0), 60, "PDB guarded with 2 healthy pods and disruptionsAllowed 0")
    victim = _running(_pods(testbed, testbed_namespace, "app=guarded"))[0].metadata.name
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=testbed_namespace))
    with pytest.raises(ApiException) as refused:
        testbed.core.create_namespaced_pod_eviction(victim, testbed_namespace, eviction)
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in refused.value.body
    assert testbed.core.read_namespaced_pod(victim, testbed_namespace).metadata.deletion_timestamp is None

    policy.patch_namespaced_pod_disruption_budget("guarded", testbed_namespace, {"spec": {"minAvailable": 1}})
    testbed.wait_for(lambda: budget(1), 60, "PDB guarded with disruptionsAllowed 1")
    testbed.core.create_namespaced_pod_eviction(victim, testbed_namespace, eviction)

    def evicted():
        try:
            testbed.core.read_namespaced_pod(victim, testbed_namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    testbed.wait_for(evicted, 60, "evicted pod %s to be removed" % victim)


def test_rbac_is_enforced_for_serviceaccount_tokens(testbed, testbed_namespace):
    kubeconfig = testbed.serviceaccount_kubeconfig(testbed_namespace, "reader")
    reader = client.CoreV1Api(testbed.api_client(kubeconfig))
    with pytest.raises(ApiException) as denied:
        reader.list_namespaced_pod(testbed_namespace)
    assert denied.value.status == 403
    assert "system:serviceaccount:%s:reader" % testbed_namespace in denied.value.body

    rbac = client.RbacAuthorizationV1Api(testbed.api_client())
    rbac.create_namespaced_role(testbed_namespace, client.V1Role(
        metadata=client.V1ObjectMeta(name="pod-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
    ))
    rbac.create_namespaced_role_binding(testbed_namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="reader-reads-pods"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=testbed_namespace)],
    ))
    pods = testbed.wait_for(lambda: reader.list_namespaced_pod(testbed_namespace), 30, "RoleBinding to take effect")
    assert pods.items == []
    # The Role covers pods only, and only this namespace.
    with pytest.raises(ApiException) as still_denied:
        reader.list_node()
    assert still_denied.value.status == 403
    # The admin kubeconfig stays cluster-admin (client cert in group system:masters).
    assert testbed.kubectl("auth", "can-i", "*", "*", "--all-namespaces").stdout.strip() == "yes"


def test_helm_installs_and_upgrades_a_local_chart(testbed, testbed_namespace, tmp_path):
    chart = tmp_path / "hello"
    (chart / "templates").mkdir(parents=True)
    # kubeVersion is checked against the server's gitVersion, which build.sh stamps (reference §1.4).
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: hello\nversion: 0.1.0\nappVersion: '1.0'\nkubeVersion: '>= 1.30.0-0'\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n")

    testbed.helm("install", "hello", str(chart), "-n", testbed_namespace, "--wait", "--timeout", "60s")
    assert testbed.core.read_namespaced_config_map("hello-greeting", testbed_namespace).data == {"greeting": "hello"}

    testbed.helm("upgrade", "hello", str(chart), "-n", testbed_namespace, "--set", "greeting=bonjour", "--wait")
    assert testbed.core.read_namespaced_config_map("hello-greeting", testbed_namespace).data == {"greeting": "bonjour"}

    releases = json.loads(testbed.helm("list", "-n", testbed_namespace, "-o", "json").stdout)
    assert [(r["name"], r["revision"], r["status"], r["chart"]) for r in releases] == \
        [("hello", "2", "deployed", "hello-0.1.0")]
    status = json.loads(testbed.helm("status", "hello", "-n", testbed_namespace, "-o", "json").stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"


def test_watch_on_nodes_sees_label_change(testbed, testbed_node):
    name = testbed_node("watched").metadata.name
    start = testbed.core.list_node(field_selector="metadata.name=%s" % name).metadata.resource_version
    seen = {}

    def consume():
        w = watch.Watch()
        for event in w.stream(testbed.core.list_node, field_selector="metadata.name=%s" % name,
                              resource_version=start, timeout_seconds=30):
            labels = event["object"].metadata.labels or {}
            if event["type"] == "MODIFIED" and labels.get("gpufleet.test/watched") == "yes":
                seen["event"] = event
                w.stop()

    watcher = threading.Thread(target=consume, daemon=True)
    watcher.start()
    testbed.core.patch_node(name, {"metadata": {"labels": {"gpufleet.test/watched": "yes"}}})
    watcher.join(35)
    assert "event" in seen, "the watch delivered the label change"


def test_scheduler_accounts_for_gpu_allocatable(testbed, testbed_namespace, testbed_node, node_label):
    """Nodes made with allocatable nvidia.com/gpu get real extended-resource scheduling."""
    key, value = node_label
    node = testbed_node("gpu", labels={key: value}, allocatable={"nvidia.com/gpu": "8"}).metadata.name
    assert testbed.core.read_node(node).status.capacity["nvidia.com/gpu"] == "8"

    def gpu_pod(name, count):
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodSpec(node_selector={key: value}, containers=[client.V1Container(
                name="cuda", image="registry.invalid/cuda:1",
                resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(count)}))]),
        )

    testbed.core.create_namespaced_pod(testbed_namespace, gpu_pod("takes-six", 6))
    testbed.wait_for(lambda: testbed.core.read_namespaced_pod("takes-six", testbed_namespace).status.phase == "Running",
                     60, "pod takes-six Running on %s" % node)
    testbed.core.create_namespaced_pod(testbed_namespace, gpu_pod("wants-four", 4))

    def unschedulable():
        conditions = testbed.core.read_namespaced_pod("wants-four", testbed_namespace).status.conditions or []
        return [c for c in conditions if c.type == "PodScheduled" and c.status == "False"
                and "nvidia.com/gpu" in (c.message or "")]

    testbed.wait_for(unschedulable, 60, "pod wants-four Pending for lack of nvidia.com/gpu")
    assert testbed.core.read_namespaced_pod("wants-four", testbed_namespace).spec.node_name is None
