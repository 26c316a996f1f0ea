"""A30: the simulated NVML misreports profile instance counts (fault wrong_instance_counts, as NVML does on
real A30s, which is why mig-parted hard-codes that table); gpu_info corrects them from the catalog and
mig_apply then creates what the GPU really allows."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)

RAW_COUNTS = """
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
counts = {}
for index in (0, 7, 1, 8, 3):  # 1_SLICE, 1_SLICE_REV1 (+me), 2_SLICE, 2_SLICE_REV1 (+me), 4_SLICE
    info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
    counts[index] = info.instanceCount
emit(counts)
"""


def run_module(host, module, args=None):
    env = dict(host.env, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable, "-m", "gpufleet.gpu_operator." + module]
    if args:
        cmd += ["-a", json.dumps(args)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc %d)\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))


def raw_counts(host):
    return dict((int(k), v) for k, v in host.run_python(textwrap.dedent(RAW_COUNTS)).result.items())


def test_fault_reproduces_wrong_counts_and_gpu_info_corrects_them(sim_host):
    host = sim_host("NVIDIA A30", 1, faults=["wrong_instance_counts"])
    # The simulated NVML now misreports the +me profiles (4 and 2 instead of 1); the others stay right.
    assert raw_counts(host) == {0: 4, 7: 4, 1: 2, 8: 2, 3: 1}
    facts = run_module(host, "gpu_info")
    assert not facts.get("failed"), facts
    table = dict((p["name"], p) for p in facts["gpus"][0]["profiles"])
    assert dict((n, p["instance_count"]) for n, p in table.items()) == {
        "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}
    assert table["1g.6gb+me"]["nvml_instance_count"] == 4 and table["2g.12gb+me"]["nvml_instance_count"] == 2
    assert all(p["instance_count_source"] == "catalog" for p in table.values())

    # Planned from the corrected live table, MIG Manager's generated all-1g.6gb.me asks for one instance,
    # which the GPU accepts; NVML's own figure (4) could never be created.
    plan = run_module(host, "mig_plan", {"gpu_info": facts, "config_name": "all-1g.6gb.me"})
    assert plan["feasible"] and plan["plan"]["gpus"][0]["target"] == {"1g.6gb+me": 1}, plan
    applied = run_module(host, "mig_apply", {"config_name": "all-1g.6gb.me"})
    assert applied["changed"] and not applied.get("failed"), applied
    (gpu,) = host.summary()["gpus"]
    assert [i["profile"] for i in gpu["gpu_instances"]] == ["1g.6gb+me"]
    too_many = run_module(host, "mig_apply", {"mig_devices": {"1g.6gb+me": 4}})
    assert too_many["failed"] and "1g.6gb+me" in too_many["msg"], too_many


def test_without_the_fault_nvml_and_the_catalog_agree(sim_host):
    host = sim_host("NVIDIA A30", 1)
    assert raw_counts(host) == {0: 4, 7: 1, 1: 2, 8: 1, 3: 1}
    table = run_module(host, "gpu_info")["gpus"][0]["profiles"]
    assert all(p["instance_count"] == p["nvml_instance_count"] for p in table)
