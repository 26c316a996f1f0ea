"""KubeOps (the reconfiguration modules' API layer) against the testbed, under the pinned kubernetes client and
under the last client of the older generation (36.0.0; docs say kubernetes >= 30): KubeOps.request has one
path for each, so both are run and must see the same cluster the same way."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testbed.pytest_cluster import unique_name

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
OLDER_CLIENT = "36.0.0"


@pytest.fixture(scope="session")
def older_client_python():
    """An interpreter with kubernetes==36.0.0, in a venv cached outside the repo keyed by that version."""
    cache = Path(os.environ.get("GPUFLEET_CACHE") or Path.home() / ".cache" / "gpufleet")
    venv = cache / ("kube-client-%s-py%d%d" % ((OLDER_CLIENT,) + sys.version_info[:2]))
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import kubernetes, yaml; assert kubernetes.__version__ == %r" % OLDER_CLIENT]
    if not python.exists() or subprocess.run(check, capture_output=True, check=False).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "kubernetes==%s" % OLDER_CLIENT, "PyYAML"],
                       check=True, timeout=600)
        subprocess.run(check, check=True)
    return python


def exercise(python, testbed, node, namespace, pod):
    proc = subprocess.run([str(python), str(HERE / "kube_ops_exercise.py"), str(REPO_ROOT / ".collections"),
                           str(testbed.kubeconfig), node, namespace, pod],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kube_ops_sees_the_cluster_the_same_under_both_client_generations(testbed, testbed_node, older_client_python):
    node = testbed_node("kube-ops")
    name = node.metadata.name
    testbed.core.patch_node(name, {"metadata": {"labels": {"kube-ops-exercise": name}}})
    namespace = unique_name("kube-ops")
    testbed.kubectl("create", "namespace", namespace)
    testbed.kubectl("create", "configmap", "kube-ops-exercise", "-n", namespace, "--from-literal=key=value")
    testbed.kubectl("create", "poddisruptionbudget", "kube-ops-pdb", "-n", namespace, "--selector=app=x",
                    "--min-available=1")
    pods = {}
    for interpreter in ("pinned", "older"):
        pods[interpreter] = "p-%s" % interpreter
        testbed.kubectl("run", pods[interpreter], "-n", namespace, "--image=busybox", "--restart=Never",
                        "--overrides=%s" % json.dumps({"spec": {"nodeName": name}}))
    try:
        results = {"pinned": exercise(sys.executable, testbed, name, namespace, pods["pinned"]),
                   "older": exercise(older_client_python, testbed, name, namespace, pods["older"])}
        assert results["older"]["client"] == OLDER_CLIENT and results["older"]["new_generator"] is False
        assert results["pinned"]["new_generator"] is True, "the pinned client is the pydantic generation"
        for interpreter, got in results.items():
            # Each run sees the other's pod too (or not, once it was evicted): compare its own.
            assert pods[interpreter] in got.pop("pods_on_node")
            got.pop("client")
            got.pop("new_generator")
        assert results["pinned"] == results["older"]
        got = results["pinned"]
        assert got["node_listed"] and got["node_by_selector"] == [name] and got["get_node"] == name
        assert got["missing_node_status"] == 404 and got["missing_configmap"] is None
        assert got["configmap_data"] == {"key": "value"} and got["pdbs"] == ["kube-ops-pdb"]
        assert got["pod_in_all"] and got["patched_label"] == "yes" and got["label_removed"]
        assert got["watched_label"] == "yes" and got["deadline"] == "reached, last None"
        assert got["log_missing_pod_status"] == 404 and got["evict_missing_pod_status"] == 404
        assert got["delete_missing_pod_status"] == 404 and got["evicted_pod_deleting"]
        assert got["cluster_policies_is_list"]
        # One request per call, counted by verb (the benchmark's API-request figure relies on it).
        assert got["requests"]["watch"] == 2 and got["requests"]["create"] == 2 and got["requests"]["delete"] == 1
    finally:
        testbed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
