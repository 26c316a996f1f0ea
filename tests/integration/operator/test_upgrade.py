"""Operator upgrade with the gpu_operator role: NVIDIA's v25.3.4 (chart and controller from the GPU Operator Go module)
installed, then upgraded to NVIDIA's v26.7.0 (chart and controller built from its release source), both controllers
real: the testbed runs the controller of the chart that is installed (tests/testbed/operator.py), so the binary
switches with the chart on upgrade and on rollback.

The tests build on each other in file order on one cluster (the operator_sandbox fixture): install and a MIG layout,
the refusals (a node in `pending`, a held rollout Lease: nothing changes), check mode (nothing changes), a failed
upgrade rolled back (ClusterPolicy, values and every node's MIG layout equal to those before the run), the upgrade (ClusterPolicy
ready again, every node's MIG layout unchanged) and an idempotent re-run.
"""

import datetime
import shutil

import pytest
from kubernetes import client

from tests.integration.operator.test_chart_pin import CHART_V26
from tests.integration.operator.test_operator import set_mig_config, wait_for
from tests.testbed import operator as real_operator
from tests.testbed.gpusim import hoststate

# The sandbox starts from v25.3.4's chart and controller. Its MIG Manager is the simulator: v25.3.4 ships mig-parted
# v0.12, whose source the testbed does not build, and NVIDIA's v0.15.0 cannot run under v25.3.4's RBAC (it lists pods
# at the cluster scope). The MIG layouts kept across the upgrade are the simulated hardware's.
SANDBOX_RELEASE = real_operator.UPGRADE_FROM_RELEASE
SANDBOX_MIG_MANAGER = "sim"
# NVIDIA's v26.7.0 chart from the release source the testbed builds the v26.7.0 controller from (built by the
# operator_sandbox fixture, which starts the controller supervisor).
CHART_V26_BUILD = real_operator.cache_dir("v26.7.0") / "chart" / "gpu-operator"
# v26.7.0's chart enables dcgm-exporter's ServiceMonitor by default; the testbed has no Prometheus Operator CRDs, and
# the v26.7.0 controller then skips the ServiceMonitor (v25.3.4's kept the ClusterPolicy notReady): chart defaults.
# An upgrade re-rolls every operand DaemonSet, so the ClusterPolicy takes longer to be ready again than after the
# sandbox's install (120 s there): a loaded CI machine took over 120 s once. The role's own default is 900 s.
UPGRADE = {"gpu_operator_chart_ref": str(CHART_V26_BUILD), "gpu_operator_wait_timeout": 360}
# The same upgrade with a value the API server refuses: the operator Deployment's pod template names a PriorityClass
# that is not a DNS-1123 subdomain, so `helm upgrade` fails when it applies the Deployment (a failed revision).
FAILING_UPGRADE = dict(UPGRADE, gpu_operator_extra_values={"operator": {"priorityClassName": "Not_A_Valid_Name"}})
# CRD resourceVersions after the v25.3.4 install (test_install_v25_module_chart_and_a_mig_layout).
INSTALLED_CRDS = {}
GPU_NODES = ("op-a100", "op-h100", "op-h200")
MIG_LABELS = ("nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/mig.strategy")


@pytest.fixture(autouse=True)
def nvidia_chart_present():
    """The v26.7.0 chart is test data the project ships beside the checkout: missing, the tests fail (never skip)."""
    if not (CHART_V26 / "Chart.yaml").exists():
        pytest.fail("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)


def crd_versions(sandbox):
    """name -> resourceVersion of every nvidia.com / resource.nvidia.com CRD."""
    crds = client.ApiextensionsV1Api(sandbox.bed.api_client()).list_custom_resource_definition().items
    return dict((c.metadata.name, c.metadata.resource_version) for c in crds if c.spec.group.endswith("nvidia.com"))


def mig_layout(sandbox):
    """Per GPU node: the MIG labels and the simulated GPUs' MIG mode and devices (what MIG Manager applied)."""
    layout = {}
    for name in GPU_NODES:
        labels = sandbox.agents.labels(name)
        state = hoststate.load(sandbox.agents.state_path(name))
        layout[name] = {"labels": dict((k, labels.get(k)) for k in MIG_LABELS),
                        "allocatable": dict((k, v) for k, v in sandbox.agents.allocatable(name).items()
                                            if k.startswith("nvidia.com/")),
                        "gpus": [dict((k, v) for k, v in gpu.items() if k in ("gi", "ci") or "mig" in k.lower())
                                 for gpu in state["gpus"]]}
    return layout


def ran(result, task):
    """Results of ``task`` that were not skipped."""
    return [res for _host, res in result.task_results(task) if not res.get("skipped")]


def revision(sandbox):
    releases = sandbox.releases()
    assert len(releases) == 1, releases
    return releases[0]["revision"], releases[0]["chart"], releases[0]["app_version"]


def controllers_started(sandbox):
    """The release of each controller the testbed started, in order (the supervisor's log names the build's VERSION:
    source, release[, commit])."""
    log = sandbox.agents.controller.log_file.read_text(errors="replace")
    return [line.split("starting the controller ", 1)[1].split(": ", 1)[0].split()[1] for line in log.splitlines()
            if "starting the controller " in line]


def assert_nothing_changed(sandbox, before_revision, before_crds):
    assert revision(sandbox) == before_revision
    assert crd_versions(sandbox) == before_crds
    assert "gpuclusters.nvidia.com" not in before_crds  # new in v26.7.0: not applied


def test_install_v25_module_chart_and_a_mig_layout(operator_sandbox):
    result = operator_sandbox.site("--tags", "operator")
    assert result.rc == 0, result
    assert result.task_results("Report the operator upgrade")  # present, and skipped: a fresh install is no upgrade
    assert not ran(result, "Report the operator upgrade") and not ran(result, "Apply the target chart's CRDs")
    assert not ran(result, "Refuse the upgrade")
    assert operator_sandbox.policy()["status"]["state"] == "ready"
    set_mig_config(operator_sandbox, "op-h100", "all-1g.10gb")
    INSTALLED_CRDS.update(crd_versions(operator_sandbox))
    assert "gpuclusters.nvidia.com" not in INSTALLED_CRDS
    assert controllers_started(operator_sandbox)[-1] == "v25.3.4"


def test_upgrade_refused_while_a_node_is_pending(operator_sandbox):
    before = revision(operator_sandbox), crd_versions(operator_sandbox)
    operator_sandbox.agents.label("op-a100", "nvidia.com/mig.config.state", "pending")
    try:
        result = operator_sandbox.site("--tags", "operator", extra_vars=UPGRADE)
    finally:
        operator_sandbox.agents.label("op-a100", "nvidia.com/mig.config.state", "success")
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert message.startswith("GPU Operator upgrade refused, nothing changed:"), message
    assert "node op-a100: nvidia.com/mig.config.state=pending" in message
    assert "op-h100" not in message and "op-h200" not in message
    assert_nothing_changed(operator_sandbox, *before)


def test_upgrade_refused_while_a_rollout_holds_the_lease(operator_sandbox):
    before = revision(operator_sandbox), crd_versions(operator_sandbox)
    custom = client.CustomObjectsApi(operator_sandbox.bed.api_client())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "gpufleet-mig-rollout", "namespace": "gpu-operator",
                          "annotations": {"gpufleet.io/rollout": "all-balanced on 3 nodes"}},
             "spec": {"holderIdentity": "ctl-7-run-42", "leaseDurationSeconds": 600, "acquireTime": now, "renewTime": now}}
    custom.create_namespaced_custom_object("coordination.k8s.io", "v1", "gpu-operator", "leases", lease)
    try:
        result = operator_sandbox.site("--tags", "operator", extra_vars=UPGRADE)
    finally:
        custom.delete_namespaced_custom_object("coordination.k8s.io", "v1", "gpu-operator", "leases", "gpufleet-mig-rollout")
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert "MIG rollout lock gpu-operator/gpufleet-mig-rollout held by ctl-7-run-42 (all-balanced on 3 nodes)" in message
    assert_nothing_changed(operator_sandbox, *before)


def test_check_mode_shows_the_crd_difference_and_changes_nothing(operator_sandbox):
    before = revision(operator_sandbox), crd_versions(operator_sandbox)
    result = operator_sandbox.site("--check", "--diff", "--tags", "operator", extra_vars=UPGRADE)
    assert result.rc == 0, result
    report = ran(result, "Report the operator upgrade")[0]["msg"]
    assert "-> gpu-operator-v1.0.0-devel (app main-latest)" in report and "(app devel-ubi8)" in report, report
    applied = dict((r["item"]["path"].rsplit("/", 1)[-1], r) for res in ran(result, "Apply the target chart's CRDs")
                   for r in res["results"])
    assert applied["nvidia.com_gpuclusters.yaml"]["changed"] is True  # created on the server only as a dry run
    assert applied["nvidia.com_clusterpolicies.yaml"]["changed"] is True and applied["nvidia.com_clusterpolicies.yaml"].get("diff")
    assert result.task_results("Install or upgrade the GPU Operator chart")[0][1]["changed"] is True
    assert_nothing_changed(operator_sandbox, *before)


def test_failed_upgrade_is_rolled_back(operator_sandbox):
    """v26.7.0 with a value the API server refuses: `helm upgrade` fails (a failed revision), the role rolls the
    release back to the v25.3.4 revision, the v25.3.4 controller keeps running, the ClusterPolicy is ready, and nothing
    of the fleet changed."""
    layout = mig_layout(operator_sandbox)
    old_revision, old_chart, old_app = revision(operator_sandbox)
    policy_spec = operator_sandbox.policy()["spec"]
    values = operator_sandbox.bed.helm("get", "values", "gpu-operator", "-n", "gpu-operator", "-o", "json").stdout

    result = operator_sandbox.site("--tags", "operator", extra_vars=FAILING_UPGRADE)
    assert result.rc != 0, result
    message = result.failure_messages()[-1]
    assert message.startswith("GPU Operator upgrade %s (app devel-ubi8) -> gpu-operator-v1.0.0-devel (app main-latest) "
                              "failed at 'Install or upgrade the GPU Operator chart': " % old_chart), message
    assert "Not_A_Valid_Name" in message, message
    assert ("Rolled release gpu-operator/gpu-operator back to revision %s (%s (app devel-ubi8)); the operator is ready "
            "again (3 GPU node(s))." % (old_revision, old_chart)) in message, message
    assert controllers_started(operator_sandbox)[-1] == "v25.3.4"

    new_revision, chart, app = revision(operator_sandbox)
    assert (int(new_revision), chart, app) == (int(old_revision) + 2, old_chart, old_app)  # the failed one, the rollback
    assert operator_sandbox.bed.helm("get", "values", "gpu-operator", "-n", "gpu-operator", "-o", "json").stdout == values
    policy = operator_sandbox.policy()
    assert policy["status"]["state"] == "ready"
    # Every setting of the ClusterPolicy is kept. The target chart's CRDs stay applied (applied before helm, never
    # removed by it), so the API server adds the defaults of v26.7.0's schema to the spec (cdi.nriPluginEnabled,
    # sandboxWorkloads.mode) and prunes empty strings it no longer stores; nothing set is changed or lost.
    before, after = settings(policy_spec), settings(policy["spec"])
    assert {k: after.get(k) for k in before} == before
    assert "cdi.nriPluginEnabled" in after
    assert mig_layout(operator_sandbox) == layout


def settings(spec, prefix=""):
    """The spec's non-empty leaves by dotted path."""
    out = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            out.update(settings(value, prefix + key + "."))
        elif value not in ("", None, [], {}):
            out[prefix + key] = value
    return out


def test_upgrade_to_v26_keeps_every_node_mig_layout(operator_sandbox):
    layout = mig_layout(operator_sandbox)
    assert layout["op-h100"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    old_revision, _chart, old_app = revision(operator_sandbox)
    result = operator_sandbox.site("--tags", "operator", extra_vars=UPGRADE)
    assert result.rc == 0, result
    new_revision, _chart, new_app = revision(operator_sandbox)
    assert (int(new_revision), old_app, new_app) == (int(old_revision) + 1, "devel-ubi8", "main-latest")
    crds = crd_versions(operator_sandbox)
    assert "gpuclusters.nvidia.com" in crds
    assert crds["clusterpolicies.nvidia.com"] != INSTALLED_CRDS["clusterpolicies.nvidia.com"]
    assert controllers_started(operator_sandbox)[-1] == "v26.7.0"
    values = operator_sandbox.bed.helm("get", "values", "gpu-operator", "-n", "gpu-operator", "-o", "json").stdout
    assert '"upgradeCRD":false' in values.replace(" ", "")
    assert '"serviceMonitor"' not in values  # the chart's default (enabled): the v26.7.0 controller skips it
    wait_for(lambda: (operator_sandbox.policy().get("status") or {}).get("state") == "ready", what="ClusterPolicy ready")
    assert mig_layout(operator_sandbox) == layout

    again = operator_sandbox.site("--tags", "operator", extra_vars=UPGRADE)
    assert again.rc == 0, again
    assert again.changed == 0, list(again.data["stats"].items())
    assert not ran(again, "Report the operator upgrade") and not ran(again, "Apply the target chart's CRDs")
    assert revision(operator_sandbox)[0] == new_revision


def test_an_older_chart_is_refused_before_any_change(operator_sandbox, tmp_path):
    """NVIDIA's v26.7.0 chart copied with an older version in its Chart.yaml (what `helm package --version` sets
    on a published chart): the deployed chart is newer, so the run stops at the version check."""
    older = tmp_path / "gpu-operator"
    shutil.copytree(CHART_V26, older)
    meta = (older / "Chart.yaml").read_text()
    assert "\nversion: v1.0.0-devel\n" in meta, "the deployed chart's version this test orders against"
    (older / "Chart.yaml").write_text(meta.replace("\nversion: v1.0.0-devel\n", "\nversion: v0.9.0\n"))
    before = revision(operator_sandbox), crd_versions(operator_sandbox)
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(UPGRADE, gpu_operator_chart_ref=str(older)))
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert "GPU Operator downgrade: release gpu-operator/gpu-operator runs gpu-operator-v1.0.0-devel" in message, message
    assert "is gpu-operator-v0.9.0" in message and "gpu_operator_allow_downgrade=true" in message, message
    assert not ran(result, "Refuse the upgrade while MIG changes run or the operator is not ready")
    assert revision(operator_sandbox) == before[0] and crd_versions(operator_sandbox) == before[1]
