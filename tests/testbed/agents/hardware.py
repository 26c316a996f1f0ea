"""What the simulated operands see of a node's GPUs, read and changed through the unmodified pynvml.

Every call goes to the simulated `libnvidia-ml.so.1`, which serves the host state file named by
GPUFLEET_SIM_NVML_STATE and re-reads it at each nvmlInit. One process serves many nodes, so an
NVML session sets that variable and holds a process-wide lock for its whole duration.
"""

import contextlib
import ctypes
import math
import os
import re
import threading
from dataclasses import dataclass, field

import pynvml

STATE_ENV = "GPUFLEET_SIM_NVML_STATE"
_NVML_LOCK = threading.RLock()

# NVML_GPU_INSTANCE_PROFILE_* index -> (name suffix) per go-nvlib mig_profile.go (reference §5.4, §5.5).
GI_PROFILE_SUFFIX = {
    0x0: "", 0x1: "", 0x2: "", 0x3: "", 0x4: "", 0x5: "", 0x6: "",
    0x7: "+me", 0x8: "+me", 0x9: "",
    0xA: "+gfx", 0xB: "+gfx", 0xC: "+gfx", 0xD: "-me", 0xE: "-me",
    0xF: "+me.all", 0x10: "+me.all", 0x11: "+gfx",
}
GI_PROFILE_COUNT = 0x12
# NVML_COMPUTE_INSTANCE_PROFILE_* index by compute slice count (reference §5.4).
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_PROFILE_COUNT = 9


@dataclass(frozen=True)
class GiProfile:
    index: int          # NVML_GPU_INSTANCE_PROFILE_* constant
    id: int             # device-specific profile id (nvidia-smi "Profile ID")
    name: str           # e.g. "1g.10gb", "1g.10gb+me"
    slices: int
    instance_count: int
    memory_mb: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int


@dataclass(frozen=True)
class MigDevice:
    gpu: int
    gi_id: int
    ci_id: int
    gi_profile: GiProfile
    ci_slices: int
    multiprocessors: int

    @property
    def profile(self):
        """Profile name as GFD and the device plugin print it: <G>g.<GB>gb, or <C>c.<G>g.<GB>gb when C<G."""
        if self.ci_slices == self.gi_profile.slices:
            return self.gi_profile.name
        return "%dc.%s" % (self.ci_slices, self.gi_profile.name)


@dataclass
class Gpu:
    index: int
    name: str
    uuid: str
    pci_device_id: int  # 0xDDDDVVVV as NVML's pciDeviceId
    memory_mb: int
    compute: tuple
    mig_capable: bool
    mig_current: bool = False
    mig_pending: bool = False
    processes: int = 0
    mig_devices: list = field(default_factory=list)
    gi_profiles: list = field(default_factory=list)  # empty when the driver cannot report them

    @property
    def device_id(self):
        """PCI id as mig-parted writes it in device filters, e.g. 0x233510DE."""
        return "0x%08X" % self.pci_device_id


@dataclass
class Host:
    driver_version: str
    cuda_driver_version: int  # e.g. 13000 for 13.0
    gpus: list


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


@contextlib.contextmanager
def nvml_session(state_file):
    """An nvmlInit/nvmlShutdown pair against one simulated host."""
    with _NVML_LOCK:
        os.environ[STATE_ENV] = str(state_file)
        pynvml.nvmlInit()
        try:
            yield
        finally:
            pynvml.nvmlShutdown()


def profile_name(index, slices, memory_mb, total_memory_bytes):
    """GI profile name from its NVML index and memory, as go-nvlib computes it (reference §5.5)."""
    one_gb = 1024 ** 3
    fraction = memory_mb * 1024 * 1024 / float(total_memory_bytes)
    fraction = math.ceil(fraction * 8) / 8
    total_gb = (total_memory_bytes + one_gb - 1) // one_gb
    gb = int(math.floor(fraction * total_gb + 0.5))  # Go math.Round: halves away from zero
    return "%dg.%dgb%s" % (slices, gb, GI_PROFILE_SUFFIX.get(index, ""))


def _gi_profiles(handle, total_memory_bytes):
    profiles = []
    for index in range(GI_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version=1)
        except pynvml.NVMLError:
            continue  # NOT_SUPPORTED / INVALID_ARGUMENT: no such profile on this GPU
        profiles.append(GiProfile(
            index=index, id=info.id,
            name=profile_name(index, info.sliceCount, info.memorySizeMB, total_memory_bytes),
            slices=info.sliceCount, instance_count=info.instanceCount, memory_mb=info.memorySizeMB,
            multiprocessors=info.multiprocessorCount, copy_engines=info.copyEngineCount,
            decoders=info.decoderCount, encoders=info.encoderCount, jpegs=info.jpegCount, ofas=info.ofaCount))
    return profiles


def _list_gpu_instances(handle, profile):
    array = (pynvml.c_nvmlGpuInstance_t * max(profile.instance_count, 1))()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def _compute_instance_handles(gi):
    """(CI profile info, compute instance handle) of every compute instance in a GPU instance.

    Each profile's instances are listed before the first is yielded, so the caller may destroy them.
    """
    for index in range(CI_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, 0, version=1)
        except pynvml.NVMLError:
            continue
        array = (pynvml.c_nvmlComputeInstance_t * max(info.instanceCount, 1))()
        count = ctypes.c_uint(0)
        try:
            pynvml.nvmlGpuInstanceGetComputeInstances(gi, info.id, array, ctypes.byref(count))
        except pynvml.NVMLError:
            continue
        for i in range(count.value):
            yield info, array[i]


def _compute_instances(gi):
    """(ci_id, ci_slices, multiprocessors) of every compute instance in a GPU instance."""
    return [(pynvml.nvmlComputeInstanceGetInfo(ci).id, info.sliceCount, info.multiprocessorCount)
            for info, ci in _compute_instance_handles(gi)]


def _mig_devices(gpu_index, handle, profiles):
    devices = []
    for profile in profiles:
        for gi in _list_gpu_instances(handle, profile):
            gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
            for ci_id, ci_slices, sms in _compute_instances(gi):
                devices.append(MigDevice(gpu=gpu_index, gi_id=gi_id, ci_id=ci_id, gi_profile=profile,
                                         ci_slices=ci_slices, multiprocessors=sms))
    return sorted(devices, key=lambda d: (d.gi_id, d.ci_id))


def _running_processes(handle):
    try:
        return len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except pynvml.NVMLError:
        return 0


def read_host(state_file):
    """Everything GFD, the device plugin and MIG Manager read from NVML on one simulated host."""
    with nvml_session(state_file):
        host = Host(driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
                    cuda_driver_version=pynvml.nvmlSystemGetCudaDriverVersion(), gpus=[])
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            try:
                current, pending = pynvml.nvmlDeviceGetMigMode(handle)
                capable = True
            except pynvml.NVMLError_NotSupported:
                current = pending = 0
                capable = False
            gpu = Gpu(index=index, name=_text(pynvml.nvmlDeviceGetName(handle)),
                      uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                      pci_device_id=pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId,
                      memory_mb=memory // (1024 * 1024),
                      compute=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                      mig_capable=capable, mig_current=bool(current), mig_pending=bool(pending),
                      processes=_running_processes(handle))
            if capable:
                gpu.gi_profiles = _gi_profiles(handle, memory)
                if gpu.mig_current:
                    gpu.mig_devices = _mig_devices(index, handle, gpu.gi_profiles)
            host.gpus.append(gpu)
        return host


class ApplyError(Exception):
    """A step of a MIG apply failed; the message names the GPU and the NVML error."""


def _nvml_error_names():
    names = {}
    for attr in sorted(dir(pynvml)):
        value = getattr(pynvml, attr)
        if attr.startswith("NVML_ERROR_") and isinstance(value, int):
            names.setdefault(value, attr[len("NVML_"):])
    return names


NVML_ERROR_NAMES = _nvml_error_names()


def nvml_error(err):
    """An NVML error as NVIDIA's MIG Manager logs it: go-nvml prints a Return by its constant's name (ERROR_IN_USE)."""
    return NVML_ERROR_NAMES.get(getattr(err, "value", None), str(err))


def set_mig_mode(state_file, gpu_indexes, enabled):
    """nvmlDeviceSetMigMode on each GPU (mig-parted `apply --mode-only`); returns GPUs left pending a reset."""
    wanted = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
    needs_reset = []
    with nvml_session(state_file):
        for index in gpu_indexes:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            current, pending = pynvml.nvmlDeviceGetMigMode(handle)
            if current == wanted and pending == wanted:
                continue
            if not enabled and current:
                _clear(index, handle)
            try:
                pynvml.nvmlDeviceSetMigMode(handle, wanted)
            except pynvml.NVMLError as err:
                raise ApplyError("GPU %d: setting MIG mode %s failed: %s" % (
                    index, "enabled" if enabled else "disabled", nvml_error(err))) from err
            current, pending = pynvml.nvmlDeviceGetMigMode(handle)
            if current != wanted:
                needs_reset.append(index)
    return needs_reset


def _clear(index, handle):
    """Destroy every compute and GPU instance on one GPU (mig-parted ClearMigConfig)."""
    total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    for profile in _gi_profiles(handle, total):
        for gi in _list_gpu_instances(handle, profile):
            for _info, ci in _compute_instance_handles(gi):
                try:
                    pynvml.nvmlComputeInstanceDestroy(ci)
                except pynvml.NVMLError as err:
                    raise ApplyError("GPU %d: destroying a %s compute instance failed: %s"
                                     % (index, profile.name, nvml_error(err))) from err
            try:
                pynvml.nvmlGpuInstanceDestroy(gi)
            except pynvml.NVMLError as err:
                raise ApplyError("GPU %d: destroying a %s GPU instance failed: %s"
                                 % (index, profile.name, nvml_error(err))) from err


def _create_in_order(handle, order):
    for profile, ci_slices in order:
        gi = pynvml.nvmlDeviceCreateGpuInstance(handle, profile.id)  # no placement: the driver picks (§4.4)
        ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, CI_PROFILE_BY_SLICES[ci_slices], 0, version=1)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)


def apply_mig_devices(state_file, gpu_index, wanted):
    """Create the wanted MIG devices on one MIG-enabled GPU as mig-parted does (reference §4.4).

    `wanted` is a list of (GiProfile, ci_slices), one per device. Starting from mig-parted's order (creation_order),
    each distinct permutation is tried as mig-parted walks them (mig_parted_permutations) after clearing the GPU,
    until one creates every instance; on total failure the GPU is cleared. The driver picks each placement, so the
    order decides where the instances land.
    """
    with nvml_session(state_file):
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        _clear(gpu_index, handle)
        if not wanted:
            return
        last_error = None
        for order in mig_parted_permutations(creation_order(wanted)):
            try:
                _create_in_order(handle, order)
                return
            except pynvml.NVMLError as err:
                last_error = err
                _clear(gpu_index, handle)
        raise ApplyError("GPU %d: no creation order of %s fits: %s" % (
            gpu_index, ", ".join(p.name if c == p.slices else "%dc.%s" % (c, p.name) for p, c in wanted),
            nvml_error(last_error)))


def creation_order(wanted):
    """mig-parted's first creation order (NVIDIA/mig-parted v0.15.0 pkg/types MigConfig.Flatten): more GPU slices
    first, then more compute slices, then attributes (+me, +gfx) in descending string order. Profiles equal in all
    three keep their order here; in mig-parted they follow Go's map order, which varies from run to run."""
    def key(item):
        profile, ci_slices = item
        attributes = ",".join(re.findall(r"[+-](\w+)", profile.name))
        return profile.slices, ci_slices, attributes
    return sorted(wanted, key=key, reverse=True)


def mig_parted_permutations(items):
    """Every distinct ordering of ``items`` in the order mig-parted tries them (pkg/mig/config iteratePermutations-
    UntilSuccess): position i takes, in turn, each later item unlike those it already tried there (a swap, kept for the
    positions after it, undone after them)."""
    items = list(items)

    def walk(i):
        if i >= len(items):
            yield list(items)
            return
        for j in range(i, len(items)):
            if items[j] not in items[i:j]:
                items[i], items[j] = items[j], items[i]
                yield from walk(i + 1)
                items[i], items[j] = items[j], items[i]
    return walk(0)
