"""Every Kubernetes module, and the gpu_nodes inventory, against an API server that cannot be reached, and
against one that keeps answering 5xx or 429.

Unreachable: the kubeconfig points at 127.0.0.1 on a port that is bound but not listening, so every
connection is refused at once (no testbed cluster needed). Failing: tests.testbed.faultproxy in front of the
testbed's real API server answers every request 503 (or 429 with Retry-After) itself. Each module retries
within its window (GPUFLEET_API_RETRY_SECONDS, set low here), then fails with one line naming the server
(127.0.0.1:<port>), the call it tried and the answer, changed=false, no traceback. A transient fault (a few
5xx/429 answers, then the real server) is retried and the module succeeds: before the retries existed the
first 503 ended it.
"""

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.reconfigure.conftest import Runner
from tests.testbed.faultproxy import FaultProxy

# The retry window of the module processes: a persistent failure is reported after it (the default, 40 s,
# covers an API server restart; these cases need not wait that long).
RETRY_ENV = {"GPUFLEET_API_RETRY_SECONDS": "2"}


class FaultRunner(Runner):
    """Runner with extra environment for the module processes."""

    def __init__(self, kubeconfig, workdir, extra_env=None):
        super().__init__(kubeconfig, workdir)
        self.extra_env = dict(extra_env or RETRY_ENV)

    def env(self):
        env = super().env()
        env.update(self.extra_env)
        return env


NODE = "gpu-unreachable-1"

# One task per module that talks to the API, with only the options it requires (and what makes it call).
MODULE_ARGS = {
    "gpu_cluster_info": {},
    "gpu_drain": {"name": NODE},
    "gpu_node_validate": {"nodes": [{"name": NODE}]},
    "gpu_operator_status": {},
    "gpu_operator_upgrade_check": {},
    "gpu_operator_driver_pools": {},
    "gpu_preflight": {},
    "gpu_smoke_test": {"targets": [{"node": NODE}]},
    "mig_rollout": {"nodes": [NODE], "config": "all-1g.10gb"},
    "mig_rollout_lock": {"holder": "unreachable-test"},
    "node_mig_config": {"name": NODE, "config": "all-1g.10gb"},
}
# More entry points of the same modules: other phases and actions call the API in other places.
MORE_ARGS = [
    ("mig_rollout", {"nodes": [NODE], "config": "all-1g.10gb", "phase": "plan"}),
    ("mig_rollout_lock", {"holder": "unreachable-test", "state": "absent"}),
    ("node_mig_config", {"name": NODE, "action": "diagnose"}),
    ("node_mig_config", {"name": NODE, "action": "rollback"}),
    ("gpu_drain", {"name": NODE, "state": "uncordoned"}),
    ("gpu_operator_status", {"wait": True, "timeout": 5}),
]
CASES = sorted(MODULE_ARGS.items()) + MORE_ARGS


@pytest.fixture(scope="module")
def dead_port():
    """A port on 127.0.0.1 that is bound (so no one else takes it) but never listens: connect is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def dead_kubeconfig(dead_port, tmp_path_factory):
    path = tmp_path_factory.mktemp("unreachable") / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {
            "server": "https://127.0.0.1:%s" % dead_port, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}]}))
    return path


@pytest.fixture(scope="module")
def results(dead_kubeconfig, tmp_path_factory):
    """Every case as one task of one playbook (ignore_errors), run once."""
    runner = FaultRunner(dead_kubeconfig, tmp_path_factory.mktemp("ansible"))
    tasks = [{"name": "case %d %s" % (i, name), "gpufleet.gpu_operator.%s" % name: args, "ignore_errors": True}
             for i, (name, args) in enumerate(CASES)]
    path = runner.workdir / "unreachable.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = runner.playbook(path, [], timeout=300)
    return run


def test_every_api_module_is_covered():
    """A new module that talks to the API must be added here (it has the kube_auth options)."""
    from tests.unit.plugins.modules.test_argument_specs import _snapshot

    with_auth = sorted(name for name, spec in _snapshot().items() if "kubeconfig" in spec["argument_spec"])
    assert with_auth == sorted(MODULE_ARGS)


@pytest.mark.parametrize("index", range(len(CASES)), ids=["%s-%s" % (n, i) for i, (n, _a) in enumerate(CASES)])
def test_module_fails_in_one_line_naming_the_server(results, dead_port, index):
    name, args = CASES[index]
    result = results.task("case %d %s" % (index, name))
    server = "127.0.0.1:%s" % dead_port
    msg = result.get("msg") or ""
    assert result.get("failed") is True, (name, args, result)
    assert result.get("changed") is False, (name, result)
    assert server in msg and "\n" not in msg, msg
    assert "cannot reach the Kubernetes API server" in msg and "refused" in msg.lower(), msg
    assert re.search(r"\((GET|POST|PATCH|PUT|DELETE) /", msg), "the call is not named: %s" % msg
    if "name" in args or "nodes" in args:
        assert NODE in msg, msg
    # ansible-core 2.19 gives every failure an "exception" key; at default verbosity it holds no traceback.
    text = json.dumps(result)
    assert "Traceback" not in text and "module_stderr" not in result and "MODULE FAILURE" not in text, text
    assert result.get("exception") in (None, "(traceback unavailable)"), text


def test_no_traceback_in_the_run(results):
    assert "Traceback" not in results.stdout and "Traceback" not in results.stderr, results.explain()


def test_inventory_fails_in_one_line_naming_the_server(dead_kubeconfig, dead_port, tmp_path):
    source = tmp_path / "dead.gpu_nodes.yml"
    source.write_text(yaml.safe_dump({"plugin": "gpufleet.gpu_operator.gpu_nodes",
                                      "kubeconfig": str(dead_kubeconfig)}))
    env = FaultRunner(dead_kubeconfig, tmp_path / "ansible").env()
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"
    env["ANSIBLE_INVENTORY_ENABLED"] = "gpufleet.gpu_operator.gpu_nodes"
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(source), "--list"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "127.0.0.1:%s" % dead_port in line]
    assert lines, output
    assert any("cannot reach the Kubernetes API server" in line and "(GET /api/v1/nodes)" in line
               and "dead.gpu_nodes.yml" in line for line in lines), output


# -- an API server that answers 5xx / 429 (through the fault proxy) ------------------------------------------

@pytest.fixture(scope="module")
def fault_proxy(testbed):
    proxy = FaultProxy.for_kubeconfig(testbed.kubeconfig, testbed.cluster.cluster_dir).start()
    yield proxy
    proxy.stop()


def run_cases(proxy, workdir, cases, retry_seconds=None):
    extra = {"GPUFLEET_API_RETRY_SECONDS": str(retry_seconds)} if retry_seconds else None
    runner = FaultRunner(proxy.kubeconfig(workdir / "kubeconfig"), workdir / "ansible", extra)
    tasks = [{"name": "case %d %s" % (i, name), "gpufleet.gpu_operator.%s" % name: args, "ignore_errors": True}
             for i, (name, args) in enumerate(cases)]
    path = runner.workdir / "faults.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return runner.playbook(path, [], timeout=600)


@pytest.mark.parametrize("status,retry_after", [(503, None), (500, None), (429, 1)], ids=["503", "500", "429"])
def test_every_module_reports_a_persistent_error_status_in_one_line(testbed, fault_proxy, tmp_path, status,
                                                                    retry_after):
    fault_proxy.reset()
    fault_proxy.add("status", code=status, retry_after=retry_after)
    try:
        run = run_cases(fault_proxy, tmp_path, CASES)
    finally:
        fault_proxy.clear()
    server = "127.0.0.1:%s" % fault_proxy.port
    assert "Traceback" not in run.stdout + run.stderr, run.explain()
    for index, (name, args) in enumerate(CASES):
        result = run.task("case %d %s" % (index, name))
        msg = result.get("msg") or ""
        assert result.get("failed") is True and result.get("changed") is False, (name, args, result)
        assert server in msg and "\n" not in msg, (name, msg)
        assert "HTTP %d" % status in msg, (name, msg)
        assert re.search(r"(GET|POST|PATCH|PUT|DELETE) /", msg), "the call is not named: %s" % msg
        if "name" in args or "nodes" in args:
            assert NODE in msg, msg
        assert result.get("exception") in (None, "(traceback unavailable)"), json.dumps(result)
    # Each module asked again before giving up (reads by urllib3's Retry): more requests than modules.
    assert len(fault_proxy.actions("status")) > 2 * len(CASES)


def test_transient_5xx_and_429_are_retried_on_reads_and_writes(testbed, testbed_node, fault_proxy, tmp_path):
    """Reads (GET) and the cordon's write (PATCH) each meet 503, 502 and a 429 with Retry-After before the real
    server answers: the modules succeed, and the node is cordoned."""
    node = testbed_node("transient").metadata.name
    fault_proxy.reset()  # the proxy is the module's: the persistent-error tests before this one left 100+ answers in its log
    for method in ("GET", "PATCH"):
        fault_proxy.add("status", method=method, code=503, count=1)
        fault_proxy.add("status", method=method, code=502, count=1)
        fault_proxy.add("status", method=method, code=429, retry_after=1, count=1)
    try:
        run = run_cases(fault_proxy, tmp_path, [("gpu_drain", {"name": node, "state": "cordoned"})], retry_seconds=30)
    finally:
        fault_proxy.clear()
    result = run.task("case 0 gpu_drain")
    assert not result.get("failed"), result
    assert result.get("changed") is True, result
    assert testbed.core.read_node(node).spec.unschedulable is True
    faulted = fault_proxy.actions("status")
    assert sorted(set(m for m, _p, _a in faulted)) == ["GET", "PATCH"] and len(faulted) == 6


def test_a_write_whose_connection_is_reset_is_sent_again(testbed, testbed_node, fault_proxy, tmp_path):
    node = testbed_node("reset-write").metadata.name
    fault_proxy.reset()
    fault_proxy.add("reset", method="PATCH", count=2)
    try:
        run = run_cases(fault_proxy, tmp_path, [("gpu_drain", {"name": node, "state": "cordoned"})], retry_seconds=30)
    finally:
        fault_proxy.clear()
    result = run.task("case 0 gpu_drain")
    assert not result.get("failed"), result
    assert testbed.core.read_node(node).spec.unschedulable is True
    assert len(fault_proxy.actions("reset")) == 2


def test_validation_from_an_unreachable_prometheus_fails_before_any_api_call(dead_kubeconfig, dead_port, tmp_path):
    """hardware_source=dcgm reads Prometheus first: when it cannot, the task fails naming its URL, nothing checked."""
    runner = FaultRunner(dead_kubeconfig, tmp_path / "ansible")
    url = "http://127.0.0.1:%s" % dead_port
    path = runner.workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "validate from dcgm", "ignore_errors": True, "gpufleet.gpu_operator.gpu_node_validate": {
            "nodes": [{"name": NODE}], "hardware_source": "dcgm", "prometheus_url": url}}]}]))
    result = runner.playbook(path, [], timeout=120).task("validate from dcgm")
    msg = result.get("msg") or ""
    assert result.get("failed") is True and result.get("changed") is False, result
    assert msg.startswith("hardware_source=dcgm: Prometheus query %s/api/v1/query?" % url), msg
    assert "refused" in msg.lower() and msg.endswith("nothing was checked"), msg
    assert "Kubernetes API server" not in msg, "the API was called before Prometheus answered: %s" % msg
