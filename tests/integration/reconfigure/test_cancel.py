"""Ctrl-C (or AWX's cancel) during a rollout: SIGINT to ansible-playbook, which exits at once. The module's
process goes on alone: the node in flight reaches its recorded state, no further node starts, and the Lease is
released, with nobody left to read the module's result."""

import os
import signal

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, gpu_allocatable, rollout_vars, wait_advertised
from tests.testbed.pytest_cluster import unique_name


def lease_exists(testbed, name):
    return testbed.kubectl("get", "lease", "-n", "gpu-operator", name, check=False).returncode == 0


def test_sigint_finishes_the_node_in_flight_starts_no_other_and_releases_the_lease(testbed, gpu_cluster, add_gpu_node,
                                                                                   gpu_agents, runner):
    first = add_gpu_node("rc-cancel-a", "H100-80GB-HBM3", 1)
    second = add_gpu_node("rc-cancel-b", "H100-80GB-HBM3", 1)
    for name in (first, second):
        wait_advertised(testbed, name)
    before = node_view(testbed, second)["labels"].get(CONFIG)
    gpu_agents.set_faults(first, ["slow"])  # MIG Manager keeps the first node pending a while
    lock = unique_name("lock")
    # One step of both nodes, one at a time: the second would start as soon as the first is done.
    variables = dict(rollout_vars(lock, mig_reconfigure_lock_duration=60, mig_reconfigure_canary=False,
                                  mig_reconfigure_max_unavailable=1),
                     profile="all-1g.10gb", mig_reconfigure_nodes=[first, second])
    proc = runner.playbook(PLAYBOOK, [first, second], variables, popen=True)
    try:
        testbed.wait_for(lambda: node_view(testbed, first)["labels"].get(STATE) == "pending", 120,
                         "the first node pending")
        assert lease_exists(testbed, lock)
        os.kill(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches ansible-playbook
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]

    # The module, alone now, finishes the node in flight and gives the Lease back.
    testbed.wait_for(lambda: not lease_exists(testbed, lock), 120, "the Lease released after the cancel")
    done = node_view(testbed, first)
    assert done["labels"][CONFIG] == "all-1g.10gb" and done["labels"][STATE] == "success", done["labels"]
    assert gpu_allocatable(done) == {"nvidia.com/mig-1g.10gb": "7"}
    assert done["unschedulable"] is False and PRIOR_ANNOTATION not in done["annotations"], done
    untouched = node_view(testbed, second)
    assert untouched["labels"].get(CONFIG) == before and untouched["unschedulable"] is False, untouched
    assert PRIOR_ANNOTATION not in untouched["annotations"], untouched
