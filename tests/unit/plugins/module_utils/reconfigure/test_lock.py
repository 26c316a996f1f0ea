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
        duration_s = 3
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
        namespace, name, duration_s = "gpu-operator", "gpufleet-mig-rollout", 0.3
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
