# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_validation_table
short_description: Per-node table of GPU validation results
version_added: 0.1.0
description:
  - Combines the result of M(gpufleet.gpu_operator.gpu_node_validate) and, optionally,
    M(gpufleet.gpu_operator.gpu_smoke_test) into text lines, one row per node, then one line per failure.
  - When a node's driver pod comes from an NVIDIADriver resource (driver pools), a C(DRIVER) column names that
    NVIDIADriver and the driver image's tag (C(<version>-<os>)).
positional: smoke
options:
  _input:
    description: The registered result of M(gpufleet.gpu_operator.gpu_node_validate).
    type: dict
    required: true
  smoke:
    description: The registered result of M(gpufleet.gpu_operator.gpu_smoke_test) (may be skipped or empty).
    type: dict
"""

EXAMPLES = r"""
- name: Check the GPU nodes (labels and allocatable only; see gpufleet.gpu_operator.gpu_node_validate for the hardware)
  gpufleet.gpu_operator.gpu_node_validate:
    nodes: [{name: gpu-node-01}, {name: gpu-node-02}]
  delegate_to: localhost
  run_once: true
  register: gpu_validate_checks

- name: Run a smoke pod per node and GPU resource
  gpufleet.gpu_operator.gpu_smoke_test:
    targets: "{{ gpu_validate_checks.smoke_targets }}"
    strategy: "{{ gpu_validate_checks.strategy }}"
  delegate_to: localhost
  run_once: true
  register: gpu_validate_smoke

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ gpu_validate_checks | gpufleet.gpu_operator.gpu_validation_table(gpu_validate_smoke) }}"
"""

RETURN = r"""
_value:
  description: Lines of the table.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import resource_counts, table_lines


def smoke_cell(passed, ran, busy, results):
    """'2/3 ok', '1 busy', both joined, or why nothing ran: no smoke results at all, or check mode's."""
    parts = (["%d/%d ok" % (len(passed), len(ran))] if ran else []) + (["%d busy" % len(busy)] if busy else [])
    return ", ".join(parts) or ("not run" if not results else "check mode")


def driver_cell(driver):
    """'<NVIDIADriver> <image tag>' of a node's driver pod that an NVIDIADriver made, '-' for any other."""
    if not driver or not driver.get("nvidia_driver"):
        return "-"
    image = driver.get("image") or ""
    tag = image.rsplit("@", 1)[-1] if "@" in image else image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return "%s %s" % (driver["nvidia_driver"], tag) if tag else driver["nvidia_driver"]


def validation_rows(checks, smoke=None):
    """[{node, model, resources, checks, driver, smoke, result, failures, notes}] sorted by node."""
    smoke_by_node = {}
    for result in (smoke or {}).get("results") or []:
        smoke_by_node.setdefault(result["node"], []).append(result)
    rows = []
    for node, entry in sorted(((checks or {}).get("nodes") or {}).items()):
        failures = list(entry.get("problems") or [])
        smoke_results = smoke_by_node.get(node, [])
        ran = [r for r in smoke_results if r.get("ok") is not None]
        passed = [r for r in ran if r["ok"]]
        busy = [r for r in smoke_results if r.get("busy")]
        failures.extend("smoke %s: %s" % (r["resource"], r["problem"]) for r in ran if not r["ok"])
        rows.append({
            "node": node,
            "model": entry.get("product") or "-",
            "resources": resource_counts((entry.get("summary") or {}).get("allocatable")),
            "checks": "ok" if not entry.get("problems") else "%d problem(s)" % len(entry["problems"]),
            # Which reading the labels were compared with: gpu_info on the host, or dcgm-exporter's series.
            "hardware": ("dcgm" if entry.get("hardware_source") == "dcgm" else "compared")
            if entry.get("hardware_checked") else "not read",
            "driver": driver_cell(entry.get("driver")),
            "smoke": smoke_cell(passed, ran, busy, smoke_results),
            "result": "PASS" if not failures else "FAIL",
            "failures": failures,
            # Not failures: every unit of the resource was held by the node's pods, so no smoke pod could run.
            "notes": ["smoke %s %s" % (r["resource"], r["problem"]) for r in busy],
        })
    return rows


def gpu_validation_table(checks, smoke=None):
    rows = validation_rows(checks, smoke)
    columns = ("node", "model", "resources", "hardware", "checks", "smoke", "result")
    if any(row["driver"] != "-" for row in rows):
        # The driver is managed per node pool by NVIDIADriver resources: which one, at which image tag.
        columns = ("node", "model", "resources", "driver", "hardware", "checks", "smoke", "result")
    lines = table_lines([c.upper() for c in columns], [[row[c] for c in columns] for row in rows])
    for row in rows:
        for failure in row["failures"]:
            lines.append("%s: %s" % (row["node"], failure))
    for row in rows:
        for note in row["notes"]:
            lines.append("%s: %s" % (row["node"], note))
    return lines


class FilterModule(object):
    def filters(self):
        return {"gpu_validation_table": gpu_validation_table}
