"""The rollout lock's Lease: expiry and the view returned to the play (pure logic)."""

import datetime
import time

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import lock as rollout_lock
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import LeaseRenewer, LockHeld, RolloutLock


def test_lease_expiry():
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
    lease = {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 60, "renewTime": "2026-01-01T11:59:30.000000Z"}}
    assert not rollout_lock.is_expired(lease, now)
    lease["spec"]["renewTime"] = "2026-01-01T11:58:00.000000Z"
    assert rollout_lock.is_expired(lease, now)
    assert rollout_lock.is_expired({"spec": {}}, now)
    assert rollout_lock.lease_view(lease)["expires"] == "2026-01-01T11:59:00.000000Z"


# -- a write whose answer was lost: the retried write answers 409 --------------------------------------------

class LostAnswerApi(object):
    """A Lease store whose next create/replace lands and then answers 409, as the API server answers the
    repeat of a write whose first answer a broken connection lost (k8s.client.retry_write sent it again)."""

    def __init__(self, lease=None, lose_next=True, other_writer=False):
        self.lease = lease
        self.lose_next = lose_next
        self.other_writer = other_writer

    def get_namespaced_custom_object(self, *args, **kwargs):
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return self.lease

    def _write(self, body):
        from copy import deepcopy

        landed = deepcopy(body)
        if self.other_writer:
            landed["spec"]["holderIdentity"] = "someone-else"
        landed["metadata"]["resourceVersion"] = str(int((self.lease or {"metadata": {"resourceVersion": "1"}})
                                                        ["metadata"].get("resourceVersion", "1")) + 1)
        self.lease = landed
        if self.lose_next:
            raise ApiException(status=409, reason="Conflict")

    def create_namespaced_custom_object(self, *args, body=None, **kwargs):
        self._write(body)

    def replace_namespaced_custom_object(self, *args, name=None, body=None, **kwargs):
        self._write(body)


def test_a_create_whose_answer_was_lost_is_recognised_as_ours():
    api = LostAnswerApi()
    changed, view = RolloutLock(api, "ns", "lock", "me", 30).acquire()
    assert changed and view["holder"] == "me"


def test_a_renew_whose_answer_was_lost_is_recognised_as_ours():
    lock = RolloutLock(LostAnswerApi(lose_next=False), "ns", "lock", "me", 30)
    lock.acquire()
    lock.api.lose_next = True
    lock.renew()  # no LockHeld
    assert lock.api.lease["spec"]["holderIdentity"] == "me"


def test_a_409_from_another_writer_is_still_a_lost_lock():
    lock = RolloutLock(LostAnswerApi(lose_next=False), "ns", "lock", "me", 30)
    lock.acquire()
    lock.api.lose_next, lock.api.other_writer = True, True
    with pytest.raises(LockHeld):
        lock.renew()


def test_the_renewer_keeps_trying_through_an_outage(monkeypatch):
    import urllib3

    class Flaky(object):
        namespace, name, holder, duration_s = "ns", "lock", "me", 3
        calls = 0

        def renew(self):
            Flaky.calls += 1
            if 2 <= Flaky.calls <= 4:
                raise urllib3.exceptions.MaxRetryError(None, "/leases", ConnectionRefusedError(111, "refused"))

    renewer = LeaseRenewer(Flaky())
    monkeypatch.setattr(renewer.lock, "duration_s", 0.3)  # interval 1 s floor: a few renewals within the test
    with renewer:
        time.sleep(5.5)
    assert renewer.error is None and Flaky.calls >= 5


def test_the_renewer_says_the_lease_is_lost_once_renewals_fail_past_its_duration(monkeypatch):
    import urllib3

    class Down(object):
        namespace, name, holder, duration_s = "gpu-operator", "gpufleet-mig-rollout", "me", 0.3
        calls = 0

        def renew(self):
            Down.calls += 1
            if Down.calls > 1:  # the first renewal (entering) lands, then the API server is gone
                raise urllib3.exceptions.MaxRetryError(None, "/leases", ConnectionRefusedError(111, "refused"))

    with LeaseRenewer(Down()) as renewer:
        assert renewer.lost() is None
        time.sleep(0.5)
        assert renewer.lapsed_s() > 0
        assert "gpu-operator/gpufleet-mig-rollout not renewed" in renewer.lost()
    renewer.error = "lost rollout lock gpu-operator/gpufleet-mig-rollout (holder now b)"
    assert renewer.lost() == renewer.error


# -- the keeper: the Lease renewed between module calls ---------------------------------------------------------

class KeptLock(object):
    namespace, name, holder, duration_s = "gpu-operator", "gpufleet-mig-rollout", "run-1", 30

    def __init__(self, fail=None):
        self.renewals = 0
        self.fail = fail

    def renew(self):
        if self.fail is not None:
            raise self.fail
        self.renewals += 1


@pytest.fixture
def keeper_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(rollout_lock.tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_keeper_renews_every_third_of_the_duration(keeper_dir):
    lock = KeptLock()
    keeper = rollout_lock.LeaseKeeper(lock, max_run_s=1000)
    looked = (10.0, 0.0, None)
    for now in (1.0, 5.0, 9.9):
        keeper.clock = lambda now=now: now
        looked = keeper.step(0.0, *looked)
    assert lock.renewals == 0
    keeper.clock = lambda: 10.0
    looked = keeper.step(0.0, *looked)
    assert lock.renewals == 1 and looked[0] == 20.0
    assert rollout_lock.read_keeper(lock)["renewed"] is not None
    assert rollout_lock.keeper_loss(lock) is None


def test_the_keeper_records_a_lost_lease_for_the_next_call(keeper_dir):
    lock = KeptLock(fail=LockHeld("lost rollout lock gpu-operator/gpufleet-mig-rollout (holder now nobody)"))
    keeper = rollout_lock.LeaseKeeper(lock, clock=lambda: 10.0)
    assert keeper.step(0.0, 10.0, 0.0, None) is None
    keeper.save()
    assert "gpu-operator/gpufleet-mig-rollout" in rollout_lock.keeper_loss(lock)
    # mig_rollout's renewer refuses to start on it
    with pytest.raises(LockHeld, match="holder now nobody"):
        LeaseRenewer(lock).__enter__()


def test_the_keeper_keeps_trying_through_an_outage_and_records_the_lapse(keeper_dir):
    import urllib3

    lock = KeptLock(fail=urllib3.exceptions.MaxRetryError(None, "/leases", ConnectionRefusedError(111, "refused")))
    keeper = rollout_lock.LeaseKeeper(lock, clock=lambda: 10.0)
    looked = keeper.step(0.0, 10.0, 0.0, None)
    assert looked == (20.0, 0.0, looked[2]) and "refused" in looked[2]
    lock.fail = None
    keeper.clock = lambda: 40.0
    looked = keeper.step(0.0, *looked)
    assert looked == (50.0, 40.0, None)
    assert keeper.state["lost"] is None and "not renewed for 40s" in keeper.state["lapses"][0]


def test_the_keeper_ends_at_its_maximum_run_time_as_a_loss(keeper_dir):
    keeper = rollout_lock.LeaseKeeper(KeptLock(), max_run_s=100, clock=lambda: 100.0)
    assert keeper.step(0.0, 10.0, 0.0, None) is None
    assert "maximum run time of 100s" in keeper.state["lost"]


def test_the_keeper_ends_when_the_run_ends_or_the_release_asks(keeper_dir, monkeypatch):
    lock = KeptLock()
    monkeypatch.setattr(rollout_lock, "pid_alive", lambda pid: False)
    keeper = rollout_lock.LeaseKeeper(lock, run_pid=4242, clock=lambda: 1.0)
    assert keeper.step(0.0, 10.0, 0.0, None) is None
    assert "process 4242 ended" in keeper.state["ended"] and keeper.state["lost"] is None
    monkeypatch.setattr(rollout_lock, "pid_alive", lambda pid: True)
    keeper = rollout_lock.LeaseKeeper(lock, run_pid=4242, clock=lambda: 1.0)
    (keeper_dir / (keeper.path.rsplit("/", 1)[1] + ".stop")).write_text("")
    assert keeper.step(0.0, 10.0, 0.0, None) is None
    assert keeper.state["ended"] == "stopped by the release" and lock.renewals == 0


def test_stopping_a_keeper_that_ended_returns_its_state_and_removes_its_files(keeper_dir):
    lock = KeptLock()
    keeper = rollout_lock.LeaseKeeper(lock)
    keeper.state.update(ended="Lease lost", lost="taken")
    keeper.save()
    assert rollout_lock.stop_keeper(lock)["lost"] == "taken"
    assert rollout_lock.read_keeper(lock) is None and list(keeper_dir.iterdir()) == []
    assert rollout_lock.stop_keeper(lock) is None


def test_the_run_process_is_the_outermost_ansible_playbook_ancestor(tmp_path):
    def proc(pid, parent, *argv):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (tmp_path / str(pid) / "stat").write_bytes(b"%d (py (x)) S %d 1 1" % (pid, parent))

    proc(50, 40, "/bin/sh", "-c", "python3 AnsiballZ_mig_rollout_lock.py")
    proc(40, 30, "/venv/bin/python3", "/venv/bin/ansible-playbook", "site.yml")  # the worker
    proc(30, 20, "/venv/bin/python3", "/venv/bin/ansible-playbook", "site.yml")  # the run
    proc(20, 1, "bash")
    assert rollout_lock.run_process(50, proc=str(tmp_path)) == 30
    assert rollout_lock.run_process(20, proc=str(tmp_path)) is None
    assert rollout_lock.run_process(99, proc=str(tmp_path)) is None


def test_a_keeper_whose_run_ended_leaves_no_file_behind(keeper_dir, monkeypatch):
    monkeypatch.setattr(rollout_lock, "pid_alive", lambda pid: False)
    monkeypatch.setattr(rollout_lock.signal, "signal", lambda *args: None)
    rollout_lock.LeaseKeeper(KeptLock(), run_pid=4242, sleep=lambda s: None).run()
    assert list(keeper_dir.iterdir()) == []
