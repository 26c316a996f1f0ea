# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The unmodified pynvml against the simulated libnvidia-ml.so.1: every call the product and agents use."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .conftest import NVML_PRELUDE, run_snippet

# Prelude for the subprocesses: the shared one plus helpers that list instances and placements.
PRELUDE = NVML_PRELUDE + """
import ctypes
def gis(h, profile_id):
    c = ctypes.c_uint(0); arr = (n.c_nvmlGpuInstance_t * 16)()
    n.nvmlDeviceGetGpuInstances(h, profile_id, arr, ctypes.byref(c))
    return [arr[i] for i in range(c.value)]
def cis(gi, profile_id):
    c = ctypes.c_uint(0); arr = (n.c_nvmlComputeInstance_t * 8)()
    n.nvmlGpuInstanceGetComputeInstances(gi, profile_id, arr, ctypes.byref(c))
    return [arr[i] for i in range(c.value)]
def placements(h, profile_id):
    c = ctypes.c_uint(0)
    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(c))
    arr = (n.c_nvmlGpuInstancePlacement_t * c.value)()
    n.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, arr, ctypes.byref(c))
    return [[p.start, p.size] for p in arr]
def gi_info(gi):
    i = n.nvmlGpuInstanceGetInfo(gi)
    return {"id": i.id, "profile": i.profileId, "start": i.placement.start, "size": i.placement.size}
"""


def run(host, code):
    return run_snippet(host, code, PRELUDE)


def test_system_and_device_identity(sim_host):
    host = sim_host("A100-SXM4-80GB", 2, driver_version="535.183.01")
    s = host.summary()
    got = run(host, """
        before_init = err(n.nvmlDeviceGetCount)
        n.nvmlInit()
        out = {"before_init": before_init, "driver": n.nvmlSystemGetDriverVersion(),
               "nvml": n.nvmlSystemGetNVMLVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion(),
               "cuda2": n.nvmlSystemGetCudaDriverVersion_v2(), "count": n.nvmlDeviceGetCount(), "gpus": []}
        for i in range(out["count"]):
            h = n.nvmlDeviceGetHandleByIndex(i)
            pci = n.nvmlDeviceGetPciInfo(h)
            uuid, serial = n.nvmlDeviceGetUUID(h), n.nvmlDeviceGetSerial(h)
            same = [n.nvmlDeviceGetIndex(x) for x in (n.nvmlDeviceGetHandleByUUID(uuid),
                    n.nvmlDeviceGetHandleBySerial(serial), n.nvmlDeviceGetHandleByPciBusId(pci.busId))]
            mem = n.nvmlDeviceGetMemoryInfo(h)
            mem2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
            out["gpus"].append({"name": n.nvmlDeviceGetName(h), "uuid": uuid, "serial": serial,
                                "minor": n.nvmlDeviceGetMinorNumber(h), "index": n.nvmlDeviceGetIndex(h),
                                "bus_id": pci.busId, "device_id": pci.pciDeviceId, "same": same,
                                "mem": [mem.total, mem.free, mem.used], "mem2": [mem2.total, mem2.free, mem2.used],
                                "is_mig": n.nvmlDeviceIsMigDeviceHandle(h).value,
                                "cc": list(n.nvmlDeviceGetCudaComputeCapability(h))})
        out["bad_index"] = err(n.nvmlDeviceGetHandleByIndex, 2)
        out["unknown_uuid"] = err(n.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000")
        out["unknown_bus"] = err(n.nvmlDeviceGetHandleByPciBusId, "00000000:99:00.0")
        out["missing_symbol"] = err(n.nvmlDeviceGetPowerUsage, n.nvmlDeviceGetHandleByIndex(0))
        out["error_string"] = n.nvmlErrorString(n.NVML_ERROR_IN_USE)
        n.nvmlShutdown()
        out["after_shutdown"] = err(n.nvmlDeviceGetCount)
        emit(out)
    """)
    assert got["before_init"] == 1  # NVML_ERROR_UNINITIALIZED
    assert (got["driver"], got["nvml"], got["cuda"], got["cuda2"]) == ("535.183.01", "12.535.183.01", 12020, 12020)
    assert got["count"] == 2
    for i, gpu in enumerate(got["gpus"]):
        assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
        assert gpu["uuid"] == s["gpus"][i]["uuid"] and gpu["serial"] == s["gpus"][i]["serial"]
        assert gpu["bus_id"] == s["gpus"][i]["pci_bus_id"]
        assert gpu["device_id"] == 0x20B210DE
        assert gpu["minor"] == gpu["index"] == i and gpu["same"] == [i, i, i]
        assert gpu["mem"] == [85899345920, 85899345920, 0] and gpu["mem2"] == gpu["mem"]
        assert gpu["is_mig"] == 0 and gpu["cc"] == [8, 0]
    assert got["bad_index"] == 2 and got["unknown_uuid"] == 6 and got["unknown_bus"] == 6
    assert got["missing_symbol"] == 13  # FUNCTION_NOT_FOUND: absent symbols stay absent
    assert got["error_string"] == "In use by another client"
    assert got["after_shutdown"] == 1


def test_init_without_state_reports_driver_not_loaded(sim_host):
    host = sim_host("H200", 1)
    host.env.pop("GPUFLEET_SIM_NVML_STATE")
    assert run(host, "emit(err(n.nvmlInit))") == 9  # NVML_ERROR_DRIVER_NOT_LOADED


def test_mig_mode_enable_and_disable_on_an_idle_bare_metal_gpu(sim_host):
    host = sim_host("H100 80GB HBM3", 2)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        out = {"before": n.nvmlDeviceGetMigMode(h), "max_before": n.nvmlDeviceGetMaxMigDeviceCount(h)}
        out["activation"] = n.nvmlDeviceSetMigMode(h, n.NVML_DEVICE_MIG_ENABLE)
        out["after"] = n.nvmlDeviceGetMigMode(h)
        out["max_after"] = n.nvmlDeviceGetMaxMigDeviceCount(h)
        out["bad_mode"] = err(n.nvmlDeviceSetMigMode, h, 2)
        out["other_gpu"] = n.nvmlDeviceGetMigMode(n.nvmlDeviceGetHandleByIndex(0))
        emit(out)
    """)
    assert got["before"] == [0, 0] and got["max_before"] == 0
    assert got["activation"] == 0 and got["after"] == [1, 1] and got["max_after"] == 7
    assert got["bad_mode"] == 2 and got["other_gpu"] == [0, 0]
    assert [g["mig_mode"]["current"] for g in host.summary()["gpus"]] == [0, 1]
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        emit([n.nvmlDeviceSetMigMode(h, 0), n.nvmlDeviceGetMigMode(h)])
    """)
    assert got == [0, [0, 0]]


def test_gpu_instance_profiles_placements_and_capacity(sim_host):
    host = sim_host("A30", 1, mig_enabled=True)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"profiles": {}}
        for index in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            code = err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, index)
            if code:
                out["profiles"][index] = code
                continue
            v2 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            v1 = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index, version=1)
            byid = n.nvmlDeviceGetGpuInstanceProfileInfoById(h, v2.id)
            out["profiles"][index] = {"id": v2.id, "v1_id": v1.id, "byid": byid.id, "name": v2.name,
                                      "mem": v1.memorySizeMB, "slices": v1.sliceCount,
                                      "placements": placements(h, v2.id),
                                      "remaining": n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, v2.id)}
        out["beyond"] = err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, n.NVML_GPU_INSTANCE_PROFILE_COUNT)
        out["bad_id_placements"] = err(placements, h, 99)
        c = ctypes.c_uint(1); arr = (n.c_nvmlGpuInstancePlacement_t * 1)()
        out["small_buffer"] = [err(n.nvmlDeviceGetGpuInstancePossiblePlacements, h, 14, arr, ctypes.byref(c)), c.value]
        emit(out)
    """)
    profiles = {int(k): v for k, v in got["profiles"].items()}
    supported = {k: v for k, v in profiles.items() if isinstance(v, dict)}
    assert sorted(supported) == [0, 1, 3, 7, 8]  # A30: 1g, 2g, 4g, 1g+me, 2g+me
    assert all(profiles[k] == 3 for k in profiles if k not in supported)  # NOT_SUPPORTED
    assert supported[0] == {"id": 14, "v1_id": 14, "byid": 14, "name": "MIG 1g.6gb", "mem": 5836, "slices": 1,
                            "placements": [[0, 1], [1, 1], [2, 1], [3, 1]], "remaining": 4}
    assert supported[1]["placements"] == [[0, 2], [2, 2]] and supported[1]["remaining"] == 2
    assert supported[3]["id"] == 0 and supported[3]["placements"] == [[0, 4]]
    assert supported[8]["name"] == "MIG 2g.12gb+me"
    assert got["beyond"] == 2 and got["bad_id_placements"] == 2
    assert got["small_buffer"] == [7, 4]  # INSUFFICIENT_SIZE, count says how many


def test_gpu_and_compute_instance_lifecycle(sim_host):
    host = sim_host("NVIDIA A100-SXM4-40GB", 1, mig_enabled=True)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {}
        g3 = n.nvmlDeviceCreateGpuInstance(h, 9)
        p = n.c_nvmlGpuInstancePlacement_t(); p.start = 0; p.size = 2
        g2 = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, ctypes.byref(p))
        p.start = 1; p.size = 2
        out["bad_placement"] = err(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, 14, ctypes.byref(p))
        p.start = 0; p.size = 2
        out["taken_placement"] = err(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, 14, ctypes.byref(p))
        out["bad_profile"] = err(n.nvmlDeviceCreateGpuInstance, h, 42)
        out["g3"], out["g2"] = gi_info(g3), gi_info(g2)
        out["listed9"] = [gi_info(g)["id"] for g in gis(h, 9)]
        out["by_id"] = gi_info(n.nvmlDeviceGetGpuInstanceById(h, out["g2"]["id"]))
        out["missing_id"] = err(n.nvmlDeviceGetGpuInstanceById, h, 14)
        out["remaining19"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19)
        # compute instances: the C==G profile and a 1c split of the 3g instance
        full = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(g3, n.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                              n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        one = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(g3, 0, 0, version=1)
        out["ci_profiles"] = [[full.id, full.sliceCount, full.instanceCount, full.multiprocessorCount,
                               full.name], [one.id, one.sliceCount, one.instanceCount]]
        out["ci_unsupported"] = err(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, g3, 4, 0)
        out["ci_bad_eng"] = err(n.nvmlGpuInstanceGetComputeInstanceProfileInfo, g3, 0, 1)
        c1 = n.nvmlGpuInstanceCreateComputeInstance(g3, 0)
        c2 = n.nvmlGpuInstanceCreateComputeInstance(g3, 0)
        out["ci_remaining"] = [n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(g3, 0),
                               n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(g3, full.id)]
        i1, i2 = n.nvmlComputeInstanceGetInfo(c1), n.nvmlComputeInstanceGetInfo(c2)
        out["cis"] = [[i.id, i.profileId, i.placement.start, i.placement.size] for i in (i1, i2)]
        out["ci_listed"] = [n.nvmlComputeInstanceGetInfo(c).id for c in cis(g3, 0)]
        out["ci_by_id"] = n.nvmlComputeInstanceGetInfo(n.nvmlGpuInstanceGetComputeInstanceById(g3, 1)).id
        out["destroy_gi_with_ci"] = err(n.nvmlGpuInstanceDestroy, g3)
        cf = n.nvmlGpuInstanceCreateComputeInstance(g2, 1)
        # MIG devices
        out["max_mig"] = n.nvmlDeviceGetMaxMigDeviceCount(h)
        migs = []
        for i in range(out["max_mig"]):
            code = err(n.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if code:
                migs.append(code)
                continue
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
            a = n.nvmlDeviceGetAttributes(m)
            mem = n.nvmlDeviceGetMemoryInfo(m)
            uuid = n.nvmlDeviceGetUUID(m)
            migs.append({"is_mig": n.nvmlDeviceIsMigDeviceHandle(m).value, "gi": n.nvmlDeviceGetGpuInstanceId(m),
                         "ci": n.nvmlDeviceGetComputeInstanceId(m), "name": n.nvmlDeviceGetName(m),
                         "uuid": uuid, "by_uuid": n.nvmlDeviceGetComputeInstanceId(n.nvmlDeviceGetHandleByUUID(uuid)),
                         "parent": n.nvmlDeviceGetUUID(parent), "mem": mem.total,
                         "attrs": [a.multiprocessorCount, a.gpuInstanceSliceCount, a.computeInstanceSliceCount,
                                   a.memorySizeMB, a.sharedDecoderCount]})
        out["migs"] = migs
        out["gi_id_of_full_gpu"] = err(n.nvmlDeviceGetGpuInstanceId, h)
        # tear down
        for c in (c1, c2, cf):
            n.nvmlComputeInstanceDestroy(c)
        out["stale_ci"] = err(n.nvmlComputeInstanceGetInfo, c1)
        n.nvmlGpuInstanceDestroy(g3); n.nvmlGpuInstanceDestroy(g2)
        out["stale_gi"] = err(n.nvmlGpuInstanceGetInfo, g3)
        out["left"] = sum(len(gis(h, pid)) for pid in (0, 5, 9, 14, 15, 19, 20))
        emit(out)
    """)
    assert got["g3"] == {"id": 2, "profile": 9, "start": 4, "size": 4}
    assert got["g2"] == {"id": 3, "profile": 14, "start": 0, "size": 2}
    assert got["bad_placement"] == 2 and got["taken_placement"] == 23 and got["bad_profile"] == 2
    assert got["listed9"] == [2] and got["by_id"] == got["g2"] and got["missing_id"] == 6
    assert got["remaining19"] == 2  # slices 2 and 3 left
    assert got["ci_profiles"] == [[2, 3, 1, 42, "MIG 3g.20gb"], [0, 1, 3]]
    assert got["ci_unsupported"] == 3 and got["ci_bad_eng"] == 2
    assert got["ci_remaining"] == [1, 0]
    assert got["cis"] == [[0, 0, 0, 1], [1, 0, 1, 1]] and got["ci_listed"] == [0, 1] and got["ci_by_id"] == 1
    assert got["destroy_gi_with_ci"] == 19  # IN_USE
    assert got["max_mig"] == 7
    migs = got["migs"]
    assert migs[3:] == [6, 6, 6, 6]  # NOT_FOUND beyond the existing MIG devices
    gpu_uuid = host.summary()["gpus"][0]["uuid"]
    assert [(m["gi"], m["ci"]) for m in migs[:3]] == [(2, 0), (2, 1), (3, 0)]
    assert migs[0]["name"] == "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb"
    assert migs[2]["name"] == "NVIDIA A100-SXM4-40GB MIG 2g.10gb"
    assert all(m["is_mig"] == 1 and m["parent"] == gpu_uuid and m["uuid"].startswith("MIG-") for m in migs[:3])
    assert len({m["uuid"] for m in migs[:3]}) == 3 and [m["by_uuid"] for m in migs[:3]] == [0, 1, 0]
    assert migs[0]["mem"] == 19968 * 1024 * 1024 and migs[2]["mem"] == 9856 * 1024 * 1024
    assert migs[0]["attrs"] == [14, 3, 1, 19968, 2] and migs[2]["attrs"] == [28, 2, 2, 9856, 1]
    assert got["gi_id_of_full_gpu"] == 2
    assert got["stale_ci"] == 2 and got["stale_gi"] == 2 and got["left"] == 0
    assert host.summary()["gpus"][0]["gpu_instances"] == []


def test_instances_need_mig_mode_and_mig_cannot_be_disabled_under_them(sim_host):
    host = sim_host("H200", 1)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"create_off": err(n.nvmlDeviceCreateGpuInstance, h, 19),
               "mig_handle_off": err(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 0)}
        n.nvmlDeviceSetMigMode(h, 1)
        gi = n.nvmlDeviceCreateGpuInstance(h, 0)
        out["disable_with_gi"] = err(n.nvmlDeviceSetMigMode, h, 0)
        out["mode"] = n.nvmlDeviceGetMigMode(h)
        out["second_7g"] = err(n.nvmlDeviceCreateGpuInstance, h, 0)
        out["remaining_1g"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19)
        emit(out)
    """)
    assert got == {"create_off": 3, "mig_handle_off": 3, "disable_with_gi": 19, "mode": [1, 1],
                   "second_7g": 23, "remaining_1g": 0}


def test_running_processes_full_gpu_and_mig_device(sim_host):
    host = sim_host("H100-80GB-HBM3", 1)
    host.add_process(0, 4242, 2048)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        procs = n.nvmlDeviceGetComputeRunningProcesses(h)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        emit({"procs": [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in procs],
              "used": mem.used, "graphics": len(n.nvmlDeviceGetGraphicsRunningProcesses(h)),
              "name": n.nvmlSystemGetProcessName(4242), "other": err(n.nvmlSystemGetProcessName, 1)})
    """)
    assert got == {"procs": [[4242, 2048 * 1024 * 1024, 0xFFFFFFFF, 0xFFFFFFFF]], "used": 2048 * 1024 * 1024,
                   "graphics": 0, "name": "python3", "other": 6}
    host.remove_processes()
    run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        n.nvmlDeviceSetMigMode(h, 1)
        for pid in (19, 19):
            n.nvmlGpuInstanceCreateComputeInstance(n.nvmlDeviceCreateGpuInstance(h, pid), 0)
    """)
    gi_ids = [gi["id"] for gi in host.summary()["gpus"][0]["gpu_instances"]]
    assert gi_ids == [12, 13]
    host.add_process(0, 7, 512, gi_id=12, ci_id=0)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"all": [[p.pid, p.gpuInstanceId, p.computeInstanceId] for p in n.nvmlDeviceGetComputeRunningProcesses(h)]}
        for i in range(2):
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            out[str(n.nvmlDeviceGetGpuInstanceId(m))] = [p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(m)]
        out["destroy_busy_ci"] = err(n.nvmlComputeInstanceDestroy, n.nvmlGpuInstanceGetComputeInstanceById(
            n.nvmlDeviceGetGpuInstanceById(h, 12), 0))
        emit(out)
    """)
    assert got == {"all": [[7, 12, 0]], "12": [7], "13": [], "destroy_busy_ci": 19}


def test_pynvml_is_the_unmodified_package(sim_host):
    host = sim_host("H200", 1)
    got = run(host, """
        import importlib.metadata, os
        n.nvmlInit()
        emit({"version": importlib.metadata.version("nvidia-ml-py"), "file": n.__file__,
              "lib": n.nvmlLib._name,
              "symbols": [hasattr(n.nvmlLib, s) for s in ("nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags",
                                                           "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPciInfo_v3",
                                                           "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                                                           "nvmlDeviceGetComputeRunningProcesses_v3")]})
    """)
    assert got["symbols"] == [True] * 7
    assert got["version"] == "13.615.71"
    assert "site-packages" in got["file"]  # the installed wheel, not a patched copy
    assert got["lib"] == "libnvidia-ml.so.1"  # found through LD_LIBRARY_PATH


def test_non_mig_gpu_reports_not_supported(sim_host):
    host = sim_host("T4", 1)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        emit([n.nvmlDeviceGetName(h), err(n.nvmlDeviceGetMigMode, h), err(n.nvmlDeviceSetMigMode, h, 1),
              err(n.nvmlDeviceGetGpuInstanceProfileInfo, h, 0), err(n.nvmlDeviceGetMaxMigDeviceCount, h),
              err(n.nvmlDeviceCreateGpuInstance, h, 19)])
    """)
    assert got == ["Tesla T4", 3, 3, 3, 3, 3]


def test_versioned_structs_and_compute_instance_placements(sim_host):
    host = sim_host("H200", 1, mig_enabled=True)
    got = run(host, """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {}
        m = n.c_nvmlMemory_v2_t(); m.version = 0x01000028
        out["memory_bad_version"] = n._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(h, ctypes.byref(m))
        fn = n._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
        info = n.c_nvmlGpuInstanceProfileInfo_v2_t(); info.version = 0x07000098
        out["gip_bad_version"] = fn(h, 0, ctypes.byref(info))
        info = n.c_nvmlGpuInstanceProfileInfo_v2_t()
        out["gip_v2"] = [fn(h, 4, ctypes.byref(info)), info.version, info.id, info.name]
        gi = n.nvmlDeviceCreateGpuInstance(h, 0)  # 7g.141gb
        c = ctypes.c_uint(0)
        n.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 2, None, ctypes.byref(c))
        arr = (n.c_nvmlComputeInstancePlacement_t * c.value)()
        n.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 2, arr, ctypes.byref(c))
        out["ci3_placements"] = [[p.start, p.size] for p in arr]
        p = n.c_nvmlComputeInstancePlacement_t(); p.start = 4; p.size = 3
        ci = n.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 2, ctypes.byref(p))
        i = n.nvmlComputeInstanceGetInfo(ci)
        out["ci"] = [i.id, i.profileId, i.placement.start, i.placement.size]
        out["ci_same_placement"] = err(n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, 2, ctypes.byref(p))
        p.start = 1
        out["ci_bad_placement"] = err(n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, 2, ctypes.byref(p))
        out["ci_full_blocked"] = err(n.nvmlGpuInstanceCreateComputeInstance, gi, 4)  # 7c overlaps the 3c
        out["ci_remaining_1c"] = n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0)
        v = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 4, 0)
        out["ci_7c"] = [v.id, v.sliceCount, v.multiprocessorCount, v.sharedOfaCount, v.name]
        emit(out)
    """)
    assert got["memory_bad_version"] == 25 and got["gip_bad_version"] == 25  # ARGUMENT_VERSION_MISMATCH
    assert got["gip_v2"] == [0, 0, 0, "MIG 7g.141gb"]  # version handed back as 0, as the real R580 driver did
    assert got["ci3_placements"] == [[0, 3], [4, 3]]
    assert got["ci"] == [0, 2, 4, 3]
    assert got["ci_same_placement"] == 23 and got["ci_bad_placement"] == 2 and got["ci_full_blocked"] == 23
    assert got["ci_remaining_1c"] == 4  # compute slices 0-3 are free
    assert got["ci_7c"] == [4, 7, 132, 1, "MIG 7g.141gb"]
