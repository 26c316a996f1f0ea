"""Dropped and stalled watches against the real API server, through tests.testbed.faultproxy
on 127.0.0.1: the proxy cuts watch connections (RST after a second) and holds one open without sending a byte
(half-open). KubeOps.watch notices each within a bounded time (server-side timeoutSeconds + the client's read
timeout), re-lists and resumes; a rollout whose every watch is cut still ends verified."""

import threading
import time

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import get_api_client
from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, Runner, node_view
from tests.integration.reconfigure.test_rollout import STATE, gpu_allocatable, rollout_vars, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name


def test_cut_and_stalled_watches_are_detected_re_listed_and_resumed(testbed, testbed_node, fault_proxy, tmp_path):
    name = testbed_node("watchfault").metadata.name
    ops = KubeOps(get_api_client({"kubeconfig": str(fault_proxy.kubeconfig(tmp_path / "kubeconfig"))}),
                  watch_timeout=3, read_margin=2)
    fault_proxy.add("cut", match=r"watch=true", after=1.0, count=2)
    fault_proxy.add("stall", match=r"watch=true", count=1)
    initial = ops.get_node(name)

    def change_later():
        time.sleep(6)  # while the stalled watch hangs: only the re-list after its read timeout can see this
        testbed.core.patch_node(name, {"metadata": {"labels": {"gpufleet.io/watch-test": "changed"}}})

    changer = threading.Thread(target=change_later)
    changer.start()
    started = time.monotonic()
    found = ops.watch_node(name, time.monotonic() + 90,
                           lambda n: (n["metadata"].get("labels") or {}).get("gpufleet.io/watch-test") == "changed",
                           initial)
    elapsed = time.monotonic() - started
    changer.join()
    assert found["metadata"]["labels"]["gpufleet.io/watch-test"] == "changed"
    assert len(fault_proxy.actions("cut")) == 2 and len(fault_proxy.actions("stall")) == 1, fault_proxy.log
    # The stall was noticed within timeoutSeconds (3) + read margin (2), with slack for the re-lists and pauses.
    assert elapsed < 20, (elapsed, fault_proxy.log)
    relists = [p for m, p, a in fault_proxy.log if m == "GET" and "watch=true" not in p and "/api/v1/nodes?" in p]
    assert len(relists) >= 3, fault_proxy.log  # one after each cut, one after the stall
    assert any("ProtocolError" in e for e in ops.watch_errors) and any("Timeout" in e for e in ops.watch_errors), \
        ops.watch_errors


def test_rollout_ends_verified_while_every_watch_is_cut(testbed, gpu_cluster, add_gpu_node, fault_proxy, tmp_path):
    """mig_rollout follows MIG Manager's states and the verification through watches; the proxy resets each
    of them 1.5 s after it opened (unlimited), so every wait crosses several broken connections."""
    names = sorted([add_gpu_node("wf-a", "H100-80GB-HBM3", 1, faults=["slow"]), add_gpu_node("wf-b", "H100-80GB-HBM3", 1)])
    for name in names:
        wait_advertised(testbed, name)
    runner = Runner(fault_proxy.kubeconfig(tmp_path / "kubeconfig"), tmp_path / "ansible")
    fault_proxy.add("cut", match=r"watch=true", after=1.5)
    result = runner.playbook(PLAYBOOK, names, dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb"))
    assert result.rc == 0, result.explain()
    assert len(fault_proxy.actions("cut")) >= 4, fault_proxy.log
    rows = rows_of(result)
    for name in names:
        view = node_view(testbed, name)
        assert rows[name]["result"] == "reconfigured", rows[name]
        assert view["labels"][STATE] == "success" and gpu_allocatable(view) == {"nvidia.com/mig-1g.10gb": "7"}
        assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"]
