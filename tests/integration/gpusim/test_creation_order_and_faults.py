# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The documented creation-order fact, fault injection, and several processes sharing one simulated host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import sys
import textwrap

import pytest

from tests.testbed.gpusim import hoststate

from .conftest import NVML_PRELUDE, run_snippet

PRELUDE = NVML_PRELUDE + """
def create_in_order(h, ids):
    done = []
    for pid in ids:
        code = err(n.nvmlDeviceCreateGpuInstance, h, pid)
        if code:
            return done, code
        done.append(pid)
    return done, 0
"""


def run(host, code):
    return run_snippet(host, code, PRELUDE)


@pytest.mark.parametrize("model", ["A100-SXM4-40GB", "A100-SXM4-80GB", "H100-80GB-HBM3", "H200"])
def test_documented_creation_order_fact(sim_host, model):
    """MIG user guide: `-cgi 19,19,14,9` fails with Insufficient Resources, `9,19,14,19` succeeds."""
    host = sim_host(model, 2, mig_enabled=True)
    got = run(host, """
        n.nvmlInit()
        emit([create_in_order(n.nvmlDeviceGetHandleByIndex(0), [19, 19, 14, 9]),
              create_in_order(n.nvmlDeviceGetHandleByIndex(1), [9, 19, 14, 19])])
    """)
    assert got[0] == [[19, 19, 14], 23]  # NVML_ERROR_INSUFFICIENT_RESOURCES on the 3g instance
    assert got[1] == [[9, 19, 14, 19], 0]
    layout = sorted((gi["placement"]["start"], gi["placement"]["size"], gi["profile_id"])
                    for gi in host.summary()["gpus"][1]["gpu_instances"])
    assert layout == [(0, 2, 14), (2, 1, 19), (3, 1, 19), (4, 4, 9)]  # a valid 3-2-1-1 geometry


def test_processes_keep_a_mode_change_pending(sim_host):
    host = sim_host("A100-SXM4-40GB", 1)
    host.add_process(0, 1234, 1000)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([n.nvmlDeviceSetMigMode(h, 1), n.nvmlDeviceGetMigMode(h), err(n.nvmlDeviceCreateGpuInstance, h, 19)])
    """)
    assert got == [19, [0, 1], 3]  # activation IN_USE, pending enable, no instances yet
    with pytest.raises(hoststate.SimHostError, match="in use by pids"):
        host.reset_gpu(0)
    host.remove_processes(0, 1234)
    host.reset_gpu(0)  # nvidia-smi -r once the GPU is free
    assert host.summary()["gpus"][0]["mig_mode"] == {"current": 1, "pending": 1}


def test_reset_unsupported_needs_a_reboot(sim_host):
    host = sim_host("H100-80GB-HBM3", 2, faults=["reset_unsupported"])
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        emit([n.nvmlDeviceSetMigMode(h, 1), n.nvmlDeviceGetMigMode(h)])
    """)
    assert got == [16, [0, 1]]  # NVML_ERROR_RESET_REQUIRED: a VM, reboot to activate
    with pytest.raises(hoststate.SimHostError, match="not supported"):
        host.reset_gpu(1)
    host.add_process(0, 99, 10)
    summary = host.reboot()
    assert summary["boot"] == 1
    assert [g["mig_mode"] for g in summary["gpus"]] == [{"current": 0, "pending": 0}, {"current": 1, "pending": 1}]
    assert summary["gpus"][0]["processes"] == []


def test_mig_mode_needs_reset_fault_and_reset_drops_instances(sim_host):
    host = sim_host("A30", 1, faults={"mig_mode_needs_reset": 1})
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([n.nvmlDeviceSetMigMode(h, 1), n.nvmlDeviceGetMigMode(h)])
    """)
    assert got == [16, [0, 1]]
    host.reset_gpu(0)
    run(host, """
        n.nvmlInit()
        n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(0), 0)
    """)
    assert len(host.summary()["gpus"][0]["gpu_instances"]) == 1
    host.reset_gpu(0)
    assert host.summary()["gpus"][0]["gpu_instances"] == []  # MIG devices do not survive a reset


def test_no_profiles_when_mig_off(sim_host):
    host = sim_host("H200", 1, faults=["no_profiles_when_mig_off"])
    code = """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0),
              err(n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, 19)])
        n.nvmlDeviceSetMigMode(h, 1)
    """
    assert run(host, code) == [3, 3]  # NOT_SUPPORTED while MIG is off
    assert run(host, code) == [0, 0]  # the table appears once MIG is on
    host.set_fault(None, "no_profiles_when_mig_off", 0)
    assert host.summary()["faults"] == []


def test_no_permission(sim_host):
    host = sim_host("A100-SXM4-80GB", 2, mig_enabled=True)
    host.set_fault(1, "no_permission")
    got = run(host, """
        n.nvmlInit()
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        emit([err(n.nvmlDeviceSetMigMode, h1, 0), err(n.nvmlDeviceCreateGpuInstance, h1, 19),
              n.nvmlDeviceGetMigMode(h1), err(n.nvmlDeviceCreateGpuInstance, h0, 19)])
    """)
    assert got == [4, 4, [1, 1], 0]  # NO_PERMISSION on GPU 1 only; reads still work
    assert host.summary()["gpus"][1]["faults"] == ["no_permission"]


def test_gi_create_fails_every_time_or_a_number_of_times(sim_host):
    host = sim_host("H100-80GB-HBM3", 2, mig_enabled=True)
    host.set_fault(1, "gi_create_fails")
    code = """
        n.nvmlInit()
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        emit([err(n.nvmlDeviceCreateGpuInstance, h1, 19), err(n.nvmlDeviceCreateGpuInstance, h1, 19),
              err(n.nvmlDeviceCreateGpuInstance, h0, 19), n.nvmlDeviceGetGpuInstanceRemainingCapacity(h1, 19)])
    """
    assert run(host, code) == [999, 999, 0, 7]  # NVML_ERROR_UNKNOWN on GPU 1, every time; nothing created there
    host.set_fault(None, "gi_create_fails", times=1)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([err(n.nvmlDeviceCreateGpuInstance, h, 19), err(n.nvmlDeviceCreateGpuInstance, h, 19)])
    """)
    assert got == [999, 0]  # fails once, then the driver creates again
    faults = sorted((f["gpu"], f["value"], f.get("times")) for f in host.summary()["faults"])
    assert faults == [(-1, 0, 0), (1, 1, None)]  # the spent fault keeps its record, off
    assert len(host.summary()["gpus"][0]["gpu_instances"]) == 2


def test_mig_change_hangs_until_killed_and_others_still_read(sim_host):
    host = sim_host("H200", 1)
    host.set_fault(None, "mig_change_hangs", times=1)
    hung = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import pynvml as n
        n.nvmlInit()
        print("calling", flush=True)
        n.nvmlDeviceSetMigMode(n.nvmlDeviceGetHandleByIndex(0), 1)
        print("returned", flush=True)
    """)], env=host.env, stdout=subprocess.PIPE, text=True)
    try:
        assert hung.stdout.readline().strip() == "calling"
        with pytest.raises(subprocess.TimeoutExpired):
            hung.wait(3)
        # The hanging call gave the state back: another client reads the GPU, and the fault has fired its once.
        assert run(host, """
            n.nvmlInit()
            emit(n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(0)))
        """) == [0, 0]
        assert [(f["value"], f["times"]) for f in host.summary()["faults"]] == [(0, 0)]
    finally:
        hung.terminate()
        out, _err = hung.communicate(timeout=30)
    assert hung.returncode == -15 and "returned" not in out
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([n.nvmlDeviceSetMigMode(h, 1), err(n.nvmlDeviceCreateGpuInstance, h, 19)])
    """)
    assert got == [0, 0]  # spent: the next process changes the GPU


def test_gpu_held_blocks_destroy(sim_host):
    host = sim_host("H200", 1, mig_enabled=True)
    run(host, """
        n.nvmlInit()
        n.nvmlGpuInstanceCreateComputeInstance(n.nvmlDeviceCreateGpuInstance(n.nvmlDeviceGetHandleByIndex(0), 9), 2)
    """)
    gi = host.summary()["gpus"][0]["gpu_instances"][0]
    host.add_process(0, 555, 4096, gi_id=gi["id"], ci_id=0)
    got = run(host, """
        n.nvmlInit()
        gi = n.nvmlDeviceGetGpuInstanceById(n.nvmlDeviceGetHandleByIndex(0), %d)
        ci = n.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
        emit([err(n.nvmlComputeInstanceDestroy, ci), err(n.nvmlGpuInstanceDestroy, gi)])
    """ % gi["id"])
    assert got == [19, 19]
    assert len(host.summary()["gpus"][0]["gpu_instances"]) == 1


def test_one_process_creates_another_sees(sim_host):
    host = sim_host("A100-SXM4-40GB", 1, mig_enabled=True)
    # A long-lived reader (like a node agent) initialises first, then another process changes the hardware.
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, pynvml as n
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        print(n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19), flush=True)
        sys.stdin.readline()
        print(n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19), flush=True)
    """)], env=host.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "7"
        run(host, """
            n.nvmlInit()
            h = n.nvmlDeviceGetHandleByIndex(0)
            for _ in range(3):
                n.nvmlDeviceCreateGpuInstance(h, 19)
        """)
        reader.stdin.write("go\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "4"
    finally:
        reader.communicate(timeout=30)
    got = run(host, """
        n.nvmlInit()
        emit(n.nvmlDeviceGetGpuInstanceRemainingCapacity(n.nvmlDeviceGetHandleByIndex(0), 19))
    """)
    assert got == 4


def test_concurrent_creators_never_overlap(sim_host):
    host = sim_host("H200", 1, mig_enabled=True)
    code = PRELUDE + textwrap.dedent("""
        import sys
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        made = 0
        while not err(n.nvmlDeviceCreateGpuInstance, h, 19):
            made += 1
        print(made)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=host.env, stdout=subprocess.PIPE, text=True)
             for _creator in range(4)]
    made = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert sum(made) == 7
    starts = sorted(gi["placement"]["start"] for gi in host.summary()["gpus"][0]["gpu_instances"])
    assert starts == list(range(7))


def test_simhost_cli(tmp_path, gpusim_lib_dir):
    state = tmp_path / "cli.state"
    cli = [sys.executable, "-m", "tests.testbed.gpusim.simhost"]
    out = subprocess.run(cli + ["create", "--state", str(state), "--model", "NVIDIA H200", "--count", "4",
                                "--fault", "reset_unsupported", "--seed", "7"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("NVIDIA H200") == 4
    subprocess.run(cli + ["add-process", "--state", str(state), "--gpu", "2", "--pid", "31", "--used-mb", "64"],
                   check=True)
    shown = subprocess.run(cli + ["show", "--state", str(state), "--json"], capture_output=True, text=True, check=True)
    summary = hoststate.summary(state)
    assert shown.stdout.strip().startswith("{") and summary["gpus"][2]["processes"][0]["pid"] == 31
    assert summary["gpus"][0]["faults"] == ["reset_unsupported"]
    failed = subprocess.run(cli + ["reset", "--state", str(state), "--gpu", "0"], capture_output=True, text=True,
                            check=False)
    assert failed.returncode == 1 and "not supported" in failed.stderr
    subprocess.run(cli + ["reboot", "--state", str(state)], check=True, capture_output=True)
    assert hoststate.summary(state)["boot"] == 1
    env = subprocess.run(cli + ["env", "--state", str(state)], capture_output=True, text=True, check=True).stdout
    assert "export LD_LIBRARY_PATH=%s" % gpusim_lib_dir in env and "GPUFLEET_SIM_NVML_STATE" in env
    bad = subprocess.run(cli + ["create", "--state", str(state), "--model", "V100", "--count", "1"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "unknown GPU model" in bad.stderr


def test_threads_in_one_process_share_the_library_safely(sim_host):
    host = sim_host("A100-SXM4-80GB", 4, mig_enabled=True)
    got = host.run_python(PRELUDE + textwrap.dedent("""
        import threading
        n.nvmlInit()
        results, errors = [], []
        def worker(index):
            try:
                h = n.nvmlDeviceGetHandleByIndex(index)
                for _round in range(50):
                    gi = n.nvmlDeviceCreateGpuInstance(h, 19)
                    results.append((index, n.nvmlGpuInstanceGetInfo(gi).placement.start))
                    n.nvmlGpuInstanceDestroy(gi)
                    results.append((index, n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19)))
            except n.NVMLError as exc:
                errors.append(str(exc))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        emit({"errors": errors, "values": sorted(set(v for _i, v in results)), "calls": len(results)})
    """)).result
    assert got == {"errors": [], "values": [6, 7], "calls": 400}  # highest free 1g slot is 6; all 7 free after
    assert all(g["gpu_instances"] == [] for g in host.summary()["gpus"])


def test_in_process_use_after_preloading(sim_host, gpusim_lib_dir):
    """One process, several hosts: preload the library, then switch GPUFLEET_SIM_NVML_STATE per nvmlInit."""
    first, second = sim_host("H200", 2), sim_host("A30", 1)
    env = dict(first.env)
    env.pop("LD_LIBRARY_PATH")  # not on the search path: the preload alone must make pynvml find it
    code = textwrap.dedent("""
        import os, sys, pynvml as n
        from tests.testbed.gpusim.simhost import preload_library
        preload_library(sys.argv[1])
        out = []
        for state in sys.argv[2:]:
            os.environ["GPUFLEET_SIM_NVML_STATE"] = state
            n.nvmlInit()
            out.append([n.nvmlDeviceGetCount(), n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(0))])
            n.nvmlShutdown()
        print(out)
    """)
    proc = subprocess.run([sys.executable, "-c", code, gpusim_lib_dir, first.state_path, second.state_path],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[2, 'NVIDIA H200'], [1, 'NVIDIA A30']]"
