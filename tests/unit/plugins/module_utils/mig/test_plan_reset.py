"""Which GPUs a MIG change resets: MIG Manager's nvidia-mig-parted resets every GPU of the node together when any
GPU's MIG mode is pending (NVIDIA/mig-parted v0.15.0 cmd/nvidia-mig-parted/apply/mode.go: util.ResetAllGPUs
after SetMigMode), so a GPU whose own mode does not change is reset with the others."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import plan

H100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE"}
CONFIG = {"version": "v1", "mig-configs": {"gpu1-on": [
    {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
    {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
]}}


def _hw(modes):
    return {"gpus": [dict(H100, index=i, mig={"current": on, "pending": on},
                          instances=[{"profile": "7g.80gb", "start": 0, "size": 8}] if on else [])
                     for i, on in enumerate(modes)]}


def test_a_mode_change_on_one_gpu_resets_every_gpu_of_the_node():
    planned = plan.plan_node(_hw([True, False]), config_name="gpu1-on", config=CONFIG)
    assert [g["mode_change_required"] for g in planned["gpus"]] == [False, True]
    assert planned["reset_gpus"] == [0, 1]
    assert [g["reset"] for g in planned["gpus"]] == [True, True]


def test_a_layout_change_alone_resets_no_gpu():
    planned = plan.plan_node(_hw([True, True]), config_name="gpu1-on", config=CONFIG)
    assert planned["changed"] and not planned["mode_change_required"]
    assert planned["reset_gpus"] == [] and not any(g["reset"] for g in planned["gpus"])
