"""gpu_info, mig_plan and mig_apply run as users run them (ansible / ansible-playbook subprocesses)
against simulated NVML hosts (tests/testbed/gpusim)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import config_name_for
from tests.testbed.gpusim import hoststate
from tests.support import playbook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)


def _env(host):
    env = dict(host.env) if host is not None else dict(os.environ)
    env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    if host is None:
        env.pop("LD_LIBRARY_PATH", None)
        env.pop("GPUFLEET_SIM_NVML_STATE", None)
    return env


def run_module(host, module, args=None, check=False, diff=False):
    """`ansible localhost -m gpufleet.gpu_operator.<module>`; returns the module's result dict."""
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable,
           "-m", "gpufleet.gpu_operator." + module]
    if args:
        cmd += ["-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, env=_env(host), cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON (rc %d)\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    return output["plays"][0]["tasks"][0]["hosts"]["localhost"]


def layout(host):
    """{gpu index: (mig current, pending, sorted [(profile, start, size)])} from the simulator's state."""
    return dict((g["index"], (g["mig_mode"]["current"], g["mig_mode"]["pending"],
                              sorted((i["profile"], i["placement"]["start"], i["placement"]["size"])
                                     for i in g["gpu_instances"])))
                for g in host.summary()["gpus"])


def test_gpu_info_reads_identity_mig_mode_profiles_and_processes(sim_host):
    host = sim_host("NVIDIA H200", 2)
    host.add_process(1, 4242, 1024)
    facts = run_module(host, "gpu_info")
    assert not facts.get("failed"), facts
    assert facts["driver_version"] == "580.159.04" and facts["gpu_count"] == 2
    gpu0, gpu1 = facts["gpus"]
    assert gpu0["name"] == "NVIDIA H200" and gpu0["pci_device_id"] == "0x233510DE" and gpu0["mig_capable"]
    assert gpu0["mig"] == {"current": False, "pending": False} and gpu0["instances"] == []
    model = catalog.get_model("NVIDIA H200")
    assert sorted((p["name"], p["id"], p["instance_count"], tuple((q["start"], q["size"]) for q in p["placements"]))
                  for p in gpu0["profiles"]) == sorted(
        (p["name"], p["id"], p["instance_count"], tuple((q["start"], q["size"]) for q in p["placements"]))
        for p in model["profiles"])
    assert [p["pid"] for p in gpu1["processes"]] == [4242] and gpu0["processes"] == []
    assert run_module(host, "gpu_info", {"gpus": [1], "profiles": False})["gpus"][0]["profiles"] == []


def test_gpu_info_without_nvml_and_without_gpus(sim_host):
    missing = run_module(None, "gpu_info")
    assert missing["failed"] and missing["msg"].startswith("NVML library not found")
    host = sim_host("NVIDIA A30", 1)
    state = hoststate.load(host.state_path)
    state["gpus"] = []
    hoststate._write(host.state_path, state)  # a host whose driver sees no GPU
    empty = run_module(host, "gpu_info")
    assert not empty.get("failed"), empty
    assert empty["gpus"] == [] and empty["gpu_count"] == 0


def test_mig_plan_from_live_facts_and_from_a_model(sim_host):
    host = sim_host("NVIDIA A100-SXM4-40GB", 1)
    facts = run_module(host, "gpu_info")
    result = run_module(host, "mig_plan", {"gpu_info": facts, "config_name": "all-balanced", "strategy": "mixed"})
    assert result["feasible"] and not result["changed"] and result["mode_change_required"]
    assert result["plan"]["gpus"][0]["profiles_source"] == "live"
    assert result["expected_resources"] == {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1,
                                            "nvidia.com/mig-3g.20gb": 1}
    issue_example = run_module(None, "mig_plan", {"gpu_model": "NVIDIA A100-SXM4-40GB",
                                                  "mig_devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}})
    assert issue_example["feasible"] and issue_example["plan"]["gpus"][0]["creation_order"][0] == "3g.20gb"
    wrong = run_module(None, "mig_plan", {"gpu_model": "NVIDIA H200", "gpu_count": 2, "config_name": "all-1g.10gb"})
    assert wrong["failed"] and "its 1-slice profiles are 1g.18gb, 1g.18gb+me, 1g.35gb" in wrong["msg"]
    too_much = run_module(None, "mig_plan", {"gpu_model": "NVIDIA H200", "mig_devices": {"4g.71gb": 1, "3g.71gb": 2},
                                             "fail_on_infeasible": False})
    assert not too_much.get("failed") and not too_much["feasible"] and "GPU 0" in too_much["reason"]
    assert too_much["plan"]["gpus"][0]["alternatives"]


def test_mig_apply_check_mode_writes_nothing_and_reports_the_plan(sim_host):
    host = sim_host("NVIDIA H200", 2)
    before = layout(host)
    result = run_module(host, "mig_apply", {"config_name": "all-balanced"}, check=True, diff=True)
    assert result["changed"] and not result.get("failed"), result
    assert "GPU 0: MIG mode on requested" in result["actions"]
    assert "GPU 1: created 3g.71gb at 4:4" in result["actions"]
    assert "3g.71gb: 1" in result["diff"]["after"] and "mig off" in result["diff"]["before"]
    assert layout(host) == before


def test_mig_apply_applies_the_plan_and_is_idempotent(sim_host):
    host = sim_host("NVIDIA A100-SXM4-40GB", 2)
    first = run_module(host, "mig_apply", {"mig_devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}})
    assert first["changed"] and first["gpu_states"] == {"0": "new", "1": "new"}, first
    planned = sorted((p["profile"], p["start"], p["size"]) for p in first["plan"]["gpus"][0]["placements"])
    assert layout(host)[0] == (1, 1, planned) and layout(host)[1] == (1, 1, planned)
    again = run_module(host, "mig_apply", {"mig_devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}})
    assert not again["changed"] and again["actions"] == []
    # a new layout keeps the 3g.20gb instance that it still wants, where it is
    gi_3g = [i["id"] for i in host.summary()["gpus"][0]["gpu_instances"] if i["profile"] == "3g.20gb"]
    third = run_module(host, "mig_apply", {"mig_devices": {"3g.20gb": 1, "1g.5gb": 4}})
    assert third["changed"] and {"profile": "3g.20gb", "start": 4, "size": 4} in third["plan"]["gpus"][0]["keep"]
    assert [d["profile"] for d in third["plan"]["gpus"][0]["destroy"]] == ["2g.10gb"]
    assert [i["id"] for i in host.summary()["gpus"][0]["gpu_instances"] if i["profile"] == "3g.20gb"] == gi_3g
    assert sorted(p for p, _s, _z in layout(host)[0][2]) == ["1g.5gb"] * 4 + ["3g.20gb"]
    off = run_module(host, "mig_apply", {"config_name": "all-disabled"})
    assert off["changed"] and layout(host) == {0: (0, 0, []), 1: (0, 0, [])}


def test_mig_apply_refuses_while_processes_hold_the_gpu(sim_host):
    host = sim_host("NVIDIA H200", 1)
    run_module(host, "mig_apply", {"config_name": "all-balanced"})
    gi = [i for i in host.summary()["gpus"][0]["gpu_instances"] if i["profile"] == "2g.35gb"][0]
    host.add_process(0, 777, 2048, gi_id=gi["id"], ci_id=gi["compute_instances"][0]["id"])
    before = layout(host)
    refused = run_module(host, "mig_apply", {"config_name": "all-1g.18gb"})
    assert refused["failed"] and "pid 777" in refused["msg"] and "nothing changed" in refused["msg"]
    assert refused["holders"][0]["pid"] == 777
    assert layout(host) == before
    # a layout that keeps the held instance goes ahead
    kept = run_module(host, "mig_apply", {"mig_devices": {"2g.35gb": 1, "1g.18gb": 2}})
    assert kept["changed"] and not kept.get("failed"), kept
    # force goes ahead; NVML refuses to destroy the busy instance, so the GPU is rolled back and says so
    before = layout(host)
    forced = run_module(host, "mig_apply", {"config_name": "all-1g.18gb", "force": True})
    assert [w for w in forced.get("warnings", []) if "pid 777" in w]
    assert forced["failed"] and forced["gpu_states"] == {"0": "old"}, forced
    assert "old layout: [0]" in forced["msg"]
    assert layout(host) == before
    host.remove_processes(0)
    assert run_module(host, "mig_apply", {"config_name": "all-1g.18gb"})["changed"]


def test_mig_apply_reports_a_pending_mode_change_then_finishes_after_reset(sim_host):
    host = sim_host("NVIDIA H200", 1, faults=["mig_mode_needs_reset"])
    first = run_module(host, "mig_apply", {"config_name": "all-1g.18gb"})
    assert first["changed"] and first["reset_required"] and first["reset_required_gpus"] == [0]
    assert first["gpu_states"] == {"0": "pending-reset"}
    assert [w for w in first.get("warnings", []) if "reset" in w]
    assert layout(host) == {0: (0, 1, [])}
    still = run_module(host, "mig_apply", {"config_name": "all-1g.18gb"}, check=True)
    assert still["reset_required"] and still["reset_required_gpus"] == [0]
    host.reset_gpu(0)
    second = run_module(host, "mig_apply", {"config_name": "all-1g.18gb"})
    assert second["changed"] and second["gpu_states"] == {"0": "new"}
    assert layout(host)[0][2] == [("1g.18gb", s, 1) for s in range(7)]
    assert not run_module(host, "mig_apply", {"config_name": "all-1g.18gb"})["changed"]


def test_mig_apply_rejects_bad_layouts_before_any_change(sim_host):
    host = sim_host("NVIDIA H200", 1)
    before = layout(host)
    unknown = run_module(host, "mig_apply", {"mig_devices": {"1g.10gb": 2}})
    assert unknown["failed"] and "1g.10gb is not a profile of NVIDIA H200" in unknown["msg"]
    infeasible = run_module(host, "mig_apply", {"mig_devices": {"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1}})
    assert infeasible["failed"] and "not feasible" in infeasible["msg"] and "compute slices" in infeasible["msg"]
    bad_config = run_module(host, "mig_apply", {"config_name": "x", "config": {"version": "v1", "mig-configs": {
        "x": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": "seven"}}]}}})
    assert bad_config["failed"] and "mig-configs.x[0].mig-devices.1g.18gb" in bad_config["msg"]
    assert layout(host) == before


def test_mig_apply_failure_says_which_gpus_kept_their_layout(sim_host):
    host = sim_host("NVIDIA A30", 2, faults=["no_permission"])
    failed = run_module(host, "mig_apply", {"config_name": "all-balanced"})
    assert failed["failed"] and "GPU 0" in failed["msg"] and "old layout: [0, 1]" in failed["msg"]
    assert failed["gpu_states"] == {"0": "old", "1": "old"}
    assert layout(host) == {0: (0, 0, []), 1: (0, 0, [])}


def test_playbook_flow_facts_plan_apply_verify(sim_host):
    host = sim_host("NVIDIA H100 80GB HBM3", 2)
    env = _env(host)
    env["ANSIBLE_STDOUT_CALLBACK"] = "default"
    proc = playbook.run(os.path.join(ROOT, "tests", "integration", "nvml", "apply_flow.yml"), inventory="localhost,",
                        env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout
    assert layout(host)[1][2] == sorted([("1g.10gb", 0, 1), ("1g.10gb", 1, 1), ("2g.20gb", 2, 2), ("3g.40gb", 4, 4)])


@pytest.mark.parametrize("model", ["NVIDIA A30", "NVIDIA A100-SXM4-80GB"])
def test_generated_named_configs_apply_as_planned(sim_host, model):
    """Configs MIG Manager would generate for the model apply on the simulator exactly as planned."""
    host = sim_host(model, 1)
    for name in ("all-balanced", config_name_for(catalog.get_model(model)["profiles"][0]["name"]), "all-disabled"):
        result = run_module(host, "mig_apply", {"config_name": name})
        assert result["changed"] and not result.get("failed"), (name, result)
        planned = sorted((p["profile"], p["start"], p["size"]) for p in result["plan"]["gpus"][0]["placements"])
        assert layout(host)[0][2] == planned, name
