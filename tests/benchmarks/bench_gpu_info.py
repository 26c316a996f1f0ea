# -*- coding: utf-8 -*-
"""Benchmark: gpu_info's NVML read (module_utils/nvml.read_host) against a bare pynvml read of the
same fields, plus the whole module run through `ansible localhost -m` (Ansible's own overhead).

Run with the NVML to measure on the library path (real driver, or the simulator's LD_LIBRARY_PATH and
GPUFLEET_SIM_NVML_STATE). Prints one JSON object. Not a test: figures go to docs/planning.md.
    python tests/benchmarks/bench_gpu_info.py [--repeat 20] [--module]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

import pynvml  # noqa: E402

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import session as nvml  # noqa: E402


def bare_read():
    """The same fields read with plain pynvml calls, no error handling or shaping."""
    pynvml.nvmlInit()
    out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "nvml": pynvml.nvmlSystemGetNVMLVersion(),
           "cuda": pynvml.nvmlSystemGetCudaDriverVersion(), "gpus": []}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        gpu = [pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId,
               pynvml.nvmlDeviceGetMemoryInfo(h).total, pynvml.nvmlDeviceGetMigMode(h)]
        for idx in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, idx, 2)
            except pynvml.NVMLError:
                continue
            arr = (pynvml.c_nvmlGpuInstancePlacement_t * 32)()
            cnt = ctypes.c_uint(32)
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, ctypes.byref(cnt))
            gpu.append((info.name, [(arr[k].start, arr[k].size) for k in range(cnt.value)],
                        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id)))
        gpu.append(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
        out["gpus"].append(gpu)
    pynvml.nvmlShutdown()
    return out


def timed(func, repeat):
    samples = []
    for _run in range(repeat):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(samples), 5), "min_s": round(min(samples), 5),
            "max_s": round(max(samples), 5), "runs": repeat}


def module_run(repeat):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible") if os.path.exists(
        os.path.join(os.path.dirname(sys.executable), "ansible")) else "ansible",
        "localhost", "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
        "-m", "gpufleet.gpu_operator.gpu_info"]

    def run():
        subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True)
    return timed(run, repeat)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--module", action="store_true", help="also time `ansible localhost -m gpu_info`")
    args = parser.parse_args()
    facts = nvml.read_host()
    result = {
        "gpus": len(facts["gpus"]),
        "models": sorted(set(g["name"] for g in facts["gpus"])),
        "driver": facts["driver_version"],
        "bare_pynvml": timed(bare_read, args.repeat),
        "gpu_info_read_host": timed(nvml.read_host, args.repeat),
    }
    result["overhead_ratio"] = round(result["gpu_info_read_host"]["median_s"] / result["bare_pynvml"]["median_s"], 2)
    if args.module:
        result["ansible_module_run"] = module_run(max(1, min(args.repeat, 3)))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
