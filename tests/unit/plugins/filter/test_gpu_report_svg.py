"""The report page's filters: a GPU's MIG slices as SVG, resource counts as text."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_report_counts import gpu_report_counts
from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_report_svg import gpu_report_svg

GPU = {"index": 0, "model": "NVIDIA H100 80GB HBM3", "mig_enabled": True, "layout_source": "label",
       "slices": [{"gi_id": 7, "profile": "1g.10gb", "start": 0, "size": 1, "state": "allocated", "pod": "ns/<a>",
                   "engine_active": None, "fb_used_mib": None},
                  {"gi_id": 8, "profile": "1g.10gb", "start": 1, "size": 1, "state": "free", "pod": None,
                   "engine_active": None, "fb_used_mib": None}]}


def test_svg_has_one_slice_group_per_instance_with_escaped_data():
    svg = gpu_report_svg(GPU, {"name": "gpu-a"})
    assert svg.startswith('<svg class="gpu"') and svg.count('<g class="slice"') == 2
    assert 'data-node="gpu-a" data-gpu="0" data-profile="1g.10gb" data-state="allocated" data-pod="ns/&lt;a&gt;"' in svg
    assert gpu_report_svg(GPU, "gpu-a") == svg


def test_svg_refuses_what_is_not_a_gpu():
    with pytest.raises(AnsibleFilterError, match="expects a GPU"):
        gpu_report_svg({"index": 0}, "gpu-a")


def test_counts():
    assert gpu_report_counts({"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 0}) == "mig-1g.10gb=7"
    assert gpu_report_counts({}) == "-"
