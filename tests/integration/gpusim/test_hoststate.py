# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The host-state API and file format shared by hoststate.py and the C library."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from tests.testbed.gpusim import hoststate


def test_create_summary_and_model_names(tmp_path):
    state = tmp_path / "h.state"
    summary = hoststate.create_host(state, "nvidia a100-sxm4-40gb", 3, driver_version="550.54.15", seed=1)
    assert (summary["driver_version"], summary["nvml_version"], summary["cuda_driver_version"]) == \
        ("550.54.15", "12.550.54.15", 12040)
    assert [g["index"] for g in summary["gpus"]] == [0, 1, 2]
    assert len({g["uuid"] for g in summary["gpus"]}) == 3
    assert len({g["pci_bus_id"] for g in summary["gpus"]}) == 3
    assert all(g["mig_mode"] == {"current": 0, "pending": 0} and g["gpu_instances"] == [] for g in summary["gpus"])
    again = hoststate.create_host(tmp_path / "h2.state", "A100-SXM4-40GB", 3, driver_version="550.54.15", seed=1)
    assert [g["uuid"] for g in again["gpus"]] == [g["uuid"] for g in summary["gpus"]]  # seed: reproducible
    for model in ("H200", "NVIDIA H200", "h100 80gb hbm3", "A30"):
        assert hoststate.resolve_model(model)


@pytest.mark.parametrize("call, message", [
    (lambda s: hoststate.create_host(s, "V100", 1), "unknown GPU model 'V100'"),
    (lambda s: hoststate.create_host(s, "H200", 0), "GPU count must be 1..16"),
    (lambda s: hoststate.create_host(s, "H200", 1, faults=["gpu_on_fire"]), "unknown fault 'gpu_on_fire'"),
    (lambda s: hoststate.create_host(s, "H200", 1, driver_version="440.33.01"), "predates MIG"),
    (lambda s: hoststate.set_fault(s, 5, "no_permission"), "GPU 5 does not exist"),
    (lambda s: hoststate.add_process(s, 0, 1, 10, gi_id=1), "give both gi_id and ci_id"),
    (lambda s: hoststate.add_process(s, 0, 1, 10, gi_id=1, ci_id=0), "no MIG device GI 1 / CI 0"),
    (lambda s: hoststate.summary(str(s) + ".missing"), "no simulated host state"),
])
def test_bad_input_is_refused_with_a_clear_error(tmp_path, call, message):
    state = tmp_path / "h.state"
    hoststate.create_host(state, "H200", 2)
    before = state.read_text()
    with pytest.raises(hoststate.SimHostError, match=message):
        call(state)
    assert state.read_text() == before  # refused before anything changed


def test_processes_in_mig_mode_must_name_their_mig_device(tmp_path):
    state = tmp_path / "h.state"
    hoststate.create_host(state, "A30", 1, mig_enabled=True)
    with pytest.raises(hoststate.SimHostError, match="MIG mode"):
        hoststate.add_process(state, 0, 10, 100)
    assert hoststate.summary(state)["gpus"][0]["processes"] == []


def test_remove_processes_by_gpu_and_pid(tmp_path):
    state = tmp_path / "h.state"
    hoststate.create_host(state, "H200", 2)
    for gpu, pid in ((0, 1), (0, 2), (1, 3)):
        hoststate.add_process(state, gpu, pid, 10)
    with pytest.raises(hoststate.SimHostError, match="already listed"):
        hoststate.add_process(state, 0, 1, 10)
    assert hoststate.remove_processes(state, pid=2) == 1
    assert hoststate.remove_processes(state, gpu_index=1) == 1
    assert [[p["pid"] for p in g["processes"]] for g in hoststate.summary(state)["gpus"]] == [[1], []]
    assert hoststate.remove_processes(state) == 1


def test_c_and_python_writers_agree_and_keep_unknown_keys(sim_host):
    host = sim_host("H200", 1)
    hoststate.add_process(host.state_path, 0, 77, 5, name="my trainer %1")
    hoststate.add_process(host.state_path, 0, 79, 7, name="two words")
    with hoststate._mutate(host.state_path) as state:  # pylint: disable=protected-access
        state["gpus"][0]["note"] = "added by a newer writer"
    got = host.run_python("""
        import pynvml as n
        n.nvmlInit()
        names = [n.nvmlSystemGetProcessName(77), n.nvmlSystemGetProcessName(79)]
        emit([names, n.nvmlDeviceSetMigMode(n.nvmlDeviceGetHandleByIndex(0), 1)])  # C rewrites the file
    """).result
    assert got == [["my trainer %1", "two words"], 19]  # held GPU: the change stays pending
    state = hoststate.parse(open(host.state_path).read())
    gpu = state["gpus"][0]
    assert gpu["note"] == "added by a newer writer"
    assert (gpu["mig_current"], gpu["mig_pending"]) == (0, 1)
    assert [p["name"] for p in gpu["proc"]] == ["my trainer %1", "two words"]
    assert hoststate.parse(hoststate.render(state)) == state
