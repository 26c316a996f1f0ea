# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""NVML adapter: the collection's only importer of pynvml (nvidia-ml-py).

One ``nvmlInit`` per session (use ``with NvmlSession() as nvml:``), typed reads that return plain
dicts in the shape plan.plan_node reads, and MIG writes for mig_apply. Errors are NvmlError with a
message that says what is missing (library, driver, GPU) and names the GPU where one is involved.
NVML calls and structs: NVIDIA/go-nvml pkg/nvml/nvml.h / pynvml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import time
import traceback

try:
    import pynvml

    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - depends on the host
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import (
    ProfileNameError,
    canonical_profile_name,
    name_from_nvml,
)

# NVML GPU-instance profile index -> name suffix (NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go).
_SUFFIX_BY_INDEX = {0x7: "+me", 0x8: "+me", 0xA: "+gfx", 0xB: "+gfx", 0xC: "+gfx", 0x11: "+gfx",
                    0xD: "-me", 0xE: "-me", 0xF: "+me.all", 0x10: "+me.all"}
# Compute-instance profile that spans a whole GPU instance of N slices (what mig-parted creates).
_CI_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
_MAX_PLACEMENTS = 32


class NvmlError(Exception):
    """NVML could not be used or a call failed; the message is meant for the user."""


def _decode(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _is(exc, *names):
    return any(isinstance(exc, getattr(pynvml, "NVMLError_" + n, ())) for n in names)


class NvmlSession(object):
    """Context manager: nvmlInit on enter, nvmlShutdown on exit."""

    def __init__(self):
        if not HAS_PYNVML:
            raise NvmlError("the nvidia-ml-py Python package (import pynvml) is not installed on this host")
        self._open = False

    def __enter__(self):
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            if _is(exc, "LibraryNotFound"):
                raise NvmlError("NVML library not found: libnvidia-ml.so.1 could not be loaded (%s); is the "
                                "NVIDIA driver installed on this host?" % exc)
            if _is(exc, "DriverNotLoaded"):
                raise NvmlError("NVML: the NVIDIA kernel driver is not loaded (%s)" % exc)
            raise NvmlError("NVML initialisation failed: %s" % exc)
        self._open = True
        return self

    def __exit__(self, *exc_info):
        if self._open:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
            self._open = False
        return False

    # ------------------------------------------------------------------ system

    def system(self):
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {
            "driver_version": _decode(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _decode(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),
        }

    def device_count(self):
        return pynvml.nvmlDeviceGetCount()

    def handle(self, index):
        try:
            return pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            raise NvmlError("GPU %d: cannot get an NVML handle: %s" % (index, exc))

    # ------------------------------------------------------------------ reads

    def read_gpu(self, index, profiles=True, instances=True, processes=True):
        """One GPU as a dict (see gpu_info RETURN)."""
        handle = self.handle(index)
        try:
            pci = pynvml.nvmlDeviceGetPciInfo(handle)
            memory_mb = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            gpu = {
                "index": index,
                "name": _decode(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _decode(pynvml.nvmlDeviceGetUUID(handle)),
                "pci_bus_id": _decode(pci.busId),
                "pci_device_id": "0x%08X" % pci.pciDeviceId,
                "pci_subsystem_id": "0x%08X" % pci.pciSubSystemId,
                "memory_mb": memory_mb,
            }
        except pynvml.NVMLError as exc:
            raise NvmlError("GPU %d: reading device identity failed: %s" % (index, exc))
        try:
            current, pending = pynvml.nvmlDeviceGetMigMode(handle)
            gpu["mig_capable"] = True
            gpu["mig"] = {"current": current == pynvml.NVML_DEVICE_MIG_ENABLE,
                          "pending": pending == pynvml.NVML_DEVICE_MIG_ENABLE}
        except pynvml.NVMLError as exc:
            if not _is(exc, "NotSupported"):
                raise NvmlError("GPU %d (%s): reading MIG mode failed: %s" % (index, gpu["name"], exc))
            gpu["mig_capable"] = False
            gpu["mig"] = {"current": False, "pending": False}
        # NVML lists GPU instances per profile, so instances need the profile table even when it is not returned.
        wants_table = profiles or (instances and gpu["mig"]["current"])
        table = self.profile_table(handle, memory_mb, gpu) if wants_table and gpu["mig_capable"] else []
        gpu["profiles"] = table if profiles else []
        gpu["instances"] = (self.gpu_instances(handle, table, gpu)
                            if instances and gpu["mig"]["current"] and table else [])
        if gpu["profiles"]:
            # NVML's instance counts are wrong on some GPUs (A30): take them from the catalog there. Imported only
            # here: the catalog is a fifth of gpu_info's import time, paid on every host of a read without profiles.
            from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import facts  # pylint: disable=import-outside-toplevel

            gpu["profiles"] = facts.trusted_live_profiles(gpu)
        gpu["processes"] = self.processes(handle, gpu) if processes else []
        return gpu

    def _profile_info(self, handle, index):
        try:
            return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, 2)
        except TypeError:  # nvidia-ml-py before 12.x: no version argument, v1 struct without a name
            return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except pynvml.NVMLError as exc:
            if _is(exc, "FunctionNotFound"):
                return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, 1)
            raise

    def profile_table(self, handle, memory_mb, gpu):
        """GPU-instance profiles the hardware reports, with placements and remaining capacity."""
        table = []
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._profile_info(handle, index)
            except pynvml.NVMLError as exc:
                if _is(exc, "NotSupported", "InvalidArgument"):
                    continue
                raise NvmlError("GPU %d (%s): reading MIG profile %d failed: %s" % (gpu["index"], gpu["name"], index, exc))
            name = _decode(getattr(info, "name", b"")) or ""
            try:
                name = canonical_profile_name(name) if name else name_from_nvml(
                    info.memorySizeMB, info.sliceCount, memory_mb, _SUFFIX_BY_INDEX.get(index, ""))
            except ProfileNameError:
                name = name_from_nvml(info.memorySizeMB, info.sliceCount, memory_mb, _SUFFIX_BY_INDEX.get(index, ""))
            placements = self.placements(handle, info.id, gpu)
            table.append({
                "name": name,
                "id": info.id,
                "index": index,
                "slices": info.sliceCount,
                "memory_slices": max([p["size"] for p in placements] or [0]),
                "instance_count": info.instanceCount,
                "multiprocessors": info.multiprocessorCount,
                "memory_mb": info.memorySizeMB,
                "copy_engines": info.copyEngineCount,
                "decoders": info.decoderCount,
                "encoders": info.encoderCount,
                "jpegs": info.jpegCount,
                "ofas": info.ofaCount,
                "p2p": bool(info.isP2pSupported),
                "placements": placements,
                "remaining": self._remaining(handle, info.id),
            })
        return table

    def placements(self, handle, profile_id, gpu):
        array = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(_MAX_PLACEMENTS)
        try:
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
        except pynvml.NVMLError as exc:
            if _is(exc, "NotSupported"):
                return []
            raise NvmlError("GPU %d (%s): reading placements of profile id %d failed: %s"
                            % (gpu["index"], gpu["name"], profile_id, exc))
        return [{"start": array[i].start, "size": array[i].size} for i in range(count.value)]

    def _remaining(self, handle, profile_id):
        try:
            return pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, profile_id)
        except pynvml.NVMLError:
            return None

    def _gpu_instance_handles(self, handle, profile):
        size = max(profile["instance_count"], 1)
        array = (pynvml.c_nvmlGpuInstance_t * size)()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(handle, profile["id"], array, ctypes.byref(count))
        return [array[i] for i in range(count.value)]

    def gpu_instances(self, handle, profiles, gpu):
        """Current GPU instances [{id, profile, profile_id, start, size, compute_instances}]."""
        result = []
        for profile in profiles:
            try:
                handles = self._gpu_instance_handles(handle, profile)
            except pynvml.NVMLError as exc:
                if _is(exc, "NotSupported", "InvalidArgument"):
                    continue
                raise NvmlError("GPU %d (%s): listing %s instances failed: %s" % (gpu["index"], gpu["name"], profile["name"], exc))
            for gi in handles:
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                result.append({
                    "id": info.id,
                    "profile": profile["name"],
                    "profile_id": info.profileId,
                    "start": info.placement.start,
                    "size": info.placement.size,
                    "compute_instances": self._compute_instances(gi),
                })
        return sorted(result, key=lambda i: (i["start"], i["id"]))

    def _compute_instances(self, gi):
        result = []
        for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except pynvml.NVMLError:
                continue
            size = max(info.instanceCount, 1)
            array = (pynvml.c_nvmlComputeInstance_t * size)()
            count = ctypes.c_uint(0)
            try:
                pynvml.nvmlGpuInstanceGetComputeInstances(gi, info.id, array, ctypes.byref(count))
            except pynvml.NVMLError:
                continue
            for i in range(count.value):
                ci = pynvml.nvmlComputeInstanceGetInfo(array[i])
                result.append({"id": ci.id, "profile_id": ci.profileId, "slices": info.sliceCount,
                               "start": ci.placement.start, "size": ci.placement.size})
        return sorted(result, key=lambda c: c["id"])

    def processes(self, handle, gpu):
        """Processes holding the GPU (compute and graphics) [{pid, name, used_mb, gpu_instance_id,
        compute_instance_id}]."""
        found = {}
        for reader in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = getattr(pynvml, reader)(handle)
            except pynvml.NVMLError as exc:
                if _is(exc, "NotSupported", "FunctionNotFound"):
                    continue
                raise NvmlError("GPU %d (%s): listing processes failed: %s" % (gpu["index"], gpu["name"], exc))
            for proc in procs:
                gi_id = getattr(proc, "gpuInstanceId", None)
                ci_id = getattr(proc, "computeInstanceId", None)
                invalid = 0xFFFFFFFF
                found[proc.pid] = {
                    "pid": proc.pid,
                    "name": self._process_name(proc.pid),
                    "used_mb": (proc.usedGpuMemory // (1024 * 1024)) if proc.usedGpuMemory is not None else None,
                    "gpu_instance_id": None if gi_id in (None, invalid) else gi_id,
                    "compute_instance_id": None if ci_id in (None, invalid) else ci_id,
                }
        return [found[pid] for pid in sorted(found)]

    def _process_name(self, pid):
        try:
            return _decode(pynvml.nvmlSystemGetProcessName(pid))
        except pynvml.NVMLError:
            return None

    # ------------------------------------------------------------------ writes (mig_apply)

    def set_mig_mode(self, index, enabled):
        """Ask for MIG on/off; returns (current, pending) read back afterwards."""
        handle = self.handle(index)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        try:
            pynvml.nvmlDeviceSetMigMode(handle, mode)
        except pynvml.NVMLError as exc:
            if not _is(exc, "InUse", "ResetRequired"):
                raise NvmlError("GPU %d: setting MIG mode %s failed: %s"
                                % (index, "on" if enabled else "off", exc))
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
        return current == pynvml.NVML_DEVICE_MIG_ENABLE, pending == pynvml.NVML_DEVICE_MIG_ENABLE

    def create_instance(self, index, profile, start, size):
        """Create a GPU instance of ``profile`` (a profile-table dict) at start/size, plus the
        compute instance spanning it. Returns the GPU instance id."""
        handle = self.handle(index)
        placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
        try:
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile["id"], ctypes.byref(placement))
        except pynvml.NVMLError as exc:
            raise NvmlError("GPU %d: creating %s at %d:%d failed: %s" % (index, profile["name"], start, size, exc))
        gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
        try:
            ci_index = _CI_PROFILE_FOR_SLICES[profile["slices"]]
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, ci_index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            pynvml.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
        except (pynvml.NVMLError, KeyError) as exc:
            try:
                pynvml.nvmlGpuInstanceDestroy(gi)
            except pynvml.NVMLError:
                pass
            raise NvmlError("GPU %d: creating the compute instance of %s at %d:%d failed: %s"
                            % (index, profile["name"], start, size, exc))
        return gi_id

    def destroy_instance(self, index, gi_id):
        """Destroy GPU instance ``gi_id`` and its compute instances."""
        handle = self.handle(index)
        try:
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
            for index_ci in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, index_ci, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                except pynvml.NVMLError:
                    continue
                array = (pynvml.c_nvmlComputeInstance_t * max(info.instanceCount, 1))()
                count = ctypes.c_uint(0)
                pynvml.nvmlGpuInstanceGetComputeInstances(gi, info.id, array, ctypes.byref(count))
                for i in range(count.value):
                    pynvml.nvmlComputeInstanceDestroy(array[i])
            pynvml.nvmlGpuInstanceDestroy(gi)
        except pynvml.NVMLError as exc:
            raise NvmlError("GPU %d: destroying GPU instance %d failed: %s" % (index, gi_id, exc))


def read_host(profiles=True, instances=True, processes=True, indices=None):
    """Everything gpu_info returns, in one NVML session. ``indices`` limits the GPUs read."""
    started = time.time()
    with NvmlSession() as nvml:
        result = nvml.system()
        count = nvml.device_count()
        wanted = range(count) if indices is None else [i for i in indices if i < count]
        result["gpus"] = [nvml.read_gpu(i, profiles, instances, processes) for i in wanted]
        result["gpu_count"] = count
    result["read_seconds"] = round(time.time() - started, 4)
    return result
