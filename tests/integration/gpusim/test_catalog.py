# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Fidelity of the hardware catalog: the real H200 reading and NVIDIA's documented A100 placements."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from pathlib import Path

import pytest

from tests.testbed.gpusim import hoststate

# Copies of the shared reference readings (see data/README.md), so a fresh clone can run this.
REFERENCE = Path(__file__).resolve().parent / "data"
READING = REFERENCE / "h200-nvml-reading.json"
LGIP = REFERENCE / "h200-nvidia-smi-mig-lgip.txt"
LGIPP = REFERENCE / "h200-nvidia-smi-mig-lgipp.txt"

GI_FIELDS = ("id", "isP2pSupported", "sliceCount", "instanceCount", "multiprocessorCount", "copyEngineCount",
             "decoderCount", "encoderCount", "jpegCount", "ofaCount", "memorySizeMB", "name")

# NVIDIA's documented `nvidia-smi mig -lgipp` on A100 (MIG user guide; reference section 5.2).
A100_DOCUMENTED_PLACEMENTS = {
    19: {(s, 1) for s in range(7)}, 20: {(s, 1) for s in range(7)}, 15: {(0, 2), (2, 2), (4, 2), (6, 2)},
    14: {(0, 2), (2, 2), (4, 2)}, 9: {(0, 4), (4, 4)}, 5: {(0, 4)}, 0: {(0, 8)},
}


def _reference(path):
    if not path.exists():
        pytest.fail("reference file missing: %s (the fidelity test needs it)" % path)
    return path.read_text(encoding="utf-8")


def _catalog_profile_as_nvml(prof):
    eng = prof["engines"]
    return {"id": prof["id"], "isP2pSupported": prof["p2p"], "sliceCount": prof["slices"],
            "instanceCount": prof["instances"], "multiprocessorCount": prof["multiprocessors"],
            "copyEngineCount": eng["copy"], "decoderCount": eng["decoder"], "encoderCount": eng["encoder"],
            "jpegCount": eng["jpeg"], "ofaCount": eng["ofa"], "memorySizeMB": prof["memory_mb"], "name": prof["name"]}


def _parse_lgipp(text):
    out = {}
    for m in re.finditer(r"Profile ID\s+(\d+) Placements?\s*:\s*\{([\d,]+)\}:(\d+)", text):
        out[int(m.group(1))] = {(int(s), int(m.group(3))) for s in m.group(2).split(",")}
    return out


def _parse_lgip(text):
    """nvidia-smi mig -lgip rows -> {name: {...}} (two lines per profile)."""
    rows, lines = {}, text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\|\s+\d+\s+(MIG \S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(Yes|No)\s+(\d+)\s+(\d+)\s+(\d+)", line)
        if not m:
            continue
        m2 = re.match(r"\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|", lines[i + 1])
        rows[m.group(1)] = {"id": int(m.group(2)), "free": int(m.group(3)), "total": int(m.group(4)),
                            "gib": m.group(5), "p2p": m.group(6) == "Yes", "sm": int(m.group(7)),
                            "dec": int(m.group(8)), "enc": int(m.group(9)), "ce": int(m2.group(1)),
                            "jpeg": int(m2.group(2)), "ofa": int(m2.group(3))}
    return rows


def test_catalog_models_have_sources_and_a_shape_nvml_allows():
    """Which models exist is checked against NVIDIA's default config in test_models_vs_nvidia.py."""
    cat = hoststate.catalog()
    assert cat["sources"]
    assert [k for k, m in cat["models"].items() if not m["mig_capable"]] == ["T4"]
    for key, model in cat["models"].items():
        assert model["sources"], key
        assert re.fullmatch(r"0x[0-9A-F]{4}10DE", model["pci_device_id"]), key
        assert model["memory_slices"] in ((4, 8) if model["mig_capable"] else (0,)), key
        for prof in model["gi_profiles"]:
            assert any(c["slices"] == prof["slices"] and c["engine_profile"] == "SHARED"
                       for c in prof["ci_profiles"]), (key, prof["name"])  # the C==G profile


def test_h200_catalog_matches_the_real_nvml_reading_field_for_field():
    reading = json.loads(_reference(READING))
    gpu = reading["gpus"][0]
    model = hoststate.catalog()["models"][hoststate.resolve_model(gpu["name"])]
    assert model["nvml_name"] == gpu["name"]
    assert model["memory_total_bytes"] == gpu["mem_total"]
    assert model["vbios"] == gpu["vbios"] and model["board_part_number"] == gpu["board"]
    assert model["architecture"] == gpu["arch"] and model["cuda_compute_capability"] == gpu["cc"]
    real = [p for p in gpu["gi_profiles"] if "err" not in p]
    ours = {p["id"]: _catalog_profile_as_nvml(p) for p in model["gi_profiles"]}
    assert sorted(ours) == sorted(p["id"] for p in real)
    for prof in real:
        assert {k: ours[prof["id"]][k] for k in GI_FIELDS} == {k: prof[k] for k in GI_FIELDS}, prof["name"]
        assert prof["remaining"] == prof["instanceCount"]  # MIG off: full capacity, as the simulator reports


def test_h200_catalog_matches_nvidia_smi_lgip_and_lgipp():
    model = hoststate.catalog()["models"]["H200"]
    assert "0x233510DE" in _reference(LGIPP) and model["pci_device_id"] == "0x233510DE"
    lgip = _parse_lgip(_reference(LGIP))
    assert len(lgip) == len(model["gi_profiles"]) == 7
    for prof in model["gi_profiles"]:
        row = lgip[prof["name"]]
        eng = prof["engines"]
        assert (row["id"], row["total"], row["sm"], row["dec"], row["enc"], row["ce"], row["jpeg"], row["ofa"]) == (
            prof["id"], prof["instances"], prof["multiprocessors"], eng["decoder"], eng["encoder"], eng["copy"],
            eng["jpeg"], eng["ofa"]), prof["name"]
        assert row["gib"] == "%.2f" % (prof["memory_mb"] / 1024.0), prof["name"]
    lgipp = _parse_lgipp(_reference(LGIPP))
    assert lgipp == {p["id"]: {tuple(int(x) for x in s.split(":")) for s in p["placements"]}
                     for p in model["gi_profiles"]}


@pytest.mark.parametrize("model", ["A100-SXM4-40GB", "A100-SXM4-80GB"])
def test_a100_placements_match_the_documented_lgipp(model):
    profiles = hoststate.catalog()["models"][model]["gi_profiles"]
    assert {p["id"]: {tuple(int(x) for x in s.split(":")) for s in p["placements"]} for p in profiles} == \
        A100_DOCUMENTED_PLACEMENTS


def test_h200_through_pynvml_reproduces_the_reading(sim_host):
    """The simulated library, read the way the reading was taken, returns the same values."""
    reading = json.loads(_reference(READING))
    host = sim_host("NVIDIA H200", 1)
    got = host.run_python("""
        import pynvml as n
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        out = {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion(),
               "cuda_driver": n.nvmlSystemGetCudaDriverVersion(), "count": n.nvmlDeviceGetCount(),
               "name": n.nvmlDeviceGetName(h), "mem_total": n.nvmlDeviceGetMemoryInfo(h).total,
               "mig_mode": n.nvmlDeviceGetMigMode(h), "max_mig": n.nvmlDeviceGetMaxMigDeviceCount(h),
               "arch": n.nvmlDeviceGetArchitecture(h), "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
               "persistence": n.nvmlDeviceGetPersistenceMode(h), "vbios": n.nvmlDeviceGetVbiosVersion(h),
               "board": n.nvmlDeviceGetBoardPartNumber(h), "procs": n.nvmlDeviceGetComputeRunningProcesses(h),
               "gi_profiles": []}
        for index in range(16):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except n.NVMLError as err:
                out["gi_profiles"].append({"id": index, "err": "%s(%d)" % (type(err).__name__, err.value)})
                continue
            prof = {f: getattr(info, f) for f, _ in info._fields_}
            prof["name"] = prof["name"].decode() if isinstance(prof["name"], bytes) else prof["name"]
            prof["remaining"] = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id)
            out["gi_profiles"].append(prof)
        emit(out)
    """).result
    real = reading["gpus"][0]
    for key in ("driver", "nvml", "cuda_driver", "count"):
        assert got[key] == reading[key], key
    for key in ("name", "mem_total", "mig_mode", "max_mig", "arch", "cc", "persistence", "vbios", "board", "procs"):
        assert got[key] == real[key], key
    expected = [{k: v for k, v in p.items() if k != "placements_err"} for p in real["gi_profiles"]]
    assert got["gi_profiles"] == expected
