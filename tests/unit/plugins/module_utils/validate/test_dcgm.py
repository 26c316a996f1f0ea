"""dcgm-exporter series as a node's hardware facts, checked by validate_node like gpu_info's (pure logic)."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import metrics
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate import dcgm
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.validate.node import validate_node

from .test_node import MIXED_ALLOC, MIXED_LABELS, node

H100 = "NVIDIA H100 80GB HBM3"


def exposition(node_name, gpus):
    """dcgm-exporter's text for one node: {index: [(gi_id, profile), ...] or []} (an empty list: no MIG)."""
    lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    for index, instances in sorted(gpus.items()):
        base = 'gpu="%d",UUID="GPU-%d",modelName="%s",Hostname="%s"' % (index, index, H100, node_name)
        for gi_id, profile in instances or [(None, None)]:
            extra = ',GPU_I_PROFILE="%s",GPU_I_ID="%d"' % (profile, gi_id) if gi_id is not None else ""
            lines.append("DCGM_FI_DEV_FB_USED{%s%s} 0" % (base, extra))
    return "\n".join(lines)


def samples_of(*texts):
    return [s for text in texts for s in (metrics.sample_from_labels(*p) for p in metrics.parse_exposition(text)) if s]


def test_series_become_hardware_and_a_matching_node_passes():
    text = exposition("gpu-a", {0: [(9, "1g.10gb"), (2, "3g.40gb"), (10, "1g.10gb")], 1: []})
    hardware = dcgm.hardware_by_node(samples_of(text))
    assert hardware == {"gpu-a": {"gpus": [
        {"index": 0, "name": H100, "mig_enabled": True, "mig_devices": ["3g.40gb", "1g.10gb", "1g.10gb"]},
        {"index": 1, "name": H100, "mig_enabled": False, "mig_devices": []}]}}
    # The series carry no memory size: the label is not compared, whatever it says.
    labels = dict(MIXED_LABELS, **{"nvidia.com/gpu.memory": "1"})
    assert validate_node(node("gpu-a", labels, MIXED_ALLOC), "mixed", hardware["gpu-a"])["problems"] == []


def test_a_layout_that_differs_from_the_labels_is_named():
    text = exposition("gpu-a", {0: [(1, "3g.40gb"), (5, "2g.20gb"), (13, "1g.10gb"), (14, "1g.10gb")], 1: []})
    hardware = dcgm.hardware_by_node(samples_of(text, exposition("gpu-b", {0: []})))
    assert sorted(hardware) == ["gpu-a", "gpu-b"]
    problems = validate_node(node("gpu-a", MIXED_LABELS, MIXED_ALLOC), "mixed", hardware["gpu-a"])["problems"]
    assert "label nvidia.com/mig-2g.20gb.count=0 but the hardware has 1 2g.20gb MIG devices" in problems
    assert len(hardware["gpu-b"]["gpus"]) == 1
    problems = validate_node(node("gpu-b", MIXED_LABELS, MIXED_ALLOC), "mixed", hardware["gpu-b"])["problems"]
    assert "label nvidia.com/gpu.count=2 but the hardware has 1 GPUs" in problems


def test_each_series_of_a_gpu_instance_counts_once():
    # Two metrics of the same instance (or a repeated scrape target) must not double its MIG device.
    text = exposition("gpu-a", {0: [(9, "1g.10gb")]})
    hardware = dcgm.hardware_by_node(samples_of(text, text))
    assert hardware["gpu-a"]["gpus"][0]["mig_devices"] == ["1g.10gb"]


def test_a_node_without_series_is_explained():
    reason = dcgm.missing_reason("Prometheus http://127.0.0.1:9090")
    assert reason.startswith("no dcgm-exporter series for the node in Prometheus http://127.0.0.1:9090")
    assert "Hostname" in reason
