"""The gpu_validation_table filter: one row per node, problems listed below."""

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_validation_table import gpu_validation_table


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
