"""mig_plan module wiring, run as Ansible runs a module (a Python process reading its arguments file).
mig_plan is pure, so no NVML or cluster is involved."""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
MODULE = os.path.join(ROOT, "plugins", "modules", "mig_plan.py")


def run(tmp_path, **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), ROOT]))
    proc = subprocess.run([sys.executable, MODULE, str(path)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return json.loads(proc.stdout)


def test_issue_example(tmp_path):
    result = run(tmp_path, gpu_model="NVIDIA A100-SXM4-40GB", mig_devices={"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})
    assert result["feasible"] and not result["changed"] and result["layout_changes"]
    assert result["plan"]["gpus"][0]["creation_order"][0] == "3g.20gb"


def test_node_labels_and_strategy(tmp_path):
    labels = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "4"}
    result = run(tmp_path, node_labels=labels, config_name="all-balanced", strategy="mixed")
    assert result["feasible"] and result["expected_resources"]["nvidia.com/mig-1g.18gb"] == 8
    conflict = run(tmp_path, node_labels=labels, config_name="all-balanced", strategy="single")
    assert conflict["failed"] and "one MIG profile per node" in conflict["msg"]
    assert conflict["expected_gfd_labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-INVALID"


def test_config_as_text_and_as_file(tmp_path):
    text = ("version: v1\nmig-configs:\n  inference:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {\"1g.35gb\": 4}\n")
    result = run(tmp_path, gpu_model="NVIDIA H200", gpu_count=2, config_name="inference", config=text)
    assert result["feasible"] and result["plan"]["gpus"][1]["target"] == {"1g.35gb": 4}
    path = tmp_path / "mig.yaml"
    path.write_text(text.replace("4}", "5}"))
    too_many = run(tmp_path, gpu_model="NVIDIA H200", config_name="inference", config=str(path), fail_on_infeasible=False)
    assert not too_many["feasible"] and "maximum of 4" in too_many["reason"]
    missing = run(tmp_path, gpu_model="NVIDIA H200", config_name="inference", config="/nonexistent/mig.yaml")
    assert missing["failed"] and "/nonexistent/mig.yaml does not exist" in missing["msg"]
    unknown = run(tmp_path, gpu_model="NVIDIA H200", config_name="training", config=str(path))
    assert unknown["failed"] and "'training' is not defined in %s" % path in unknown["msg"]
    assert unknown["known"] == ["inference"]


def test_failures_name_what_is_wrong(tmp_path):
    wrong = run(tmp_path, gpu_model="NVIDIA H200", config_name="all-1g.10gb")
    assert wrong["failed"] and wrong["alternatives"] == ["1g.18gb", "1g.18gb+me", "1g.35gb"]
    infeasible = run(tmp_path, gpu_model="NVIDIA A30", mig_devices={"2g.12gb": 2, "1g.6gb": 1})
    assert infeasible["failed"] and infeasible["msg"].startswith("MIG layout is not feasible: GPU 0 (NVIDIA A30)")
    assert infeasible["plan"]["gpus"][0]["alternatives"] == [{"2g.12gb": 2}, {"1g.6gb": 1, "2g.12gb": 1}]
    unknown_model = run(tmp_path, gpu_model="NVIDIA Tesla T4", config_name="all-disabled")
    assert unknown_model["failed"] and "not in the built-in MIG catalog" in unknown_model["msg"]
    empty = run(tmp_path, gpu_info={"gpus": []}, config_name="all-disabled")
    assert empty["failed"] and "no GPU" in empty["msg"]


def test_diff_shows_current_and_target(tmp_path):
    facts = {"gpus": [{"index": 0, "name": "NVIDIA H200", "pci_device_id": "0x233510DE",
                       "mig": {"current": True, "pending": True},
                       "instances": [{"profile": "7g.141gb", "start": 0, "size": 8}]}]}
    result = run(tmp_path, gpu_info=facts, config_name="all-balanced", _ansible_diff=True)
    assert "7g.141gb: 1" in result["diff"]["before"] and "3g.71gb: 1" in result["diff"]["after"]
    assert not result["mode_change_required"] and result["layout_changes"]
