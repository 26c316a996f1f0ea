"""nvml.apply.planned_actions (mig_apply's check mode) says what apply_plan then does, line for line."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, plan
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import apply as nvml_apply


class RecordingSession(object):
    """Stands in for NvmlSession's write methods; a mode write sticks unless told otherwise."""

    def __init__(self, hardware, mode_sticks=True):
        self.mode = dict((g["index"], g["mig"]["current"]) for g in hardware["gpus"])
        self.mode_sticks = mode_sticks
        self.next_id = 100

    def set_mig_mode(self, index, enabled):
        if self.mode_sticks:
            self.mode[index] = enabled
        return self.mode[index], enabled

    def create_instance(self, index, profile, start, size):
        self.next_id += 1
        return self.next_id

    def destroy_instance(self, index, gi_id):
        pass


def _hardware(mig=True, pending=None, instances=()):
    model = catalog.get_model("NVIDIA H200")
    return {"gpus": [{"index": i, "name": model["name"], "pci_device_id": model["pci_device_id"],
                      "mig": {"current": mig, "pending": mig if pending is None else pending},
                      "profiles": model["profiles"], "instances": [dict(x) for x in instances], "processes": []}
                     for i in range(2)]}


SMALL = [{"id": 10 + s, "profile": "1g.18gb", "start": s, "size": 1} for s in range(7)]


@pytest.mark.parametrize("hardware,config_name", [
    (_hardware(instances=SMALL), "all-balanced"),
    (_hardware(instances=SMALL), "all-disabled"),
    (_hardware(mig=False), "all-3g.71gb"),
    (_hardware(instances=SMALL), "all-1g.18gb"),
])
def test_check_mode_actions_are_the_real_runs(hardware, config_name):
    planned = plan.plan_node(hardware, config_name=config_name)
    applied = nvml_apply.apply_plan(RecordingSession(hardware), planned, hardware)
    assert nvml_apply.planned_actions(planned) == applied["actions"]


def test_a_mode_already_pending_waits_for_the_reset_in_both():
    hardware = _hardware(mig=False, pending=True)
    planned = plan.plan_node(hardware, config_name="all-balanced")
    applied = nvml_apply.apply_plan(RecordingSession(hardware, mode_sticks=False), planned, hardware)
    expected = ["GPU 0: MIG mode on waits for a GPU reset or reboot", "GPU 1: MIG mode on waits for a GPU reset or reboot"]
    assert nvml_apply.planned_actions(planned) == applied["actions"] == expected
