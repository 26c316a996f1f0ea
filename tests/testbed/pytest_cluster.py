# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures for the testbed cluster (see docs/DEVELOPING.md and docs/testbed.md).

``testbed`` (session): a real kube-apiserver + etcd + controller-manager + scheduler with kwok nodes,
started once per session by tests/testbed/cluster.py and stopped at the end, or an already running
cluster when GPUFLEET_TESTBED_KUBECONFIG names its kubeconfig (then nothing is started or stopped).
``testbed_namespace`` (function): a fresh namespace named after the test, deleted afterwards.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.testbed.cluster import Cluster, TestbedError, default_bin_dir

REUSE_ENV = "GPUFLEET_TESTBED_KUBECONFIG"
# kwok's documented selector for nodes it manages; kwokctl's binary runtime manages all nodes
# (--manage-all-nodes=true), the annotation keeps our nodes managed under either setting.
KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# Room for many pods; a node without "pods" in allocatable can take none.
DEFAULT_NODE_RESOURCES = {"cpu": "32", "memory": "256Gi", "pods": "110"}
# Taints the control plane puts on a node until it reports Ready (TaintNodesByCondition).
TRANSIENT_TAINT_PREFIX = "node.kubernetes.io/"
# Start times reported at the end of the run (docs/testbed.md tracks the warm-start figure).
_SESSION_NOTES = []


def unique_name(hint, limit=63):
    """A DNS-1123 label built from ``hint`` with a random suffix, so tests can share one cluster."""
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-") or "t"
    suffix = uuid.uuid4().hex[:6]
    return "%s-%s" % (base[: limit - len(suffix) - 1].rstrip("-"), suffix)


class Testbed:
    """Handle on a running testbed cluster: clients, CLIs and node helpers."""

    __test__ = False

    def __init__(self, kubeconfig, bin_dir, workdir, cluster=None):
        self.kubeconfig = str(kubeconfig)
        self.bin_dir = Path(bin_dir)
        self.workdir = Path(workdir)
        self.cluster = cluster
        self.start_seconds = None
        helm_home = self.workdir / "helm"
        self.env = dict(
            os.environ,
            KUBECONFIG=self.kubeconfig,
            K8S_AUTH_KUBECONFIG=self.kubeconfig,
            PATH="%s%s%s" % (self.bin_dir, os.pathsep, os.environ.get("PATH", "")),
            # helm keeps its repo cache/config here instead of the user's home
            HELM_CACHE_HOME=str(helm_home / "cache"),
            HELM_CONFIG_HOME=str(helm_home / "config"),
            HELM_DATA_HOME=str(helm_home / "data"),
        )

    # -- CLIs ------------------------------------------------------------------------------
    def _run(self, binary, args, check, timeout, input_text):
        cmd = [str(self.bin_dir / binary), *map(str, args)]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, input=input_text,
                              check=False)
        if check and proc.returncode != 0:
            raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                                 % (" ".join(cmd), proc.returncode, proc.stdout, proc.stderr))
        return proc

    def kubectl(self, *args, check=True, timeout=120, input=None):  # pylint: disable=redefined-builtin
        """Run the testbed's kubectl against this cluster; returns CompletedProcess (text)."""
        return self._run("kubectl", args, check, timeout, input)

    def helm(self, *args, check=True, timeout=300, input=None):  # pylint: disable=redefined-builtin
        """Run the testbed's helm against this cluster; returns CompletedProcess (text)."""
        return self._run("helm", args, check, timeout, input)

    # -- API -------------------------------------------------------------------------------
    def api_client(self, kubeconfig=None):
        """A new kubernetes.client.ApiClient (admin unless another kubeconfig is given)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    @property
    def core(self):
        from kubernetes import client

        if not hasattr(self, "_core"):
            self._core = client.CoreV1Api(self.api_client())
        return self._core

    def wait_for(self, predicate, timeout=60, what="condition", interval=0.2):
        """Poll ``predicate`` until it returns something truthy (returned); an exception is kept polling through."""
        return wait_until(predicate, timeout, what, interval, tolerate=Exception)

    # -- namespaces ------------------------------------------------------------------------
    def create_namespace(self, hint):
        """Create a uniquely named namespace (from ``hint``) and return its name."""
        from kubernetes import client

        name = unique_name(hint)
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def delete_namespace(self, name):
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # -- nodes -----------------------------------------------------------------------------
    def create_node(self, name, labels=None, capacity=None, allocatable=None, taints=None, annotations=None,
                    timeout=60):
        """Create a kwok-managed Node and wait until it is Ready and schedulable; return the V1Node.

        Resources not given default to DEFAULT_NODE_RESOURCES; capacity defaults to allocatable and
        vice versa, e.g. ``allocatable={"nvidia.com/gpu": "8"}`` gives an 8-GPU node. ``taints`` is a
        list of dicts ``{"key", "value", "effect"}``; without it the node has no taints, so DaemonSets
        place pods on it.
        """
        from kubernetes import client

        cap = {k: str(v) for k, v in {**DEFAULT_NODE_RESOURCES, **(allocatable or {}), **(capacity or {})}.items()}
        alloc = {k: str(v) for k, v in {**DEFAULT_NODE_RESOURCES, **(capacity or {}), **(allocatable or {})}.items()}
        wanted_taints = [client.V1Taint(key=t["key"], value=t.get("value"), effect=t["effect"]) for t in taints or []]
        body = client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels=dict(labels or {}),
                                         annotations={**KWOK_NODE_ANNOTATION, **(annotations or {})}),
            spec=client.V1NodeSpec(taints=wanted_taints or None),
            status=client.V1NodeStatus(capacity=cap, allocatable=alloc),
        )
        self.core.create_node(body)
        node = self.core.read_node(name)
        if (node.status.allocatable or {}) != alloc or (node.status.capacity or {}) != cap:
            self.core.patch_node_status(name, {"status": {"capacity": cap, "allocatable": alloc}})
        wanted_keys = {(t.key, t.effect) for t in wanted_taints}

        def ready():
            n = self.core.read_node(name)
            conditions = {c.type: c.status for c in n.status.conditions or []}
            transient = [t for t in n.spec.taints or []
                         if t.key.startswith(TRANSIENT_TAINT_PREFIX) and (t.key, t.effect) not in wanted_keys]
            alloc_now = n.status.allocatable or {}
            if conditions.get("Ready") == "True" and not transient and all(alloc_now.get(k) == v for k, v in alloc.items()):
                return n
            return None

        return self.wait_for(ready, timeout, "node %s to be Ready without not-ready taints" % name)

    def delete_node(self, name, timeout=60):
        """Delete a Node and wait until it is gone."""
        from kubernetes.client.rest import ApiException

        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

        def gone():
            try:
                self.core.read_node(name)
            except ApiException as exc:
                return exc.status == 404
            return False

        self.wait_for(gone, timeout, "node %s to be deleted" % name)

    # -- least privilege -------------------------------------------------------------------
    def serviceaccount_kubeconfig(self, namespace, name, expiration_seconds=3600):
        """Kubeconfig file that authenticates as ServiceAccount namespace/name (created if absent).

        The token comes from the TokenRequest API, so it carries exactly the RBAC rights bound to the
        ServiceAccount; use it to prove a module works under least privilege.
        """
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as exc:
            if exc.status != 409:
                raise
        token = self.core.create_namespaced_service_account_token(
            name, namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                audiences=[], expiration_seconds=expiration_seconds)),
        ).status.token
        admin = yaml.safe_load(Path(self.kubeconfig).read_text())
        context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
        user = "system:serviceaccount:%s:%s" % (namespace, name)
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user, "namespace": namespace}}],
            "current-context": user,
        }
        path = self.workdir / "serviceaccounts" / ("%s-%s.kubeconfig" % (namespace, name))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path


def wait_until(predicate, timeout=60, what="condition", interval=0.2, tolerate=()):
    """Poll ``predicate`` every ``interval`` s until it returns something truthy, and return that; after ``timeout`` s
    fail naming ``what`` and the last result. Exceptions of the ``tolerate`` classes count as a falsy result."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except tolerate as exc:  # pylint: disable=broad-except  # the caller chose to poll through these
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %ss waiting for %s (last result: %r)" % (timeout, what, last))
        time.sleep(interval)


def pytest_terminal_summary(terminalreporter):
    for note in _SESSION_NOTES:
        terminalreporter.write_line(note)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory):
    """The session's testbed cluster (see module docstring). Fails, never skips, if it cannot start."""
    workdir = tmp_path_factory.mktemp("testbed")
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        kubeconfig = Path(reuse).resolve()
        bed = Testbed(kubeconfig, default_bin_dir(), workdir)
        # A cluster from `make testbed-up` (<dir>/kubeconfig + <dir>/kwok/clusters/<name>): attach it for
        # status/ports, but never stop it.
        clusters = sorted((kubeconfig.parent / "kwok" / "clusters").glob("*/kwok.yaml"))
        if len(clusters) == 1:
            bed.cluster = Cluster(clusters[0].parent.name, kubeconfig.parent, bed.bin_dir)
        bed.kubectl("get", "--raw", "/readyz", timeout=30)  # fail fast when the named cluster is not there
        yield bed
        return
    cluster = Cluster(name="pytest-%d" % os.getpid(), directory=workdir / "cluster")
    try:
        seconds = cluster.up()
    except TestbedError as exc:
        pytest.fail("testbed cluster did not start: %s" % exc, pytrace=False)
    cluster.start_reaper(os.getpid())  # stops the cluster even if this run is killed
    bed = Testbed(cluster.kubeconfig, cluster.bin_dir, workdir, cluster=cluster)
    bed.start_seconds = seconds
    _SESSION_NOTES.append("testbed cluster %s started in %.1fs (%.1fs waiting for another start)"
                          % (cluster.name, seconds, cluster.lock_wait_seconds))
    try:
        yield bed
    finally:
        cluster.down()


@pytest.fixture
def testbed_namespace(testbed, request):
    """A namespace for this test only (name derived from the test's name), deleted afterwards."""
    name = testbed.create_namespace(request.node.name[:40])
    yield name
    testbed.delete_namespace(name)


@pytest.fixture
def testbed_node(testbed):
    """Factory: ``testbed_node(hint, **create_node_kwargs)`` makes a uniquely named kwok node, deleted afterwards."""
    created = []

    def make(hint="node", **kwargs):
        name = unique_name(hint)
        created.append(name)
        return testbed.create_node(name, **kwargs)

    yield make
    for name in created:
        testbed.delete_node(name)
