"""The production pin, tested: the gpu_operator role's chart values for inventories/example and
inventories/sandbox render with `helm template` against NVIDIA's real charts, and the rendered
ClusterPolicy carries what the role asked for.

Charts: NVIDIA's v26.7.0 release (the version the collection pins for production), read-only from
``../shared/nvidia/gpu-operator-v26.7.0`` beside the checkout (GPUFLEET_NVIDIA_DIR moves it), and the
v25.3.4 chart of the Go module the testbed builds the real controller from (tests/testbed/build-operator.sh).
No cluster is needed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.testbed import operator as real_operator
from tests.testbed.cluster import default_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
NVIDIA_DIR = Path(os.environ.get("GPUFLEET_NVIDIA_DIR") or REPO_ROOT.parent / "shared" / "nvidia")
CHART_V26 = NVIDIA_DIR / "gpu-operator-v26.7.0" / "deployments" / "gpu-operator"


def rendered_values(inventory, tmp_path):
    out = tmp_path / ("%s.json" % inventory)
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(REPO_ROOT / "inventories" / inventory),
           str(HERE / "render_values.yml"), "-e", "gpu_operator_values_out=%s" % out]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"))
    proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def helm_template(chart, values, tmp_path):
    values_file = tmp_path / "values.json"
    values_file.write_text(json.dumps(values))
    env = dict(os.environ, HELM_CACHE_HOME=str(tmp_path / "helm"), HELM_CONFIG_HOME=str(tmp_path / "helm"),
               HELM_DATA_HOME=str(tmp_path / "helm"))
    proc = subprocess.run([str(default_bin_dir() / "helm"), "template", "gpu-operator", str(chart), "--namespace",
                           "gpu-operator", "--values", str(values_file)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, "helm template %s failed:\n%s" % (chart, proc.stderr)
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def chart_path(name):
    return CHART_V26 if name == "v26.7.0" else real_operator.chart_dir()


@pytest.mark.parametrize("inventory", ["example", "sandbox"])
@pytest.mark.parametrize("chart", ["v26.7.0", "v25.3.4-module"])
def test_role_values_render_against_nvidia_chart(inventory, chart, tmp_path):
    if chart == "v26.7.0" and not (CHART_V26 / "Chart.yaml").exists():
        pytest.skip("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)
    data = rendered_values(inventory, tmp_path)
    if inventory == "example":
        # The production pin itself.
        assert (data["chart_ref"], data["chart_version"]) == ("nvidia/gpu-operator", "v26.7.0")
    values = data["values"]
    docs = helm_template(chart_path(chart), values, tmp_path)
    policies = [d for d in docs if d.get("kind") == "ClusterPolicy"]
    assert len(policies) == 1, [d.get("kind") for d in docs]
    spec = policies[0]["spec"]
    assert spec["mig"]["strategy"] == values["mig"]["strategy"]
    assert spec["migManager"]["enabled"] == values["migManager"]["enabled"]
    assert spec["migManager"]["config"]["default"] == values["migManager"]["config"]["default"]
    assert spec["driver"]["enabled"] == values["driver"]["enabled"]
    assert spec["toolkit"]["enabled"] == values["toolkit"]["enabled"]
    operator = [d for d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"] == "gpu-operator"]
    assert len(operator) == 1
