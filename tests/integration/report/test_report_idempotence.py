"""report.yml as a user runs it, on what a report run must get right besides the findings:

- a second run over an unchanged cluster reports no change and leaves report.json and report.html as they are
  (their generated_at says when the content was first seen), while a change in the fleet rewrites them; the report
  reads the pods of the whole cluster, so this runs on a cluster of its own that no other test changes;
- a cluster read through a context without GPU nodes is not a clean report: an Ansible warning and an `empty`
  finding in the table name the kubeconfig and the context;
- a bad gpu_report_dir fails naming the path before the API server is contacted at all (a listening socket that
  counts connections stands in for it).
"""

import json
import os
import re
import socket
import threading
import time

import pytest
import yaml

from tests.testbed.cluster import Cluster, TestbedError
from tests.testbed.pytest_cluster import Testbed

from .conftest import RUN_LABEL, run_report


def recap(proc):
    """{'ok': n, 'changed': n, 'failed': n, ...} of localhost from the PLAY RECAP."""
    line = re.search(r"^localhost\s*:\s*(.*)$", proc.stdout, re.M)
    assert line, proc.stdout[-3000:]
    return dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1)))


def planted_labels(state):
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "1", "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": state,
            "nvidia.com/mig-1g.10gb.count": "7"}


def files_of(out_dir):
    return dict((name, ((out_dir / name).read_bytes(), (out_dir / name).stat().st_mtime_ns))
                for name in ("report.json", "report.html"))


@pytest.fixture
def quiet_cluster(testbed, tmp_path):
    """A testbed cluster of this test alone (same binaries as the session's), stopped after."""
    cluster = Cluster(name="report-quiet-%d" % os.getpid(), directory=tmp_path / "cluster", bin_dir=testbed.bin_dir)
    try:
        cluster.up(timeout=120)
    except TestbedError as exc:
        cluster.down()
        pytest.fail("the report test's own cluster did not start: %s" % exc, pytrace=False)
    try:
        yield Testbed(cluster.kubeconfig, cluster.bin_dir, tmp_path / "bed", cluster=cluster)
    finally:
        cluster.down()


def test_a_second_run_over_an_unchanged_cluster_changes_nothing(quiet_cluster, tmp_path):
    testbed = quiet_cluster
    # A node stuck in pending: its report has the time-dependent parts (state_seconds, a stuck finding's seconds).
    node = "rep-idem"
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7"}
    testbed.create_node(node, labels=dict(planted_labels("pending"), **{RUN_LABEL: "idem"}), capacity=resources,
                        allocatable=resources)
    settings = {"gpu_report_label_selector": "%s=idem" % RUN_LABEL, "gpu_report_stuck_after": 0}
    out_dir = tmp_path / "out"

    first, report = run_report(testbed, tmp_path, settings)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert [n["name"] for n in report["nodes"]] == [node]
    assert [f["kind"] for f in report["findings"]] == ["stuck"]
    assert recap(first)["changed"] == 3, "the directory, report.json and report.html are new: %s" % recap(first)
    written = files_of(out_dir)

    time.sleep(1.5)  # a new generated_at, state_seconds and stuck age
    second, _report = run_report(testbed, tmp_path, settings)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    assert recap(second)["changed"] == 0, second.stdout[-4000:]
    assert files_of(out_dir) == written, "an unchanged fleet rewrote the files"
    # The run still shows its own time in the table; the file keeps the time its content was first seen.
    assert "GPU fleet report %s" % report["generated_at"] not in second.stdout
    assert json.loads((out_dir / "report.json").read_text())["generated_at"] == report["generated_at"]

    # The fleet changes (the node's MIG state): both files are written anew.
    testbed.kubectl("label", "node", node, "nvidia.com/mig.config.state=success", "--overwrite")
    third, changed = run_report(testbed, tmp_path, settings)
    assert third.returncode == 0, third.stdout[-4000:]
    assert recap(third)["changed"] == 2, third.stdout[-4000:]
    assert changed["nodes"][0]["mig_config_state"] == "success" and changed["generated_at"] != report["generated_at"]
    assert changed["generated_at"] in (out_dir / "report.html").read_text()


def kubeconfig_with_context(testbed, tmp_path, name):
    """A copy of the testbed's kubeconfig whose current context is the testbed's, plus one more named ``name``
    for the same cluster (as a user's kubeconfig holds several)."""
    config = yaml.safe_load(open(testbed.kubeconfig).read())
    extra = dict(config["contexts"][0], name=name)
    config["contexts"].append(extra)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, config["current-context"]


def test_a_context_without_gpu_nodes_warns_naming_the_context_and_kubeconfig(testbed, report_run, tmp_path):
    # What the selected context shows: a node, but no GPU node.
    report_run.node("cpu", {"kubernetes.io/os": "linux"}, {})
    kubeconfig, current = kubeconfig_with_context(testbed, tmp_path, "wrong-ctx")

    proc, report = run_report(testbed, tmp_path / "named", {
        "gpu_report_label_selector": report_run.selector, "gpu_report_kubeconfig": str(kubeconfig),
        "gpu_report_context": "wrong-ctx"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    output = " ".join((proc.stdout + proc.stderr).split())
    where = "no GPU nodes in context wrong-ctx of kubeconfig %s (API server 127.0.0.1:" % kubeconfig
    assert "[WARNING]: %s" % where in output, output[-4000:]
    assert "1 node matching label selector %s, none with GPU labels" % report_run.selector in output
    assert "No findings." not in proc.stdout
    assert "[W] empty" in proc.stdout and "cluster: %s" % where in output, "the table does not show the warning"
    assert [(f["kind"], f["severity"]) for f in report["findings"]] == [("empty", "warning")]
    assert report["findings"][0]["details"]["context"] == "wrong-ctx"
    assert report["findings"][0]["details"]["kubeconfig"] == str(kubeconfig)

    # No context given: the kubeconfig's current one is named.
    proc, report = run_report(testbed, tmp_path / "current", {
        "gpu_report_label_selector": report_run.selector, "gpu_report_kubeconfig": str(kubeconfig)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["findings"][0]["message"].startswith("no GPU nodes in context %s of kubeconfig %s" % (current, kubeconfig))

    # gpu_report_fail_on: [empty] makes it a failed run (for CI that must not pass on the wrong cluster).
    proc, _report = run_report(testbed, tmp_path / "fail", {
        "gpu_report_label_selector": report_run.selector, "gpu_report_kubeconfig": str(kubeconfig),
        "gpu_report_fail_on": ["empty"]})
    assert proc.returncode != 0 and "no GPU nodes in context" in proc.stdout, proc.stdout[-3000:]


class CountingServer(object):
    """A listening socket on 127.0.0.1 that counts the connections made to it (and closes them)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def counting_api(tmp_path):
    server = CountingServer()
    path = tmp_path / "counting-kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "counted",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:%d" % server.port,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "counted", "context": {"cluster": "c", "user": "u"}}]}))
    yield server, path
    server.close()


class _NoCluster(object):
    """run_report's testbed argument without a testbed: only the environment, pointing at the counting server."""

    def __init__(self, kubeconfig):
        self.env = {"KUBECONFIG": str(kubeconfig), "K8S_AUTH_KUBECONFIG": str(kubeconfig)}


@pytest.mark.parametrize("case", ["file", "under-a-file"])
def test_a_bad_report_directory_fails_naming_it_before_any_api_call(counting_api, tmp_path, case):
    server, kubeconfig = counting_api
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    if case == "file":
        path, expected = blocker, "pre-flight: gpu_report_dir %s is a file, not a directory" % blocker
    else:
        path = blocker / "reports"
        expected = "pre-flight: gpu_report_dir %s cannot be created: %s is a file" % (path, blocker)
    proc, report = run_report(_NoCluster(kubeconfig), tmp_path / "run", {"gpu_report_dir": str(path)})
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, output[-3000:]
    assert expected in output, output[-3000:]
    assert report is None
    assert server.connections == 0, "the API server was contacted before the directory was checked"
    assert "Pre-flight" not in proc.stdout, "the pre-flight play ran"
