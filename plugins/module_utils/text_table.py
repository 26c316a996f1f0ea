# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The collection's aligned text tables (rollout plan and summary, validation, fleet report) and the short form of
GPU resource counts they show."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import short_resource_name

NO_BREAK_SPACE = u"\u00a0"


def cell(value):
    """A cell's own spaces become no-break spaces (they print as spaces): Ansible's YAML result format
    (callback_result_format=yaml, as ansible.cfg and AWX print) folds a long line at a single space past 80
    columns, so a row with a space inside a cell (``GPU reset``) would wrap onto two lines. Columns are separated
    by two or more spaces, where YAML never folds."""
    return str(value).replace(" ", NO_BREAK_SPACE)


def table_lines(columns, rows, rule=False):
    """Aligned text lines: the header (``columns`` as given), a line of dashes under each column when ``rule``,
    then one line per row; column widths from the content, two spaces between, no trailing spaces."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join("%-*s" % (w, cell(c)) for w, c in zip(widths, columns)).rstrip()]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join("%-*s" % (w, v) for w, v in zip(widths, row)).rstrip() for row in cells)
    return lines


def resource_counts(counts):
    """``{nvidia.com/mig-1g.10gb: 7, nvidia.com/gpu: 0}`` as ``mig-1g.10gb=7``: short names, sorted, zero counts left
    out, ``-`` when none is left."""
    return ", ".join("%s=%s" % (short_resource_name(k), v) for k, v in sorted((counts or {}).items()) if v) or "-"
