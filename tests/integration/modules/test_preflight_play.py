"""The pre-flight play at the top of the playbooks (playbooks/preflight.yml), run as a user runs the playbooks:
an inventory with no GPU host fails the run naming ansible_inventory_sources; an API server that cannot be reached
fails the run at the pre-flight play, before any GPU host is read or anything changes. No testbed cluster needed:
the API server is a bound port that refuses connections."""

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.modules.test_unreachable_api_server import RETRY_ENV, FaultRunner
from tests.integration.reconfigure.conftest import REPO_ROOT, PlaybookResult
from tests.support import playbook as ansible_playbook

PLAYBOOKS = [("mig-reconfigure.yml", {"profile": "all-balanced"}), ("site.yml", {})]


@pytest.fixture(scope="module")
def refused_kubeconfig(tmp_path_factory):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
    path = tmp_path_factory.mktemp("preflight") / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "refused",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:%s" % sock.getsockname()[1],
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "refused", "context": {"cluster": "c", "user": "u"}}]}))
    yield path, sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("playbook,extra", PLAYBOOKS, ids=[p for p, _e in PLAYBOOKS])
def test_an_inventory_without_gpu_nodes_fails_naming_its_sources(refused_kubeconfig, tmp_path, playbook, extra):
    runner = FaultRunner(refused_kubeconfig[0], tmp_path / "ansible")
    run = runner.playbook(REPO_ROOT / playbook, [], extra_vars=extra, timeout=300)
    assert run.rc != 0, run.explain()
    result = run.task("Check that the inventory has hosts in gpu_nodes")
    msg = result.get("msg") or ""
    assert result.get("failed") is True, result
    assert msg.startswith("no host in gpu_nodes of the inventory (ansible_inventory_sources: %s)"
                          % (runner.workdir / "inventory.yml")), msg
    assert "could not be parsed" in msg and "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED" in msg, msg
    assert not run.ran("Check programs, Python packages"), run.explain()


def test_a_gpu_nodes_source_that_could_not_be_parsed_is_named_with_its_reason(refused_kubeconfig, tmp_path):
    """As from the built collection without this checkout's ansible.cfg (an unparsed source is then only a warning):
    the gpu_nodes source's API server refuses, the inventory has no host, and the failure names the source with what
    its API server answers (address, kubeconfig, context), not only that some source could not be parsed."""
    path, port = refused_kubeconfig
    runner = FaultRunner(path, tmp_path / "ansible", extra_env=dict(
        RETRY_ENV, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="false", K8S_AUTH_KUBECONFIG=""))
    source = tmp_path / "fleet.gpu_nodes.yml"
    source.write_text(yaml.safe_dump({"plugin": "gpufleet.gpu_operator.gpu_nodes", "kubeconfig": str(path),
                                      "context": "refused"}))
    proc = ansible_playbook.run(REPO_ROOT / "mig-reconfigure.yml", inventory=source,
                                extra_vars={"profile": "all-balanced"}, env=runner.env(), timeout=300)
    run = PlaybookResult(proc.returncode, proc.stdout, proc.stderr)
    assert run.rc != 0, run.explain()
    msg = run.task("Check that the inventory has hosts in gpu_nodes").get("msg") or ""
    assert "inventory source %s: cannot reach the Kubernetes API server 127.0.0.1:%s (GET /api/v1/nodes" % (
        source, port) in msg, msg
    assert "(kubeconfig %s, context refused, label_selector=None)" % path in msg, msg
    reread = run.task("Read each gpu_nodes inventory source again")["results"][0]
    assert reread["inventory_source"]["gpu_nodes"] is True and reread["inventory_source"]["hosts"] == 0, reread
    assert not reread.get("failed"), reread
    assert not run.ran("Check programs, Python packages"), run.explain()


@pytest.mark.parametrize("playbook,extra", PLAYBOOKS, ids=[p for p, _e in PLAYBOOKS])
def test_an_unreachable_api_server_fails_at_the_preflight_play(refused_kubeconfig, tmp_path, playbook, extra):
    path, port = refused_kubeconfig
    runner = FaultRunner(path, tmp_path / "ansible")
    run = runner.playbook(REPO_ROOT / playbook, ["gpu-preflight-1"], extra_vars=extra, timeout=300)
    assert run.rc != 0, run.explain()
    result = run.task("Check programs, Python packages")
    msg = result.get("msg") or ""
    assert result.get("failed") is True, result
    assert msg.startswith("pre-flight: cannot reach the Kubernetes API server 127.0.0.1:%s (GET /version)" % port), msg
    assert "kubeconfig %s, context refused" % path in msg, msg
    # Before the wait, a line names the kubeconfig and the retry window (here GPUFLEET_API_RETRY_SECONDS's).
    said = run.task("Say which API server is checked")["msg"]
    assert said.startswith("checking the Kubernetes API server with kubeconfig %s" % path), said
    assert said.endswith("retried for up to 2 s (gpufleet_preflight_api_retry_seconds)"), said
    # The run ended there: the plays on the GPU hosts never started.
    assert [play["play"]["name"] for play in run.data["plays"]] == ["Pre-flight - what this playbook needs"], run.explain()


def test_the_report_needs_no_gpu_host_but_a_reachable_api_server(refused_kubeconfig, tmp_path):
    path, port = refused_kubeconfig
    runner = FaultRunner(path, tmp_path / "ansible")
    run = runner.playbook(REPO_ROOT / "report.yml", [], extra_vars={"gpu_report_dir": str(tmp_path / "r")},
                          timeout=300)
    assert run.rc != 0, run.explain()
    assert run.task("Check that the inventory has hosts in gpu_nodes").get("skipped") is True
    msg = run.task("Check programs, Python packages")["msg"]
    assert msg.startswith("pre-flight: cannot reach the Kubernetes API server 127.0.0.1:%s (GET /version)" % port), msg
    assert not (tmp_path / "r").exists()


def test_the_preflight_retry_window_is_its_own_variable(refused_kubeconfig, tmp_path):
    """gpufleet_preflight_api_retry_seconds sets the pre-flight's window (the later tasks keep theirs), whatever
    GPUFLEET_API_RETRY_SECONDS says; the retried call is named with it."""
    path, port = refused_kubeconfig
    runner = FaultRunner(path, tmp_path / "ansible", extra_env={"GPUFLEET_API_RETRY_SECONDS": "30"})
    run = runner.playbook(REPO_ROOT / "mig-reconfigure.yml", ["gpu-preflight-1"],
                          extra_vars={"profile": "all-balanced", "gpufleet_preflight_api_retry_seconds": 1}, timeout=300)
    assert run.rc != 0, run.explain()
    assert run.task("Say which API server is checked")["msg"].endswith("retried for up to 1 s "
                                                                       "(gpufleet_preflight_api_retry_seconds)")
    result = run.task("Check programs, Python packages")
    assert result.get("failed") is True, result
    warnings = " ".join(result.get("warnings") or [])
    assert "(api_retry_seconds=1)" in warnings, result


def test_site_without_helm_stops_at_the_preflight_play_naming_it(refused_kubeconfig, tmp_path):
    """site.yml needs helm on the controller: without it the run stops at the pre-flight play, which names it (with
    the API server it could not reach), before any GPU host is read. Only the operator stage needs it."""
    path, _port = refused_kubeconfig
    no_helm = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    assert shutil.which("helm", path=no_helm) is None
    runner = FaultRunner(path, tmp_path / "ansible", extra_env=dict(RETRY_ENV, PATH=no_helm))
    run = runner.playbook(REPO_ROOT / "site.yml", ["gpu-preflight-1"], timeout=300)
    assert run.rc != 0, run.explain()
    result = run.task("Check programs, Python packages")
    assert result.get("failed") is True and result["missing_executables"] == ["helm"], result
    assert "helm" in result["msg"], result["msg"]
    assert [play["play"]["name"] for play in run.data["plays"]] == ["Pre-flight - what this playbook needs"], run.explain()
    assert {"create namespaces", "create customresourcedefinitions.apiextensions.k8s.io",
            "create pods in namespace gpu-operator"} <= set(result["permissions"]), result["permissions"]
    # A run of the validation stage only installs nothing: neither helm nor the install permissions are asked for
    # (the API server is what stops it).
    proc = ansible_playbook.run(REPO_ROOT / "site.yml", "--tags", "validate", inventory=runner.inventory(["gpu-preflight-1"]),
                                extra_vars={}, env=runner.env(), timeout=300)
    validate = PlaybookResult(proc.returncode, proc.stdout, proc.stderr)
    result = validate.task("Check programs, Python packages")
    assert result.get("failed") is True and result["missing_executables"] == [], result
    assert "helm" not in result["msg"] and "cannot reach the Kubernetes API server" in result["msg"], result["msg"]
    asked = result["permissions"]
    assert "create pods in namespace gpu-operator" in asked and not any(
        p.startswith(("create", "update", "patch")) for p in asked if "pods" not in p), asked
