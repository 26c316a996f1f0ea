"""mig.verify.mismatches: the one comparison of the GPUs' state with a plan's target."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, plan, verify


def _gpu(index, mig=True, pending=None, instances=()):
    model = catalog.get_model("NVIDIA H200")
    return {"index": index, "name": model["name"], "pci_device_id": model["pci_device_id"],
            "mig": {"current": mig, "pending": mig if pending is None else pending}, "profiles": model["profiles"],
            "instances": [dict(i) for i in instances]}


def _instances(profile, count, size=1):
    return [{"id": 10 + n, "profile": profile, "start": n * size, "size": size} for n in range(count)]


def _target(config_name, hardware):
    return plan.plan_node(hardware, config_name=config_name)


def test_matching_hardware_has_no_mismatch():
    hardware = {"gpus": [_gpu(0, instances=_instances("1g.18gb", 7)), _gpu(1, instances=_instances("1g.18gb", 7))]}
    assert verify.mismatches(hardware, _target("all-1g.18gb", hardware)) == []


def test_wrong_layout_names_the_gpu_what_it_has_and_what_is_wanted():
    hardware = {"gpus": [_gpu(0, instances=_instances("1g.18gb", 7)), _gpu(1, instances=_instances("7g.141gb", 1))]}
    found = verify.mismatches(hardware, _target("all-1g.18gb", hardware))
    assert [m["index"] for m in found] == [1]
    assert found[0]["current"] == {"7g.141gb": 1} and found[0]["target"] == {"1g.18gb": 7}
    assert found[0]["text"] == "GPU 1 has MIG on with 7g.141gb:1, wants MIG on with 1g.18gb:7"


def test_pending_mode_change_is_a_mismatch_even_with_the_right_current_mode():
    target = _target("all-disabled", {"gpus": [_gpu(0, mig=False)]})
    assert verify.mismatches({"gpus": [_gpu(0, mig=False)]}, target) == []
    found = verify.mismatches({"gpus": [_gpu(0, mig=False, pending=True)]}, target)
    assert found[0]["text"] == "GPU 0 has MIG off (MIG mode change pending a GPU reset), wants MIG off"


def test_mig_off_wanted_but_on():
    target = _target("all-disabled", {"gpus": [_gpu(0, mig=False)]})
    found = verify.mismatches({"gpus": [_gpu(0)]}, target)
    assert found[0]["text"] == "GPU 0 has MIG on with no MIG devices, wants MIG off"


def test_indices_limit_the_check_and_a_missing_gpu_is_named():
    hardware = {"gpus": [_gpu(0), _gpu(1)]}
    target = _target("all-1g.18gb", hardware)
    assert [m["index"] for m in verify.mismatches(hardware, target, indices=[1])] == [1]
    found = verify.mismatches({"gpus": [_gpu(0, instances=_instances("1g.18gb", 7))]}, target)
    assert [m["text"] for m in found] == ["GPU 1 is missing from the hardware facts"]


def test_the_planner_and_the_check_agree():
    """A GPU the planner would change is exactly a GPU the check reports (no second notion of 'done')."""
    layouts = [_instances("1g.18gb", 7), _instances("7g.141gb", 1, size=8), []]
    for config_name in ("all-1g.18gb", "all-7g.141gb", "all-balanced", "all-disabled"):
        for layout in layouts:
            hardware = {"gpus": [_gpu(0, mig=bool(layout), instances=layout)]}
            planned = plan.plan_node(hardware, config_name=config_name)
            assert bool(verify.mismatches(hardware, planned)) == planned["changed"], (config_name, layout)
