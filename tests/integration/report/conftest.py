"""Fixtures for the fleet report tests: simulated dcgm-exporter endpoints, a real Prometheus scraping them,
planted nodes and pods, and running report.yml as a user does (ansible-playbook)."""

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.testbed.dcgm.exporter import DcgmSimulator
from tests.testbed.dcgm.prometheus import Prometheus
from tests.support import playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
RUN_LABEL = "test.gpufleet.io/report-run"


@pytest.fixture
def dcgm_sim():
    sim = DcgmSimulator()
    yield sim
    sim.stop()


@pytest.fixture
def prometheus(tmp_path):
    """Factory: prometheus({node: target}) starts a real Prometheus scraping those endpoints; stopped after."""
    started = []

    def start(targets):
        server = Prometheus(tmp_path / ("prometheus-%d" % len(started)), targets).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def report_run(testbed, testbed_namespace):
    """A unique run id, its label selector, a namespace for pods; nodes made with ``node()`` are deleted after."""
    run = uuid.uuid4().hex[:6]
    made = []

    class Run(object):
        id = run
        selector = "%s=%s" % (RUN_LABEL, run)
        namespace = testbed_namespace

        @staticmethod
        def node(hint, labels, gpu_resources):
            name = "rep-%s-%s" % (hint, run)
            resources = dict({"cpu": "32", "memory": "256Gi", "pods": "110"}, **gpu_resources)
            testbed.create_node(name, labels=dict(labels, **{RUN_LABEL: run}), capacity=resources,
                                allocatable=resources)
            made.append(name)
            return name

        @staticmethod
        def pod(name, resources, node=None):
            manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": testbed_namespace},
                        "spec": {"containers": [{"name": "main", "image": "registry.invalid/cuda:latest",
                                                 "resources": {"limits": resources}}],
                                 "tolerations": [{"operator": "Exists"}]}}
            if node:
                manifest["spec"]["nodeName"] = node
            testbed.kubectl("apply", "-f", "-", input=json.dumps(manifest))
            return "%s/%s" % (testbed_namespace, name)

    yield Run
    for name in made:
        testbed.delete_node(name)


def cluster_snapshot(testbed, selector, namespace):
    """What must not change: every planted node's labels, annotations, taints, schedulability and resource
    version, and every pod of the namespace (name, node, phase, resource version)."""
    nodes = {}
    for node in testbed.core.list_node(label_selector=selector).items:
        nodes[node.metadata.name] = (node.metadata.resource_version, node.metadata.labels, node.metadata.annotations,
                                     node.spec.unschedulable, str(node.spec.taints))
    pods = {}
    for pod in testbed.core.list_namespaced_pod(namespace).items:
        pods[pod.metadata.name] = (pod.metadata.resource_version, pod.spec.node_name)
    return {"nodes": nodes, "pods": pods}


def run_report(testbed, workdir, extra_vars, check=False):
    """ansible-playbook report.yml as a user runs it; returns (proc, report dict or None)."""
    out_dir = Path(workdir) / "out"
    variables = dict({"gpu_report_dir": str(out_dir)}, **extra_vars)
    env = playbook.environment(dict(os.environ, **testbed.env))
    proc = playbook.run("report.yml", inventory="localhost,", extra_vars=variables, check=check, env=env)
    path = out_dir / "report.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return proc, report
