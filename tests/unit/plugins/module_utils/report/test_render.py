"""The report rendered as a table and as HTML."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import render as report_render

from .test_build import build, h100, pod, samples


@pytest.mark.parametrize("with_metrics", [True, False])
def test_renderings_show_nodes_slices_and_findings(with_metrics):
    metrics = samples("n", [(7, "1g.10gb", 0.01, 2000.0, "ml/a")]) if with_metrics else None
    built = build([h100("n"), h100("m", state="failed")], [pod("a", {"nvidia.com/mig-1g.10gb": "1"}, "n")], metrics)
    table = report_render.render_table(built)
    assert "NODE" in table and "stuck" in table and "ml/a" in table
    html = report_render.render_html(built)
    assert html.count('<svg class="gpu"') == 2
    assert ('data-state="idle"' in html) == with_metrics
    assert 'data-kind="stuck" data-node="m"' in html


def test_a_report_of_no_gpu_node_is_not_shown_as_clean():
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import build as report

    built = report.build_report([], [], connection={"kubeconfig": "/k/config", "context": "dev", "server": "h:6443"})
    table = report_render.render_table(built)
    assert "No findings." not in table
    assert "[W] empty         cluster: no GPU nodes in context dev of kubeconfig /k/config (API server h:6443)" in table
    html = report_render.render_html(built)
    assert '<div class="finding warning" data-kind="empty" data-node="">' in html and "No findings." not in html
