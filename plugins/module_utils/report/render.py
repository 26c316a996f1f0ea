# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report as a terminal table and as one self-contained HTML page (inline CSS and SVG, no scripts,
no external resources), drawn from the dict that report.build_report returns."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from html import escape

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import short_resource_name
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.text_table import resource_counts, table_lines

STATE_COLOURS = {"free": "#d0d4da", "busy": "#2e7d32", "idle": "#f2a900", "allocated": "#1565c0"}
SEVERITY_MARK = {"error": "E", "warning": "W", "info": "i"}


def _percent(value):
    return "-" if value is None else "%.0f%%" % (100.0 * value)


def render_table(report):
    """Plain-text report: nodes, slices, totals per resource and findings."""
    lines = ["GPU fleet report %s (metrics: %s)" % (report["generated_at"], report["metrics_source"]), ""]
    rows = []
    for node in report["nodes"]:
        state = node["mig_config_state"] or "-"
        if node["state_seconds"] is not None and state != "-":
            state += " %ds" % node["state_seconds"]
        rows.append([node["name"], node["model"] or "-", node["mig_strategy"], node["mig_config"] or "-", state,
                     resource_counts(node["allocatable"]), resource_counts(node["requested"]), node["findings"]])
    lines += table_lines(["NODE", "MODEL", "STRATEGY", "MIG.CONFIG", "STATE", "ALLOCATABLE", "REQUESTED", "FINDINGS"],
                         rows, rule=True)
    lines.append("")
    rows = []
    for node in report["nodes"]:
        for gpu in node["gpus"]:
            for piece in gpu["slices"]:
                rows.append([node["name"], gpu["index"], piece["gi_id"] if piece["gi_id"] is not None else "-",
                             piece["profile"], piece["state"], piece["pod"] or "-",
                             _percent(piece["engine_active"]),
                             "-" if piece["fb_used_mib"] is None else "%d MiB" % piece["fb_used_mib"]])
    if rows:
        lines += table_lines(["NODE", "GPU", "GI", "PROFILE", "STATE", "POD", "ENGINE", "FB USED"], rows, rule=True)
        lines.append("")
    rows = [[short_resource_name(name), t["allocatable"], t["requested"], t["idle_allocated"], t["free"]]
            for name, t in sorted(report["totals"]["per_resource"].items())]
    lines += table_lines(["RESOURCE", "ALLOCATABLE", "REQUESTED", "IDLE-ALLOCATED", "FREE SLICES"], rows, rule=True)
    lines.append("")
    if report["findings"]:
        lines.append("FINDINGS")
        for finding in report["findings"]:
            mark = SEVERITY_MARK[finding["severity"]]
            lines.append("[%s] %-13s %s: %s" % (mark, finding["kind"], finding["node"] or "cluster", finding["message"]))
            lines.append("    -> %s" % finding["action"])
    else:
        lines.append("No findings.")
    return "\n".join(lines)


def _memory_slices(model_name):
    model = catalog.get_model(name=model_name) if model_name else None
    return (model or {}).get("memory_slices") or 8


def gpu_svg(node, gpu):
    """One GPU as a strip of memory slices; each MIG instance a box over the slices it occupies."""
    columns = _memory_slices(gpu["model"])
    cell, height, pad = 56, 54, 2
    unplaced = [s for s in gpu["slices"] if s["start"] is None]
    rows = 1 + (1 if unplaced else 0)
    width = columns * cell
    parts = ['<svg class="gpu" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
             'role="img" aria-label="%s GPU %s">' % (width, rows * height + 14, width, rows * height + 14,
                                                     escape(node["name"]), gpu["index"])]
    for column in range(columns):
        parts.append('<rect class="memslice" x="%d" y="0" width="%d" height="%d" fill="#f4f5f7" stroke="#9aa0a6"/>'
                     % (column * cell + pad, cell - 2 * pad, height - pad))
    if not gpu["mig_enabled"]:
        parts.append('<text x="%d" y="%d" text-anchor="middle" class="whole">MIG disabled (whole GPU)</text>'
                     % (width // 2, height // 2 + 4))
    offset = 0
    for piece in gpu["slices"]:
        if piece["start"] is not None:
            x, span, y = piece["start"] * cell, piece["size"] * cell, 0
        else:
            x, span, y = offset, cell, height
            offset += cell
        ink = "#202124" if piece["state"] == "free" else "#ffffff"
        holder = " (%s)" % piece["pod"] if piece["pod"] else ""
        title = "%s GI %s: %s%s, engine %s" % (
            piece["profile"], piece["gi_id"], piece["state"], holder, _percent(piece["engine_active"]))
        caption = piece["state"]
        if piece["engine_active"] is not None:
            caption = "%s %s" % (piece["state"], _percent(piece["engine_active"]))
        parts.append(
            '<g class="slice" data-node="%s" data-gpu="%s" data-profile="%s" data-state="%s" data-pod="%s">'
            '<title>%s</title><rect x="%d" y="%d" width="%d" height="%d" rx="5" fill="%s" stroke="#202124"/>'
            '<text x="%d" y="%d" text-anchor="middle" class="label" fill="%s">%s</text>'
            '<text x="%d" y="%d" text-anchor="middle" class="sub" fill="%s">%s</text></g>'
            % (escape(node["name"]), gpu["index"], escape(piece["profile"]), piece["state"], escape(piece["pod"] or ""),
               escape(title), x + pad + 1, y + pad + 1, span - 2 * pad - 2, height - 2 * pad - 3,
               STATE_COLOURS[piece["state"]], x + span // 2, y + 22, ink, escape(piece["profile"]),
               x + span // 2, y + 40, ink, escape(caption)))
    parts.append('<text x="0" y="%d" class="axis">memory slices 0..%d</text>' % (rows * height + 12, columns - 1))
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#202124;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #dadce0}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #dadce0;padding:4px 8px;font-size:13px;text-align:left}
.node{margin:12px 0 20px}.gpu{margin:4px 12px 4px 0;vertical-align:top}.gpubox{display:inline-block;margin-right:10px}
.label{font-size:12px;font-weight:bold}.sub{font-size:10px}.axis{font-size:10px;fill:#5f6368}
.whole{font-size:12px;fill:#5f6368}.legend span{display:inline-block;padding:2px 8px;margin-right:6px;color:#fff;border-radius:4px}
.finding{margin:6px 0;padding:6px 10px;border-left:4px solid #9aa0a6;background:#f8f9fa}
.finding.error{border-color:#c5221f}.finding.warning{border-color:#f2a900}.finding.info{border-color:#1a73e8}
.kind{font-weight:bold;text-transform:uppercase;font-size:11px;margin-right:6px}
"""


def render_html(report):
    """A self-contained page: legend, cluster totals, findings, and per node a picture of every GPU's slices."""
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           "<title>GPU fleet report %s</title><style>%s</style></head><body>" % (escape(report["generated_at"]), _CSS),
           "<h1>GPU fleet report</h1>",
           '<p id="meta">Generated %s &middot; metrics: %s &middot; %d nodes, %d GPUs</p>'
           % (escape(report["generated_at"]), escape(report["metrics_source"]), report["totals"]["nodes"],
              report["totals"]["gpus"]),
           '<p class="legend">' + "".join('<span style="background:%s">%s</span>' % (colour, state)
                                          for state, colour in STATE_COLOURS.items()) + "</p>",
           '<h2>Cluster totals per profile</h2><table id="totals"><tr><th>resource</th><th>allocatable</th>'
           "<th>requested</th><th>idle but allocated</th><th>free slices</th></tr>"]
    for name, totals in sorted(report["totals"]["per_resource"].items()):
        out.append('<tr data-resource="%s"><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>'
                   % (escape(name), escape(name), totals["allocatable"], totals["requested"],
                      totals["idle_allocated"], totals["free"]))
    out.append("</table>")
    out.append('<h2>Findings (%d)</h2><div id="findings">' % len(report["findings"]))
    for finding in report["findings"]:
        out.append('<div class="finding %s" data-kind="%s" data-node="%s"><span class="kind">%s</span>'
                   "<b>%s</b>: %s<br><i>%s</i></div>"
                   % (finding["severity"], finding["kind"], escape(finding["node"] or ""), finding["kind"],
                      escape(finding["node"] or "cluster"), escape(finding["message"]), escape(finding["action"])))
    if not report["findings"]:
        out.append("<p>No findings.</p>")
    out.append("</div><h2>Nodes</h2>")
    for node in report["nodes"]:
        sharing = node.get("sharing_strategy") or "none"
        out.append('<div class="node" id="node-%s"><h3>%s</h3><p>%s &middot; strategy %s &middot; mig.config %s '
                   "(%s%s)%s &middot; allocatable %s &middot; requested %s</p>"
                   % (escape(node["name"]), escape(node["name"]), escape(node["model"] or "unknown model"),
                      escape(node["mig_strategy"]), escape(node["mig_config"] or "unset"),
                      escape(node["mig_config_state"] or "no state"),
                      ", %ds" % node["state_seconds"] if node["state_seconds"] is not None else "",
                      "" if sharing == "none" else " &middot; shared %s x%s" % (escape(sharing), escape(str(node.get("replicas")))),
                      escape(resource_counts(node["allocatable"])), escape(resource_counts(node["requested"]))))
        for gpu in node["gpus"]:
            out.append('<div class="gpubox"><div>GPU %d &middot; %s</div>%s</div>'
                       % (gpu["index"], escape(gpu["layout_source"]), gpu_svg(node, gpu)))
        out.append("</div>")
    out.append("</body></html>")
    return "\n".join(out)
