"""gpu_report_keep_unchanged: the report written before, given as report.json's text, kept when only time differs."""

import datetime
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.gpu_operator.plugins.filter.gpu_report_keep_unchanged import gpu_report_keep_unchanged
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report

from ..module_utils.report.test_build import NOW, h100


def built(minutes=0, **kwargs):
    return report.build_report([h100("n", **kwargs)], [], now=NOW + datetime.timedelta(minutes=minutes))


def test_previous_text_is_kept_when_only_the_time_differs():
    written = json.dumps(built(), indent=2, sort_keys=True)
    kept = gpu_report_keep_unchanged(built(minutes=10), written)
    assert kept == json.loads(written)
    assert gpu_report_keep_unchanged(built(minutes=10), written.encode()) == kept
    assert gpu_report_keep_unchanged(built(minutes=10), json.loads(written)) == kept


def test_new_report_when_the_fleet_changed_or_nothing_usable_was_written():
    fresh = built(minutes=10, allocatable={"nvidia.com/mig-1g.10gb": "3"})
    assert gpu_report_keep_unchanged(fresh, json.dumps(built()))["generated_at"] == "2026-12-02T12:10:00Z"
    for previous in ("", None, "{not json", "[1, 2]", "null"):
        assert gpu_report_keep_unchanged(fresh, previous) == fresh


def test_refuses_what_is_not_a_report():
    with pytest.raises(AnsibleFilterError, match="expects a fleet report"):
        gpu_report_keep_unchanged({"nodes": []}, "")
