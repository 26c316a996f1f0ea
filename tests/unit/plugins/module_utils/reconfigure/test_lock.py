"""The rollout lock's Lease: expiry and the view returned to the play (pure logic)."""

import datetime

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import lock as rollout_lock


def test_lease_expiry():
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
    lease = {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 60, "renewTime": "2026-01-01T11:59:30.000000Z"}}
    assert not rollout_lock.is_expired(lease, now)
    lease["spec"]["renewTime"] = "2026-01-01T11:58:00.000000Z"
    assert rollout_lock.is_expired(lease, now)
    assert rollout_lock.is_expired({"spec": {}}, now)
    assert rollout_lock.lease_view(lease)["expires"] == "2026-01-01T11:59:00.000000Z"
