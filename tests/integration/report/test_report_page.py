"""The report's HTML page in a real browser: report.yml on nodes run by the simulated GPU Operator, the page
rendered from the role's Jinja2 template (and from a user's own, gpu_report_html_template) and loaded by headless
Chromium; the test reads the page's content from the DOM the browser built and saves a screenshot as an artifact
under tests/output/report/ (its path is printed)."""

import re
import subprocess

from .conftest import REPO_ROOT, RUN_LABEL, run_report
from .test_fleet_report import chromium, png_size

ARTIFACTS = REPO_ROOT / "tests" / "output" / "report"
CUSTOM_TEMPLATE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>Our fleet</title></head><body>
<h1 id="custom">Our GPUs ({{ gpu_report_page.totals.gpus }})</h1>
<ul>{% for node in gpu_report_page.nodes %}<li class="n" data-node="{{ node.name | e }}">{{ node.name | e }}: {{
node.allocatable | gpufleet.gpu_operator.gpu_report_counts }}</li>{% endfor %}</ul>
{% for node in gpu_report_page.nodes %}{% for gpu in node.gpus %}{{ gpu | gpufleet.gpu_operator.gpu_report_svg(node) }}{% endfor %}{% endfor %}
</body></html>
"""


def gpu_allocatable(testbed, name):
    allocatable = testbed.core.read_node(name).status.allocatable or {}
    return dict((k, int(v)) for k, v in allocatable.items() if k.startswith("nvidia.com/") and v != "0")


def browse(html, name):
    """The DOM headless Chromium built from ``html``, and a screenshot of it saved as tests/output/report/<name>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / ("%s.png" % name)
    if shot.exists():
        shot.unlink()
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"]
    proc = subprocess.run(args + ["--screenshot=%s" % shot, html.as_uri()], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    print("screenshot of %s: %s" % (html, shot))
    assert png_size(shot) == (1400, 1000) and shot.stat().st_size > 10000, "blank or tiny screenshot"
    dom = subprocess.run(args + ["--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    return dom.stdout


def test_report_page_in_chromium_from_the_role_template_and_a_users_own(
        testbed, gpu_cluster, add_gpu_node, report_run, tmp_path):
    mig = add_gpu_node("page-mig", "H100-80GB-HBM3", 1)
    whole = add_gpu_node("page-whole", "A100-SXM4-40GB", 1)
    for name in (mig, whole):
        testbed.wait_for(lambda n=name: gpu_allocatable(testbed, n).get("nvidia.com/gpu") == 1, 90, "GPU on %s" % name)
        gpu_cluster.wait_state(name, "success", timeout=120)
        testbed.kubectl("label", "node", name, "%s=%s" % (RUN_LABEL, report_run.id), "--overwrite")
    testbed.kubectl("label", "node", mig, "nvidia.com/mig.config=all-1g.10gb", "--overwrite")
    testbed.wait_for(lambda: gpu_allocatable(testbed, mig) == {"nvidia.com/mig-1g.10gb": 7}, 120,
                     "7 x 1g.10gb advertised on %s" % mig)
    gpu_cluster.wait_state(mig, "success", timeout=120)
    pod = report_run.pod("page-trainer", {"nvidia.com/mig-1g.10gb": "1"}, node=mig)
    testbed.wait_for(lambda: testbed.core.read_namespaced_pod(pod.split("/")[1], report_run.namespace).status.phase
                     == "Running", 60, "%s Running" % pod)

    proc, report = run_report(testbed, tmp_path / "default", {"gpu_report_label_selector": report_run.selector})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sorted(n["name"] for n in report["nodes"]) == sorted([mig, whole])
    dom = browse(tmp_path / "default" / "out" / "report.html", "report-page")

    assert "<title>GPU fleet report %s</title>" % report["generated_at"] in dom
    assert re.search(r'<p id="meta">Generated [^<]*metrics: none[^<]*2 nodes, 2 GPUs</p>', dom), dom[:3000]
    assert dom.count('<svg class="gpu"') == 2
    # The MIG node: seven 1g.10gb slices, the trainer's on one of them, the others free.
    slices = re.findall(r'<g class="slice" data-node="%s" data-gpu="0" data-profile="([^"]+)" data-state="([^"]+)" '
                        r'data-pod="([^"]*)"' % re.escape(mig), dom)
    assert len(slices) == 7 and {s[0] for s in slices} == {"1g.10gb"}, slices
    assert [(state, holder) for _p, state, holder in slices if holder] == [("allocated", pod)], slices
    assert sorted(state for _p, state, holder in slices if not holder) == ["free"] * 6
    # The whole GPU node, drawn as such, and the totals row the browser parsed.
    section = dom[dom.index('id="node-%s"' % whole):]
    assert "MIG disabled (whole GPU)" in section[:section.index("</svg>")]
    row = re.search(r'<tr data-resource="nvidia.com/mig-1g.10gb">((?:<td>[^<]*</td>)+)</tr>', dom)
    assert row and re.findall(r"<td>([^<]*)</td>", row.group(1)) == ["nvidia.com/mig-1g.10gb", "7", "1", "0", "6"], row
    assert '<div id="findings">' in dom
    page = (tmp_path / "default" / "out" / "report.html").read_text()
    for external in ("<script", "<link", " src=", " href=", "url(", "@import"):
        assert external not in page, "the page must be self-contained, found %r" % external

    # A user's own template, named by gpu_report_html_template, with the collection's filters.
    template = tmp_path / "my-report.html.j2"
    template.write_text(CUSTOM_TEMPLATE)
    proc, _report = run_report(testbed, tmp_path / "custom", {"gpu_report_label_selector": report_run.selector,
                                                              "gpu_report_html_template": str(template)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    dom = browse(tmp_path / "custom" / "out" / "report.html", "report-page-custom")
    assert '<h1 id="custom">Our GPUs (2)</h1>' in dom and "<title>Our fleet</title>" in dom
    assert '<li class="n" data-node="%s">%s: mig-1g.10gb=7</li>' % (mig, mig) in dom
    assert '<li class="n" data-node="%s">%s: gpu=1</li>' % (whole, whole) in dom
    assert dom.count('<svg class="gpu"') == 2 and dom.count('data-node="%s" data-gpu="0"' % mig) == 7
