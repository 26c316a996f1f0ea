"""The gpu_validation_table filter: one row per node, problems listed below."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_validation_table import gpu_validation_table
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import cell


def test_validation_table():
    checks = {"nodes": {
        "b": {"problems": ["device plugin advertises 0 GPU resources"], "product": "NVIDIA-H200", "summary": {"allocatable": {}}},
        "a": {"problems": [], "product": "NVIDIA-H100-80GB-HBM3", "summary": {"allocatable": {"nvidia.com/gpu": 8}}},
        "c": {"problems": [], "product": "NVIDIA-H200", "summary": {"allocatable": {"nvidia.com/gpu": 4}}, "hardware_checked": True},
        "d": {"problems": [], "product": "NVIDIA-H200", "summary": {"allocatable": {"nvidia.com/gpu": 4}}, "hardware_checked": True,
              "hardware_source": "dcgm"},
    }}
    smoke = {"results": [{"node": "a", "resource": "nvidia.com/gpu", "ok": True, "problem": None},
                         {"node": "b", "resource": "nvidia.com/gpu", "ok": False, "problem": "did not finish"}]}
    lines = gpu_validation_table(checks, smoke)
    assert lines[0].split() == ["NODE", "MODEL", "RESOURCES", "HARDWARE", "CHECKS", "SMOKE", "RESULT"]
    assert lines[1].split() == ["a", "NVIDIA-H100-80GB-HBM3", "gpu=8", "not", "read", "ok", "1/1", "ok", "PASS"]
    assert lines[2].split()[-1] == "FAIL"
    assert lines[3].split()[3] == "compared"
    assert lines[4].split()[3] == "dcgm"  # compared with dcgm-exporter's series, not gpu_info on the host
    assert lines[5:] == ["b: device plugin advertises 0 GPU resources", "b: smoke nvidia.com/gpu: did not finish"]


def test_busy_resources_are_noted_not_failed():
    checks = {"nodes": {"h": {"problems": [], "product": "NVIDIA-H200", "summary": {"allocatable": {"nvidia.com/gpu": 4}}}}}
    busy = {"node": "h", "resource": "nvidia.com/gpu", "ok": None, "busy": True,
            "problem": "not run: all 4 nvidia.com/gpu of the node are held by its pods"}
    lines = gpu_validation_table(checks, {"results": [busy]})
    assert lines[1].split()[-3:] == ["1", "busy", "PASS"], lines
    assert lines[2:] == ["h: smoke nvidia.com/gpu not run: all 4 nvidia.com/gpu of the node are held by its pods"]
    ran = dict(busy, resource="nvidia.com/mig-1g.18gb", ok=True, busy=None, problem=None)
    lines = gpu_validation_table(checks, {"results": [ran, busy]})
    assert cell("1/1 ok, 1 busy") in lines[1] and lines[1].split()[-1] == "PASS", lines
