"""nvml_apply.apply_plan orchestration (order, rollback, states) with a recording session object.

The session stands in for NvmlSession's four write/read methods only; NVML itself is exercised by
tests/integration/nvml against the simulated library.
"""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import apply as nvml_apply
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import session as nvml
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, plan


class RecordingSession(object):
    """Keeps per-GPU instances; fails the Nth create / any destroy of listed ids when told to."""

    def __init__(self, hardware, fail_create_at=None, fail_destroy_ids=(), fail_recreate=False, mode_sticks=True):
        self.instances = dict((g["index"], dict((i["id"], dict(i)) for i in g.get("instances", [])))
                              for g in hardware["gpus"])
        self.mode = dict((g["index"], g["mig"]["current"]) for g in hardware["gpus"])
        self.calls = []
        self.creates = 0
        self.fail_create_at = fail_create_at
        self.fail_destroy_ids = set(fail_destroy_ids)
        self.fail_recreate = fail_recreate
        self.mode_sticks = mode_sticks
        self.next_id = 100
        self.rolling_back = False

    def set_mig_mode(self, index, enabled):
        self.calls.append(("mode", index, enabled))
        if self.mode_sticks:
            self.mode[index] = enabled
        return self.mode[index], enabled

    def create_instance(self, index, profile, start, size):
        self.creates += 1
        self.calls.append(("create", index, profile["name"], start))
        if self.fail_create_at is not None and self.creates == self.fail_create_at:
            self.rolling_back = True
            raise nvml.NvmlError("GPU %d: creating %s at %d:%d failed: Insufficient Resources" % (index, profile["name"], start, size))
        if self.rolling_back and self.fail_recreate:
            raise nvml.NvmlError("GPU %d: recreate refused" % index)
        self.next_id += 1
        self.instances[index][self.next_id] = {"id": self.next_id, "profile": profile["name"], "start": start, "size": size}
        return self.next_id

    def destroy_instance(self, index, gi_id):
        self.calls.append(("destroy", index, gi_id))
        if gi_id in self.fail_destroy_ids:
            self.rolling_back = True
            raise nvml.NvmlError("GPU %d: destroying GPU instance %d failed: In Use" % (index, gi_id))
        del self.instances[index][gi_id]

    def layout(self, index):
        return sorted((i["profile"], i["start"]) for i in self.instances[index].values())


def _hardware(count=2, mig=True, instances=None):
    model = catalog.get_model("NVIDIA H200")
    return {"gpus": [{"index": i, "name": model["name"], "pci_device_id": model["pci_device_id"],
                      "mig": {"current": mig, "pending": mig}, "profiles": model["profiles"],
                      "instances": [dict(x) for x in (instances or [])], "processes": []} for i in range(count)]}


SEVEN_SMALL = [{"id": 10 + s, "profile": "1g.18gb", "start": s, "size": 1} for s in range(7)]


def test_success_applies_every_gpu():
    hardware = _hardware(instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-balanced")
    session = RecordingSession(hardware)
    result = nvml_apply.apply_plan(session, planned, hardware)
    assert result["states"] == {0: "new", 1: "new"} and not result["reset_required"]
    for index in (0, 1):
        assert session.layout(index) == sorted((p["profile"], p["start"]) for p in planned["gpus"][index]["placements"])


def test_failure_rolls_back_that_gpu_and_stops():
    hardware = _hardware(instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-7g.141gb")
    session = RecordingSession(hardware, fail_create_at=1)
    with pytest.raises(nvml_apply.ApplyError) as err:
        nvml_apply.apply_plan(session, planned, hardware)
    assert err.value.states == {0: "old", 1: "old"}
    assert "Insufficient Resources" in str(err.value)
    assert session.layout(0) == [("1g.18gb", s) for s in range(7)]
    assert not [c for c in session.calls if c[1] == 1]  # GPU 1 never touched


def test_second_gpu_failure_leaves_first_new():
    hardware = _hardware(instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-7g.141gb")
    session = RecordingSession(hardware, fail_create_at=2)
    with pytest.raises(nvml_apply.ApplyError) as err:
        nvml_apply.apply_plan(session, planned, hardware)
    assert err.value.states == {0: "new", 1: "old"}
    assert session.layout(0) == [("7g.141gb", 0)] and session.layout(1) == [("1g.18gb", s) for s in range(7)]


def test_failed_rollback_is_reported_partial():
    hardware = _hardware(count=1, instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-7g.141gb")
    session = RecordingSession(hardware, fail_create_at=1, fail_recreate=True)
    with pytest.raises(nvml_apply.ApplyError) as err:
        nvml_apply.apply_plan(session, planned, hardware)
    assert err.value.states == {0: "partial"}


def test_busy_instance_destroy_failure_restores_destroyed_ones():
    hardware = _hardware(count=1, instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-7g.141gb")
    session = RecordingSession(hardware, fail_destroy_ids=[13])
    with pytest.raises(nvml_apply.ApplyError) as err:
        nvml_apply.apply_plan(session, planned, hardware)
    assert err.value.states == {0: "old"}
    assert session.layout(0) == [("1g.18gb", s) for s in range(7)]


def test_disable_destroys_before_mode_change_and_pending_mode_is_reported():
    hardware = _hardware(count=1, instances=SEVEN_SMALL)
    planned = plan.plan_node(hardware, config_name="all-disabled")
    session = RecordingSession(hardware, mode_sticks=False)
    result = nvml_apply.apply_plan(session, planned, hardware)
    kinds = [c[0] for c in session.calls]
    assert kinds == ["destroy"] * 7 + ["mode"]
    assert result["states"] == {0: "pending-reset"} and result["reset_required"] == [0]


def test_enable_with_pending_reset_creates_nothing():
    hardware = _hardware(count=1, mig=False)
    planned = plan.plan_node(hardware, config_name="all-balanced")
    session = RecordingSession(hardware, mode_sticks=False)
    result = nvml_apply.apply_plan(session, planned, hardware)
    assert session.calls == [("mode", 0, True)]
    assert result["states"] == {0: "pending-reset"}


def test_holders_only_for_disturbed_instances():
    hardware = _hardware(count=1, instances=SEVEN_SMALL)
    hardware["gpus"][0]["processes"] = [{"pid": 1, "name": "a", "gpu_instance_id": 10},
                                        {"pid": 2, "name": "b", "gpu_instance_id": 16}]
    planned = plan.plan_node(hardware, mig_devices={"1g.18gb": 6})  # keeps 0..5, drops the one at 6 (id 16)
    assert [h["pid"] for h in nvml_apply.holders(planned, hardware)] == [2]
    planned = plan.plan_node(hardware, config_name="all-disabled")
    assert [h["pid"] for h in nvml_apply.holders(planned, hardware)] == [1, 2]
