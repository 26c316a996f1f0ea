# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""State of one simulated GPU host: the file the simulated libnvidia-ml.so.1 serves.

The only way tests, the CLI and the node agents touch simulated hardware besides NVML itself.
Format (also parsed and rewritten by src/nvml_sim.c; documented in docs/DEVELOPING.md):
one record per line, ``<kind> key=value key=value ...``; values are percent-encoded
(space -> %20); unknown keys are ignored. Kinds, in file order: ``gpusim`` (format version),
``host``, ``fault``*, then per GPU ``gpu``, ``gip``* (GPU-instance profiles), ``cip``*
(compute-instance profiles), ``gi``*, ``ci``*, ``proc``*.
Writers hold an exclusive flock on ``<state>.lock`` and replace the file atomically;
readers hold a shared one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import fcntl
import json
import os
import random
import tempfile
import uuid as uuidlib
from pathlib import Path
from urllib.parse import quote, unquote

FORMAT_VERSION = 1
CATALOG_PATH = Path(__file__).with_name("catalog.json")

# Faults the simulated NVML honours (scope: one GPU, or gpu=-1 for the whole host).
FAULTS = (
    "reset_unsupported",  # a VM: GPU reset not exposed, a MIG mode change waits for a reboot
    "no_profiles_when_mig_off",  # older driver branches (R535): no GI profiles while MIG is disabled
    "no_permission",  # caller is not root: mode changes and GI/CI create/destroy -> NO_PERMISSION
    "mig_mode_needs_reset",  # bare metal, but the mode change waits for an explicit reset_gpu (nvidia-smi -r)
    "wrong_instance_counts",  # NVML misreports profile instance counts (as on A30); creation keeps the true limits
    "gi_create_fails",  # the driver refuses new GPU instances: nvmlDeviceCreateGpuInstance* -> NVML_ERROR_UNKNOWN
    "mig_change_hangs",  # the driver stops answering: nvmlDeviceSetMigMode and GPU-instance creation never return
    "mig_change_slow",  # value ms: a process's first MIG change (mode or GPU instance) takes that much longer
)

DEFAULT_DRIVER = "580.159.04"  # the H200 reading's driver (ref h200-nvml-reading.json)

# CUDA driver API version per driver branch (nvmlSystemGetCudaDriverVersion); 580 -> 13000 as read on the H200.
_CUDA_BY_BRANCH = {
    450: 11000, 460: 11020, 470: 11040, 510: 11060, 515: 11070, 520: 11080, 525: 12000, 530: 12010,
    535: 12020, 545: 12030, 550: 12040, 555: 12050, 560: 12060, 565: 12070, 570: 12080, 575: 12090,
    580: 13000, 590: 13010, 595: 13020,
}

_INT_FIELDS = {
    "gpusim": {"version"},
    "host": {"cuda", "boot"},
    "fault": {"gpu", "value", "times"},
    "gpu": {"index", "bus", "mem_total", "mem_reserved_mb", "mig_capable", "mig_current", "mig_pending",
            "mem_slices", "compute_slices", "max_mig", "arch", "cc_major", "cc_minor", "sms", "persistence"},
    "gip": {"gpu", "index", "id", "slices", "instances", "sms", "ce", "dec", "enc", "jpeg", "ofa", "mem_mb", "p2p"},
    "cip": {"gpu", "gip", "index", "id", "slices", "instances", "sms"},
    "gi": {"gpu", "id", "profile", "start", "size"},
    "ci": {"gpu", "gi", "id", "profile", "start", "size"},
    "proc": {"gpu", "pid", "used_mb", "gi", "ci"},
}
_PER_GPU_KINDS = ("gip", "cip", "gi", "ci", "proc")
_SAFE = "._:,+-/"


class SimHostError(Exception):
    """A simulated-host operation that real hardware would refuse (message names GPU and reason)."""


# ---------------------------------------------------------------- catalog

def catalog():
    """The hardware catalog (catalog.json) as a dict; a board with ``gi_profiles_from`` gets that model's
    GI/CI profile table (boards of one family share it, e.g. H100 PCIe and H100 80GB HBM3)."""
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        data = json.load(fh)
    models = data["models"]
    for key, entry in models.items():
        source = entry.get("gi_profiles_from")
        if source:
            if source not in models or "gi_profiles" not in models[source]:
                raise SimHostError("catalog model %s: gi_profiles_from %r names no model with a profile table" % (key, source))
            entry["gi_profiles"] = json.loads(json.dumps(models[source]["gi_profiles"]))
    return data


def resolve_model(model):
    """Catalog key for a model given by key ("H200") or NVML name with or without "NVIDIA ", case-insensitive."""
    models = catalog()["models"]
    wanted = model.strip().lower()
    for key, entry in models.items():
        nvml_name = entry["nvml_name"].lower()
        if wanted in (key.lower(), nvml_name, nvml_name.replace("nvidia ", "", 1)):
            return key
    raise SimHostError("unknown GPU model %r; known: %s" % (
        model, ", ".join("%s (%s)" % (k, v["nvml_name"]) for k, v in models.items())))


def cuda_version_for(driver_version):
    """CUDA driver API version (e.g. 13000) a driver branch reports."""
    branch = int(driver_version.split(".")[0])
    known = [b for b in sorted(_CUDA_BY_BRANCH) if b <= branch]
    if not known:
        raise SimHostError("driver %s predates MIG (R450)" % driver_version)
    return _CUDA_BY_BRANCH[known[-1]]


# ---------------------------------------------------------------- file format

def _encode(value):
    return quote(str(value), safe=_SAFE)


def _parse_line(line):
    parts = line.split()
    kind, record = parts[0], {}
    ints = _INT_FIELDS.get(kind, set())
    for token in parts[1:]:
        key, _sep, raw = token.partition("=")
        value = unquote(raw)
        record[key] = int(value, 0) if key in ints else value
    return kind, record


def _format_line(kind, record):
    return kind + "".join(" %s=%s" % (k, _encode(v)) for k, v in record.items()) + "\n"


def parse(text):
    """Parse state text into {'host': {...}, 'faults': [...], 'gpus': [{..., 'gip': [], 'cip': [], 'gi': [], 'ci': [], 'proc': []}]}."""
    state = {"host": {}, "faults": [], "gpus": []}
    seen_header = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, record = _parse_line(line)
        if kind == "gpusim":
            if record.get("version") != FORMAT_VERSION:
                raise SimHostError("state format version %s, expected %d" % (record.get("version"), FORMAT_VERSION))
            seen_header = True
        elif kind == "host":
            state["host"] = record
        elif kind == "fault":
            state["faults"].append(record)
        elif kind == "gpu":
            record.update({k: [] for k in _PER_GPU_KINDS})
            state["gpus"].append(record)
        elif kind in _PER_GPU_KINDS:
            gpu = next((g for g in state["gpus"] if g["index"] == record["gpu"]), None)
            if gpu is None:
                raise SimHostError("line %d: %s record for unknown GPU %s" % (number, kind, record["gpu"]))
            gpu[kind].append(record)
        else:
            raise SimHostError("line %d: unknown record kind %r" % (number, kind))
    if not seen_header:
        raise SimHostError("not a gpusim state file (no 'gpusim %d' header)" % FORMAT_VERSION)
    return state


def render(state):
    """State dict -> file text (the same layout nvml_sim.c writes)."""
    out = ["# simulated GPU host; change it only through tests/testbed/gpusim/hoststate.py or NVML\n",
           _format_line("gpusim", {"version": FORMAT_VERSION}), _format_line("host", state["host"])]
    out += [_format_line("fault", f) for f in state["faults"]]
    for gpu in state["gpus"]:
        out.append(_format_line("gpu", {k: v for k, v in gpu.items() if k not in _PER_GPU_KINDS}))
        for kind in _PER_GPU_KINDS:
            out += [_format_line(kind, r) for r in gpu[kind]]
    return "".join(out)


@contextlib.contextmanager
def _locked(path, exclusive):
    with open(str(path) + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(path, state):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(render(state))
    os.replace(tmp, path)


def load(path):
    """Read a host state file (shared lock)."""
    if not Path(path).exists():
        raise SimHostError("no simulated host state at %s" % path)
    with _locked(path, exclusive=False):
        return parse(Path(path).read_text(encoding="utf-8"))


@contextlib.contextmanager
def _mutate(path):
    if not Path(path).exists():
        raise SimHostError("no simulated host state at %s" % path)
    with _locked(path, exclusive=True):
        state = parse(Path(path).read_text(encoding="utf-8"))
        yield state
        _write(path, state)


def _gpu(state, index):
    for gpu in state["gpus"]:
        if gpu["index"] == index:
            return gpu
    raise SimHostError("GPU %s does not exist on this host (%d GPUs)" % (index, len(state["gpus"])))


def _fault_on(state, index, name):
    return any(f["name"] == name and f["value"] and f["gpu"] in (-1, index) for f in state["faults"])


# ---------------------------------------------------------------- host lifecycle

def _normalise_faults(faults):
    """faults: None, an iterable of names, or {name: value}; host-wide."""
    if not faults:
        return []
    items = faults.items() if isinstance(faults, dict) else ((name, 1) for name in faults)
    out = []
    for name, value in items:
        if name not in FAULTS:
            raise SimHostError("unknown fault %r; known: %s" % (name, ", ".join(FAULTS)))
        out.append({"gpu": -1, "name": name, "value": int(value)})
    return out


def create_host(path, model, count, faults=None, driver_version=DEFAULT_DRIVER, cuda_version=None,
                mig_enabled=False, seed=None):
    """Create (or overwrite) a simulated host with `count` GPUs of `model`; returns summary()."""
    key = resolve_model(model)
    entry = catalog()["models"][key]
    if not 1 <= int(count) <= 16:
        raise SimHostError("GPU count must be 1..16, got %r" % (count,))
    rng = random.Random(seed)
    cuda = cuda_version if cuda_version is not None else cuda_version_for(driver_version)
    state = {
        "host": {"driver": driver_version, "nvml": "%d.%s" % (cuda // 1000, driver_version), "cuda": cuda, "boot": 0},
        "faults": _normalise_faults(faults),
        "gpus": [],
    }
    for index in range(int(count)):
        mode = 1 if (mig_enabled and entry["mig_capable"]) else 0
        gpu = {
            "index": index, "model": key, "name": entry["nvml_name"],
            "uuid": "GPU-%s" % uuidlib.UUID(int=rng.getrandbits(128), version=4),
            "serial": "%013d" % rng.randrange(10 ** 12, 10 ** 13),
            "bus": 0x18 + 0x10 * index,  # one GPU per PCI bus, like an HGX baseboard
            "pci_device_id": entry["pci_device_id"], "pci_subsystem_id": entry["pci_subsystem_id"],
            "mem_total": entry["memory_total_bytes"], "mem_reserved_mb": 0,
            "mig_capable": int(entry["mig_capable"]), "mig_current": mode, "mig_pending": mode,
            "mem_slices": entry["memory_slices"], "compute_slices": entry["compute_slices"],
            "max_mig": entry["max_mig_devices"], "arch": entry["architecture"],
            "cc_major": entry["cuda_compute_capability"][0], "cc_minor": entry["cuda_compute_capability"][1],
            "sms": entry["multiprocessors"], "persistence": 1,
            "vbios": entry["vbios"], "board": entry["board_part_number"],
        }
        gpu.update({k: [] for k in _PER_GPU_KINDS})
        for prof in entry["gi_profiles"] if entry["mig_capable"] else ():
            eng = prof["engines"]
            gpu["gip"].append({
                "gpu": index, "index": prof["index"], "id": prof["id"], "name": prof["name"],
                "slices": prof["slices"], "instances": prof["instances"], "sms": prof["multiprocessors"],
                "ce": eng["copy"], "dec": eng["decoder"], "enc": eng["encoder"], "jpeg": eng["jpeg"],
                "ofa": eng["ofa"], "mem_mb": prof["memory_mb"], "p2p": prof["p2p"],
                "placements": ",".join(prof["placements"]),
            })
            for cip in prof["ci_profiles"]:
                gpu["cip"].append({
                    "gpu": index, "gip": prof["id"], "index": cip["index"], "id": cip["id"], "name": cip["name"],
                    "slices": cip["slices"], "instances": cip["instances"], "sms": cip["multiprocessors"],
                    "placements": ",".join(cip["placements"]),
                })
        state["gpus"].append(gpu)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path, exclusive=True):
        _write(path, state)
    return summary(path)


def set_fault(path, gpu_index, fault, value=1, times=None):
    """Set (value truthy) or clear (0/False) a fault on one GPU, or host-wide with gpu_index=None.

    ``times``: the fault fires that many times, then stays off with its record kept (value 0, times 0), so a
    reader can tell it has fired; honoured by the faults that act inside a change (gi_create_fails,
    mig_change_hangs); None: every time."""
    if fault not in FAULTS:
        raise SimHostError("unknown fault %r; known: %s" % (fault, ", ".join(FAULTS)))
    scope = -1 if gpu_index is None else int(gpu_index)
    with _mutate(path) as state:
        if scope != -1:
            _gpu(state, scope)
        state["faults"] = [f for f in state["faults"] if not (f["name"] == fault and f["gpu"] == scope)]
        if value:
            record = {"gpu": scope, "name": fault, "value": int(value)}
            if times is not None:
                record["times"] = int(times)
            state["faults"].append(record)


def add_process(path, gpu_index, pid, used_mb, gi_id=None, ci_id=None, name="python3"):
    """A compute process holding GPU `gpu_index` (on MIG device gi_id/ci_id when MIG is on)."""
    with _mutate(path) as state:
        gpu = _gpu(state, int(gpu_index))
        if (gi_id is None) != (ci_id is None):
            raise SimHostError("GPU %s: give both gi_id and ci_id, or neither" % gpu_index)
        if gi_id is not None and not any(c["gi"] == gi_id and c["id"] == ci_id for c in gpu["ci"]):
            raise SimHostError("GPU %s: no MIG device GI %s / CI %s to run pid %s on" % (gpu_index, gi_id, ci_id, pid))
        if gi_id is None and gpu["mig_current"] == 1:
            raise SimHostError("GPU %s is in MIG mode: a process runs on a MIG device (give gi_id, ci_id)" % gpu_index)
        if any(p["pid"] == int(pid) for p in gpu["proc"]):
            raise SimHostError("GPU %s: pid %s already listed" % (gpu_index, pid))
        gpu["proc"].append({"gpu": gpu["index"], "pid": int(pid), "used_mb": int(used_mb),
                            "gi": -1 if gi_id is None else int(gi_id), "ci": -1 if ci_id is None else int(ci_id),
                            "name": name})


def remove_processes(path, gpu_index=None, pid=None):
    """Remove processes (all, one GPU's, or one pid); returns how many went."""
    removed = 0
    with _mutate(path) as state:
        for gpu in state["gpus"]:
            if gpu_index is not None and gpu["index"] != int(gpu_index):
                continue
            keep = [p for p in gpu["proc"] if pid is not None and p["pid"] != int(pid)]
            removed += len(gpu["proc"]) - len(keep)
            gpu["proc"] = keep
    return removed


def _clear_mig_devices(gpu):
    gpu["gi"], gpu["ci"] = [], []


def reset_gpu(path, index):
    """Like `nvidia-smi -r -i N`: apply a pending MIG mode; GPU and compute instances do not survive it."""
    with _mutate(path) as state:
        gpu = _gpu(state, int(index))
        if _fault_on(state, gpu["index"], "reset_unsupported"):
            raise SimHostError("GPU %s: GPU reset is not supported on this host (VM); reboot to apply MIG mode %s"
                               % (index, gpu["mig_pending"]))
        if gpu["proc"]:
            raise SimHostError("GPU %s: cannot reset, in use by pids %s" % (index, [p["pid"] for p in gpu["proc"]]))
        gpu["mig_current"] = gpu["mig_pending"]
        _clear_mig_devices(gpu)
    return summary(path)["gpus"][int(index)]


def reboot(path):
    """Simulated host reboot: processes end, pending MIG modes apply, MIG devices are gone (not persistent)."""
    with _mutate(path) as state:
        state["host"]["boot"] = int(state["host"].get("boot", 0)) + 1
        for gpu in state["gpus"]:
            gpu["proc"] = []
            gpu["mig_current"] = gpu["mig_pending"]
            _clear_mig_devices(gpu)
    return summary(path)


# ---------------------------------------------------------------- reading

def _placement(record):
    return {"start": record["start"], "size": record["size"]}


def summary(path):
    """Plain dict of the host: driver, faults, and per GPU mode, GIs (profile, placement), CIs, processes."""
    state = load(path)
    host = state["host"]
    gpus = []
    for gpu in state["gpus"]:
        gip_by_id = {p["id"]: p for p in gpu["gip"]}
        instances = []
        for gi in sorted(gpu["gi"], key=lambda g: g["id"]):
            prof = gip_by_id.get(gi["profile"], {})
            cis = [{"id": ci["id"], "profile_id": ci["profile"], "placement": _placement(ci), "uuid": ci.get("uuid"),
                    "name": next((c["name"] for c in gpu["cip"]
                                  if c["gip"] == gi["profile"] and c["id"] == ci["profile"]), None)}
                   for ci in sorted(gpu["ci"], key=lambda c: c["id"]) if ci["gi"] == gi["id"]]
            instances.append({"id": gi["id"], "profile_id": gi["profile"], "profile": prof.get("name", "")[4:],
                              "placement": _placement(gi), "memory_mb": prof.get("mem_mb"),
                              "compute_instances": cis})
        gpus.append({
            "index": gpu["index"], "model": gpu["model"], "name": gpu["name"], "uuid": gpu["uuid"],
            "serial": gpu["serial"], "pci_bus_id": "00000000:%02X:00.0" % gpu["bus"],
            "pci_device_id": gpu["pci_device_id"], "memory_total_bytes": gpu["mem_total"],
            "mig_capable": bool(gpu["mig_capable"]),
            "mig_mode": {"current": gpu["mig_current"], "pending": gpu["mig_pending"]},
            "faults": sorted({f["name"] for f in state["faults"] if f["value"] and f["gpu"] in (-1, gpu["index"])}),
            "gpu_instances": instances,
            "processes": [{"pid": p["pid"], "used_mb": p["used_mb"], "name": p.get("name", ""),
                           "gi_id": None if p["gi"] < 0 else p["gi"], "ci_id": None if p["ci"] < 0 else p["ci"]}
                          for p in gpu["proc"]],
        })
    return {"driver_version": host["driver"], "nvml_version": host["nvml"], "cuda_driver_version": host["cuda"],
            "boot": host.get("boot", 0), "faults": [dict(f) for f in state["faults"]], "gpus": gpus}
