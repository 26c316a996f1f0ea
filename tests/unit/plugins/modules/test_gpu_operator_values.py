"""gpu_operator_values end to end: it reads no cluster, so the whole module runs here (its logic is unit-tested in
module_utils/operator/test_values.py)."""

from .module_runner import run_module, warnings


def test_values_configmaps_and_patch_from_the_settings(tmp_path):
    config = {"version": "v1", "mig-configs": {
        "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    result = run_module(tmp_path, "gpu_operator_values", namespace="gpu", mig_strategy="mixed", mig_with_reboot=True,
                        mig_config=config, gpu_models=["NVIDIA H100 80GB HBM3"])
    assert not result.get("failed") and result["changed"] is False
    assert result["chart_values"]["mig"] == {"strategy": "mixed"} and result["values"] == result["chart_values"]
    assert result["values"]["migManager"]["env"] == [{"name": "WITH_REBOOT", "value": "true"}]
    assert result["mig_config_names"] == ["all-1g"]
    assert [c["metadata"]["namespace"] for c in result["configmaps"]] == ["gpu"]
    assert "all-1g" in result["configmaps"][0]["data"]["config.yaml"]


def test_every_problem_is_reported_at_once_before_any_change(tmp_path):
    result = run_module(tmp_path, "gpu_operator_values", mig_strategy="dynamic",
                        mig_config={"version": "v1", "mig-configs": {
                            "typo": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.7gb": 1}}]}},
                        gpu_models=["NVIDIA H100 80GB HBM3"])
    assert result["failed"] and result["msg"].startswith("GPU Operator settings rejected before any change: ")
    assert len(result["problems"]) == 2
    assert any("mig_strategy 'dynamic'" in p for p in result["problems"])
    assert any("profile 1g.7gb exists on no GPU model" in p for p in result["problems"])


def test_mig_config_without_models_is_checked_for_syntax_only_with_a_warning(tmp_path):
    config = {"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}
    result = run_module(tmp_path, "gpu_operator_values", mig_config=config)
    assert not result.get("failed")
    assert any("checked for syntax only" in w for w in warnings(result))


def test_values_files_are_read_and_each_bad_one_is_named(tmp_path):
    good = tmp_path / "site.yaml"
    good.write_text("cdi:\n  enabled: false\ndcgmExporter:\n  serviceMonitor:\n    enabled: true\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("cdi: [unclosed\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += ["a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]" % ((i, i) + (i - 1,) * 10)
              for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\n")
    result = run_module(tmp_path, "gpu_operator_values", values_files=[str(good)])
    assert not result.get("failed"), result
    assert result["values"]["cdi"] == {"enabled": False}
    result = run_module(tmp_path, "gpu_operator_values",
                        values_files=[str(good), str(broken), str(listed), str(bomb), str(tmp_path / "missing.yaml")])
    assert result["failed"] and "Traceback" not in result["msg"]
    named = [str(broken), str(listed), str(bomb), str(tmp_path / "missing.yaml")]
    assert [p.split(" ", 3)[2] for p in result["problems"]] == named
    assert "not valid YAML (line 2)" in result["problems"][0]
    assert "must be a mapping of chart values, got list" in result["problems"][1]
    assert "expands to more than 100000 values" in result["problems"][2]
    assert "cannot be read: No such file or directory" in result["problems"][3]


def test_driver_pools_render_one_nvidiadriver_each_or_are_refused_naming_the_pool(tmp_path):
    pools = [{"name": "hopper", "version": "580.105.08", "nodes_group": "gpu_hopper"},
             {"name": "ampere", "version": "570.195.03", "node_selector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"}}]
    result = run_module(tmp_path, "gpu_operator_values", nvidia_drivers=pools,
                        driver_group_nodes={"gpu_hopper": ["gpu-2", "gpu-1"]}, image_pull_secrets=["ngc"])
    assert not result.get("failed"), result
    assert result["chart_values"]["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert [(p["name"], p["nodes"]) for p in result["nvidia_drivers"]] == [("hopper", ["gpu-1", "gpu-2"]), ("ampere", None)]
    assert result["nvidia_drivers"][0]["manifest"]["spec"] == {
        "driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "580.105.08",
        "nodeSelector": {"gpufleet.io/driver-pool": "hopper"}, "imagePullSecrets": ["ngc"]}
    refused = run_module(tmp_path, "gpu_operator_values", nvidia_drivers=[dict(pools[0], version=580.1), "x"],
                         driver_group_nodes={"gpu_hopper": ["gpu-1"]})
    assert refused["failed"] and refused["msg"].startswith("GPU Operator settings rejected before any change: ")
    assert refused["problems"] == [
        "gpu_operator_nvidia_drivers[0] (pool hopper): version 580.1 is a float; quote it ('580.105.08'), a YAML number "
        "loses digits (580.10 reads as 580.1)",
        "gpu_operator_nvidia_drivers[1] must be a mapping (name, version, nodes_group or node_selector), got str"]
