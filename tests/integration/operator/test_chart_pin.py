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
from pathlib import Path

import pytest
import yaml

from tests.testbed import operator as real_operator
from tests.testbed.cluster import default_bin_dir
from tests.support import playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
NVIDIA_DIR = Path(os.environ.get("GPUFLEET_NVIDIA_DIR") or REPO_ROOT.parent / "shared" / "nvidia")
CHART_V26 = NVIDIA_DIR / "gpu-operator-v26.7.0" / "deployments" / "gpu-operator"


def rendered_values(inventory, tmp_path, extra_vars=None):
    out = tmp_path / ("%s.json" % inventory)
    proc = playbook.run(HERE / "render_values.yml", inventory=REPO_ROOT / "inventories" / inventory,
                        extra_vars=dict(extra_vars or {}, gpu_operator_values_out=str(out)))
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
    return CHART_V26 if name == "v26.7.0" else real_operator.chart_dir(real_operator.UPGRADE_FROM_RELEASE)


@pytest.mark.parametrize("inventory", ["example", "sandbox"])
@pytest.mark.parametrize("chart", ["v26.7.0", "v25.3.4-module"])
def test_role_values_render_against_nvidia_chart(inventory, chart, tmp_path):
    if chart == "v26.7.0" and not (CHART_V26 / "Chart.yaml").exists():
        pytest.fail("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)
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


def test_a_registry_mirror_pull_secrets_and_values_files_reach_every_image_nvidia_s_chart_renders(tmp_path):
    """An air-gapped install: the role's values rendered by NVIDIA's v26.7.0 chart name the mirror in every image and
    repository it renders (operator, ClusterPolicy operands, NFD) and the pull Secret on every pod spec it renders."""
    if not (CHART_V26 / "Chart.yaml").exists():
        pytest.fail("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)
    site = tmp_path / "site-values.yaml"
    site.write_text("cdi:\n  enabled: false\nnfd:\n  enabled: true\n")
    data = rendered_values("example", tmp_path, {
        "gpu_operator_image_registry": "mirror.example.com:5000/gpu", "gpu_operator_image_pull_secrets": ["mirror-pull"],
        "gpu_operator_values_files": [str(site)]})
    docs = helm_template(CHART_V26, data["values"], tmp_path)
    pods = [d["spec"]["template"]["spec"] for d in docs if d.get("kind") in ("Deployment", "DaemonSet", "Job")]
    images = [c["image"] for p in pods for c in p.get("containers", []) + p.get("initContainers", [])]
    assert len(images) >= 3 and all(i.startswith("mirror.example.com:5000/gpu/") for i in images), images
    spec = next(d for d in docs if d.get("kind") == "ClusterPolicy")["spec"]
    repositories = dict((k, v["repository"]) for k, v in spec.items() if isinstance(v, dict) and v.get("repository"))
    assert len(repositories) >= 10 and all(r.startswith("mirror.example.com:5000/gpu/nvidia") for r in repositories.values())
    assert spec["cdi"]["enabled"] is False, "the values file reached the chart"
    components = ("driver", "toolkit", "devicePlugin", "migManager", "gfd", "dcgmExporter", "validator")
    assert all(spec[k].get("imagePullSecrets") == ["mirror-pull"] for k in components)
    assert all(p.get("imagePullSecrets") == [{"name": "mirror-pull"}] for p in pods), pods


# Every ClusterPolicy change the role makes: strategy, MIG Manager config and env, device-plugin config.
PATCH_VARS = {
    "gpu_operator_mig_strategy": "single",
    "gpu_operator_mig_with_reboot": True,
    "gpu_operator_mig_config": {"version": "v1", "mig-configs": {
        "inference": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}},
    "gpu_operator_device_plugin_config": {"shared": {"version": "v1", "sharing": {"timeSlicing": {
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}},
    "gpu_operator_device_plugin_config_default": "shared",
}


def test_cluster_policy_changes_pass_server_side_dry_run_against_the_v26_crd(testbed, tmp_path):
    """The v26.7.0 CRD on a cluster of its own (no controller): the chart's ClusterPolicy for the role's values
    (MIG Manager env included) is created, then the role's ClusterPolicy merge patch passes a server-side dry-run against the CRD's schema."""
    if not (CHART_V26 / "Chart.yaml").exists():
        pytest.fail("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)
    from tests.testbed.cluster import Cluster
    from tests.testbed.pytest_cluster import Testbed

    data = rendered_values("example", tmp_path, PATCH_VARS)
    patch = data["cluster_policy_patch"]
    assert patch["spec"]["mig"]["strategy"] == "single"
    assert patch["spec"]["migManager"]["config"]["name"] and patch["spec"]["devicePlugin"]["config"]["name"]
    # MIG Manager's env goes through the chart values; the ClusterPolicy created from them is validated below
    assert {"name": "WITH_REBOOT", "value": "true"} in data["values"]["migManager"]["env"]
    cluster = Cluster(name="crd26-%d" % os.getpid(), directory=tmp_path / "c", bin_dir=testbed.bin_dir)
    try:
        cluster.up(timeout=90)
        bed = Testbed(cluster.kubeconfig, cluster.bin_dir, tmp_path, cluster=cluster)
        bed.kubectl("apply", "--server-side", "-f", str(CHART_V26 / "crds" / "nvidia.com_clusterpolicies.yaml"))
        bed.wait_for(lambda: bed.kubectl("get", "crd", "clusterpolicies.nvidia.com", "-o",
                                         "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                                         check=False).stdout == "True", 60, "CRD established")
        policy = [d for d in helm_template(CHART_V26, data["values"], tmp_path) if d.get("kind") == "ClusterPolicy"][0]
        assert {"name": "WITH_REBOOT", "value": "true"} in policy["spec"]["migManager"]["env"]
        bed.kubectl("create", "-f", "-", input=json.dumps(policy))
        proc = bed.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "--dry-run=server",
                           "-o", "json", "-p", json.dumps(patch))
        patched = json.loads(proc.stdout)["spec"]
        assert patched["mig"]["strategy"] == "single"
        assert patched["migManager"]["config"] == dict(policy["spec"]["migManager"]["config"],
                                                       **patch["spec"]["migManager"]["config"])
        assert patched["devicePlugin"]["config"]["default"] == "shared"
        # the schema is enforced: a value outside the CRD's enum is refused by the same dry-run
        bad = bed.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "--dry-run=server",
                          "-p", json.dumps({"spec": {"mig": {"strategy": "dynamic"}}}), check=False)
        assert bad.returncode != 0 and "Unsupported value" in bad.stderr, bad.stderr
    finally:
        cluster.down()
