"""A cluster of its own for the operator tests, with simulated GPU nodes, agents and the smoke runtime.

ClusterPolicy ``cluster-policy`` and the ``gpu-operator`` release are cluster singletons that these
tests install, upgrade, patch and break on purpose; a dedicated testbed cluster (same Cluster class
as the session ``testbed``) keeps that away from tests that share the session cluster's operator.
Playbooks run as users run them: ``ansible-playbook`` subprocesses with the testbed's helm on PATH.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.testbed import operator as real_operator
from tests.testbed.agents.pytest_agents import GpuAgents, nvml_lib_dir
from tests.testbed.cluster import Cluster, TestbedError
from tests.testbed.pytest_cluster import Testbed
from tests.support import playbook as ansible_playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
# Small nodes keep the smoke pods few: (name, NVML model, GPUs)
NODES = (("op-h100", "NVIDIA H100 80GB HBM3", 2), ("op-a100", "NVIDIA A100-SXM4-40GB", 2), ("op-h200", "NVIDIA H200", 1))


class PlaybookResult:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.data = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError:
            self.data = {"plays": [], "stats": {}}

    @property
    def changed(self):
        return sum(stats.get("changed", 0) for stats in self.data.get("stats", {}).values())

    def task_results(self, name):
        """[(host, result)] of every task whose name contains ``name``."""
        found = []
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                if name in task["task"]["name"]:
                    found.extend(task["hosts"].items())
        return found

    def failure_messages(self):
        return [result.get("msg", "") for play in self.data.get("plays", []) for task in play.get("tasks", [])
                for result in task["hosts"].values() if result.get("failed")]

    def table(self):
        results = self.task_results("Print the validation table")
        if not results:
            return []
        lines = results[0][1]["msg"]
        assert isinstance(lines, list), lines  # one line per item: readable under every callback
        return lines

    def __repr__(self):
        return "rc=%s failures=%s\nstderr=%s" % (self.rc, self.failure_messages(), self.stderr[-2000:])


class OperatorSandbox:
    def __init__(self, bed, agents, inventory):
        self.bed = bed
        self.agents = agents
        self.inventory = inventory

    def playbook(self, playbook, *args, extra_vars=None, timeout=600):
        if extra_vars:  # a file: the values can be larger than a command line takes
            path = self.inventory.parent / ("extra-%d.json" % time.monotonic_ns())
            path.write_text(json.dumps(extra_vars))
            args += ("-e", "@%s" % path)
        env = dict(self.bed.env, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                   ANSIBLE_NOCOLOR="1")
        return PlaybookResult(ansible_playbook.run(playbook, *args, inventory=self.inventory, env=env, timeout=timeout))

    def site(self, *args, **kwargs):
        return self.playbook(REPO_ROOT / "site.yml", *args, **kwargs)

    def policy(self):
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            return client.CustomObjectsApi(self.bed.api_client()).get_cluster_custom_object(
                "nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def releases(self):
        proc = self.bed.helm("list", "--all-namespaces", "--all", "-o", "json")
        return json.loads(proc.stdout or "[]")

    def namespace_exists(self, name):
        return self.bed.kubectl("get", "namespace", name, check=False).returncode == 0


def _write_inventory(directory, bed, agents, lib_dir, release):
    directory.mkdir(parents=True, exist_ok=True)
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": dict(
        (name, {"gpu_model": model, "gpu_validate_host_environment": {
            "LD_LIBRARY_PATH": str(lib_dir), "GPUFLEET_SIM_NVML_STATE": str(agents.state_path(name))}})
        for name, model, _count in NODES)}}}}
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_kubeconfig": str(bed.kubeconfig),
        # NVIDIA's chart the testbed builds for ``release``; NFD cannot run under kwok (the nodes carry its labels
        # instead).
        "gpu_operator_chart_ref": str(real_operator.chart_dir(release)),
        "gpu_operator_extra_values": {"nfd": {"enabled": False}},
        "gpu_operator_chart_version": "",
        "gpu_operator_repo_add": False,
        "gpu_operator_mig_strategy": "single",
        "gpu_operator_wait_timeout": 120,
        "gpu_validate_smoke_timeout": 60,
    }))
    return directory


@pytest.fixture(scope="module")
def operator_sandbox(tmp_path_factory, request):
    """The sandbox for one test module. A module may set SANDBOX_RELEASE (the chart its inventory installs, default
    tests/testbed/operator.py DEFAULT_RELEASE) and SANDBOX_MIG_MANAGER (nvidia or sim, GpuAgents' default if unset)."""
    release = getattr(request.module, "SANDBOX_RELEASE", None) or real_operator.DEFAULT_RELEASE
    workdir = tmp_path_factory.mktemp("operator")
    cluster = Cluster(name="operator-%d" % os.getpid(), directory=workdir / "cluster")
    try:
        cluster.up()
    except TestbedError as exc:
        pytest.fail("operator testbed cluster did not start: %s" % exc, pytrace=False)
    bed = Testbed(cluster.kubeconfig, cluster.bin_dir, workdir, cluster=cluster)
    agents = GpuAgents(bed, workdir / "hosts", mig_manager=getattr(request.module, "SANDBOX_MIG_MANAGER", None))
    runtime = None
    try:
        agents.start()
        lib_dir = nvml_lib_dir()
        runtime_log = open(workdir / "smoke-runtime.log", "ab")  # pylint: disable=consider-using-with
        runtime = subprocess.Popen(
            [sys.executable, "-m", "tests.testbed.sandbox.smoke_runtime", "run", "--kubeconfig", str(bed.kubeconfig),
             "--hosts-dir", str(workdir / "hosts"), "--nvml-lib-dir", str(lib_dir)],
            stdout=runtime_log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT))
        for name, model, count in NODES:
            agents.add_gpu_node(name, model, count)
        bed.create_node("op-cpu")
        yield OperatorSandbox(bed, agents, _write_inventory(workdir / "inventory", bed, agents, lib_dir, release))
    finally:
        if runtime is not None and runtime.poll() is None:
            runtime.send_signal(signal.SIGTERM)
            try:
                runtime.wait(10)
            except subprocess.TimeoutExpired:
                runtime.kill()
        agents.stop()
        cluster.down()
