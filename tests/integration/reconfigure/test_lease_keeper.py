"""The rollout Lease held for the whole run, between module calls too: mig_rollout_lock's keeper renews it while
the play does something slow (here a task that waits for the test), a second rollout is refused meanwhile, the
release stops the keeper and deletes the Lease; a Lease deleted between module calls fails the next call naming it;
a killed ansible-playbook leaves no keeper behind."""

import datetime
import json
import os
import signal

import yaml

from tests.integration.reconfigure.conftest import SA_NAMESPACE
from tests.testbed.pytest_cluster import unique_name

DURATION = 10  # the shortest the module takes: the slow step below outlasts it several times


def lease(testbed, name):
    found = testbed.kubectl("get", "lease", "-n", SA_NAMESPACE, name, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def stop(proc):
    """What is left of a run (its process group, workers included) after a failed assertion or a kill."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid):
    """Whether ``pid`` runs (an ended keeper may stay a zombie until init reaps it)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def lease_age(spec):
    """Seconds from the Lease's acquireTime to its renewTime (MicroTime, written by the same controller)."""
    def parse(text):
        return datetime.datetime.strptime(text.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f")
    return (parse(spec["renewTime"]) - parse(spec["acquireTime"])).total_seconds()


def slow_play(runner, lock, holder):
    """Take the Lease with a keeper, wait (a slow step between module calls) until the test writes ``go``, then
    release it. Returns (playbook path, keeper file, go file)."""
    keeper_file, go = runner.workdir / ("%s-keeper.json" % lock), runner.workdir / ("%s-go" % lock)
    lock_args = {"namespace": SA_NAMESPACE, "name": lock, "holder": holder}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Take the lock", "gpufleet.gpu_operator.mig_rollout_lock": dict(lock_args, duration=DURATION,
                                                                                 keep=True), "register": "taken"},
        {"name": "Show the keeper", "ansible.builtin.copy": {
            "content": "{{ taken.keeper | to_json }}", "dest": str(keeper_file), "mode": "0600"}},
        {"name": "A slow step", "ansible.builtin.wait_for": {"path": str(go), "timeout": 300}},
        {"name": "Release the lock", "gpufleet.gpu_operator.mig_rollout_lock": dict(lock_args, state="absent")},
    ]}]
    path = runner.workdir / ("%s.yml" % lock)
    path.write_text(yaml.safe_dump(play))
    return path, keeper_file, go


def started_keeper(testbed, keeper_file):
    return testbed.wait_for(lambda: keeper_file.exists() and keeper_file.stat().st_size and
                            json.loads(keeper_file.read_text()), 120, "the keeper started")


def test_the_lease_is_held_between_module_calls_and_released_with_its_keeper(testbed, runner):
    lock, holder = unique_name("keeper"), unique_name("run")
    path, keeper_file, go = slow_play(runner, lock, holder)
    proc = runner.playbook(path, [], popen=True)
    try:
        keeper = started_keeper(testbed, keeper_file)
        assert alive(keeper["pid"]) and keeper["run_pid"] == proc.pid, keeper
        taken = lease(testbed, lock)["spec"]

        def renewed_past_its_duration():
            """Still ours, renewed later than its duration after it was taken: it would have expired unrenewed."""
            spec = (lease(testbed, lock) or {}).get("spec") or {}
            return spec if spec.get("holderIdentity") == holder and lease_age(spec) > DURATION else None

        held = testbed.wait_for(renewed_past_its_duration, 120, "the Lease renewed past its duration, still ours",
                                interval=1)
        assert held["acquireTime"] == taken["acquireTime"]
        other = runner.module("mig_rollout_lock", {"namespace": SA_NAMESPACE, "name": lock, "holder": "another-run",
                                                   "duration": DURATION})
        assert other["failed"] and holder in other["msg"], other
        go.write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 0, out[-3000:] + err[-2000:]
    assert lease(testbed, lock) is None
    assert not alive(keeper["pid"])
    released = [t for t in json.loads(out[out.index("{"):])["plays"][0]["tasks"]
                if t["task"]["name"] == "Release the lock"][0]["hosts"]["localhost"]
    assert released["outcome"] == "released" and released["keeper"]["ended"] == "stopped by the release", released


def test_a_lease_deleted_between_module_calls_fails_the_next_call_naming_it(testbed, runner):
    lock, holder = unique_name("keeper-lost"), unique_name("run")
    path, keeper_file, go = slow_play(runner, lock, holder)
    proc = runner.playbook(path, [], popen=True)
    try:
        keeper = started_keeper(testbed, keeper_file)
        testbed.kubectl("delete", "lease", "-n", SA_NAMESPACE, lock)
        # The keeper finds it gone at its next renewal and ends, recording the loss.
        testbed.wait_for(lambda: not alive(keeper["pid"]), 60, "the keeper ended", interval=0.5)
        go.write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode != 0, out[-3000:]
    released = [t for t in json.loads(out[out.index("{"):])["plays"][0]["tasks"]
                if t["task"]["name"] == "Release the lock"][0]["hosts"]["localhost"]
    assert released["failed"], released
    assert "lost its rollout lock %s/%s" % (SA_NAMESPACE, lock) in released["msg"], released["msg"]
    assert released["keeper"]["ended"] == "Lease lost", released
    assert lease(testbed, lock) is None


def test_a_killed_run_leaves_no_keeper_renewing(testbed, runner):
    lock, holder = unique_name("keeper-killed"), unique_name("run")
    path, keeper_file, _go = slow_play(runner, lock, holder)
    proc = runner.playbook(path, [], popen=True)
    try:
        keeper = started_keeper(testbed, keeper_file)
        proc.kill()  # SIGKILL to ansible-playbook: no always, no release
        proc.communicate(timeout=60)
        testbed.wait_for(lambda: not alive(keeper["pid"]), 30, "the keeper ended with its run", interval=0.5)
        left = lease(testbed, lock)["spec"]
        assert left["holderIdentity"] == holder  # left to expire after its duration, for a re-run to take over
    finally:
        stop(proc)
        testbed.kubectl("delete", "lease", "-n", SA_NAMESPACE, lock, check=False)


def test_check_mode_takes_no_lease_and_starts_no_keeper(testbed, runner):
    lock = unique_name("keeper-check")
    taken = runner.module("mig_rollout_lock", {"namespace": SA_NAMESPACE, "name": lock, "holder": "check-run",
                                               "duration": DURATION, "keep": True}, check=True)
    assert not taken.get("failed") and taken["changed"] and "keeper" not in taken, taken
    assert lease(testbed, lock) is None
