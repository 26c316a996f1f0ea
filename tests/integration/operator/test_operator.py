"""gpu_operator and gpu_validate roles through site.yml, against a testbed cluster with simulated GPU nodes.

The tests build on each other in file order (one cluster per module): rejections and check mode on
an empty cluster, install, idempotent re-run, check mode on an installed operator, strategy patch,
custom MIG config, broken nodes.
"""

import json
import os
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

from tests.integration.awx.test_runner_jobs import awx_credential_env
from tests.integration.operator.conftest import NODES, REPO_ROOT
from tests.testbed.dcgm.exporter import DcgmSimulator
from tests.testbed.dcgm.prometheus import Prometheus
from tests.testbed.pytest_cluster import wait_until

HERE = Path(__file__).resolve().parent
H100_MIG_1G = 2 * 7  # op-h100 has 2 H100s; all-1g.10gb gives 7 per GPU (reference §4.2)
NODE_NAMES = [name for name, _model, _count in NODES]


def wait_for(predicate, timeout=90, what="condition"):
    return wait_until(predicate, timeout, what, interval=1)


def node_labels(sandbox, name):
    return sandbox.agents.labels(name)


def allocatable(sandbox, name, resource):
    return int(sandbox.agents.allocatable(name).get(resource, "0"))


def set_mig_config(sandbox, node, config):
    sandbox.bed.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": config}}})
    wait_for(lambda: node_labels(sandbox, node).get("nvidia.com/mig.config.state") == "success"
             and node_labels(sandbox, node).get("nvidia.com/mig.config") == config,
             what="%s to apply MIG config %s" % (node, config))


def assert_untouched(sandbox):
    assert not sandbox.namespace_exists("gpu-operator")
    assert sandbox.releases() == []
    assert sandbox.bed.kubectl("get", "crd", "clusterpolicies.nvidia.com", check=False).returncode != 0


BAD_MIG_CONFIG = {"version": "v1", "mig-configs": {"typo": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.7gb": 7}}]}}
MPS = {"sharing": {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}}


@pytest.mark.parametrize("extra_vars, expected", [
    ({"gpu_operator_mig_config": BAD_MIG_CONFIG}, "mig_config[typo][0]: profile 1g.7gb exists on no GPU model of the inventory"),
    ({"gpu_operator_mig_strategy": "dynamic"}, "gpu_operator_mig_strategy"),
    ({"gpu_operator_mig_strategy": "mixed", "gpu_operator_device_plugin_config": MPS},
     "device_plugin_config[sharing].sharing.mps: MPS sharing with MIG strategy mixed"),
    ({"gpu_validate_hardware_source": "dcgm"}, "with dcgm set gpu_validate_prometheus_url"),
], ids=["unknown-profile", "bad-strategy", "mps-with-mixed", "dcgm-without-prometheus"])
def test_bad_settings_are_rejected_before_any_change(operator_sandbox, extra_vars, expected):
    result = operator_sandbox.site(extra_vars=extra_vars)
    assert result.rc != 0, result
    assert any(expected in message for message in result.failure_messages()), result
    assert_untouched(operator_sandbox)


def test_check_mode_on_an_empty_cluster_changes_nothing(operator_sandbox):
    result = operator_sandbox.site("--check", "--diff", "--tags", "operator")
    assert result.rc == 0, result
    assert result.task_results("Install or upgrade the GPU Operator chart")[0][1]["changed"] is True
    assert_untouched(operator_sandbox)


def test_install_validates_and_a_second_run_changes_nothing(operator_sandbox):
    """A fresh install, as AWX's site template runs it: under the installer credential's ServiceAccount (rbac/)."""
    operator_sandbox.bed.kubectl("apply", "-f", str(REPO_ROOT / "rbac" / "gpu-operator-install.yaml"))
    kubeconfig = operator_sandbox.bed.serviceaccount_kubeconfig("gpufleet", "gpufleet-installer")
    installer = {"gpufleet_kubeconfig": str(kubeconfig)}
    result = operator_sandbox.site(extra_vars=installer)
    assert result.rc == 0, result
    assert result.changed > 0
    policy = operator_sandbox.policy()
    assert policy["status"]["state"] == "ready"
    assert policy["spec"]["mig"]["strategy"] == "single"
    table = result.table()
    assert len(table) == 1 + 3 and all(line.split()[-1] == "PASS" for line in table[1:]), table
    # Every GPU host's labels were compared with its hardware read, the host the cluster stages run from included.
    assert all("compared" in line.split() for line in table[1:]), table
    status = result.task_results("Wait for ClusterPolicy ready")[0][1]
    assert sorted(status["nodes"]) == ["op-a100", "op-h100", "op-h200"]
    assert "mig-manager" in status["operands"]

    again = operator_sandbox.site(extra_vars=installer)
    assert again.rc == 0, again
    assert again.changed == 0, list(again.data["stats"].items())


def test_site_runs_under_the_installer_account_and_stops_under_the_reconfiguration_one(operator_sandbox):
    """The ServiceAccounts of AWX's two credentials (rbac/): site.yml over the installed operator runs whole,
    validation's smoke pods included, under the installer's; under the reconfiguration account the pre-flight
    play stops it before anything is read or changed, naming what that account may not do."""
    bed = operator_sandbox.bed
    rbac = HERE.parents[2] / "rbac"
    bed.kubectl("apply", "-f", str(rbac / "gpu-operator-install.yaml"))
    bed.kubectl("apply", "-f", str(rbac / "mig-reconfigure.yaml"))
    installer = bed.serviceaccount_kubeconfig("gpufleet", "gpufleet-installer")
    reconfigurer = bed.serviceaccount_kubeconfig("gpu-operator", "gpufleet-automation")

    result = operator_sandbox.site(extra_vars={"gpufleet_kubeconfig": str(installer)})
    assert result.rc == 0, result
    assert result.changed == 0, list(result.data["stats"].items())
    table = result.table()
    assert len(table) == 1 + 3 and all(line.split()[-1] == "PASS" for line in table[1:]), table

    refused = operator_sandbox.site(extra_vars={"gpufleet_kubeconfig": str(reconfigurer)})
    assert refused.rc != 0, refused
    messages = [m for m in refused.failure_messages() if "not allowed" in m]
    assert len(messages) == 1, refused
    for denied in ("create namespaces", "customresourcedefinitions", "clusterroles"):
        assert denied in messages[0], messages[0]
    assert "gpufleet-automation" in messages[0], messages[0]
    assert not refused.task_results("Install or upgrade the GPU Operator chart"), "site went past the pre-flight"


def run_site_job(operator_sandbox, tmp_path, kubeconfig, launch_vars):
    """The site job template as AWX runs a job (awx/configure.yml: site.yml, the GPU-node inventory source, the
    installer credential, diff off): ansible-runner with a private data dir, this checkout as the project, the
    inventory source awx/inventory/fleet.gpu_nodes.yml, the credential injected as AWX renders the credential type,
    and the variables asked for at launch. The job's only way to the cluster is the injected credential."""
    bed = operator_sandbox.bed
    private = tmp_path / "site-job"
    (private / "inventory").mkdir(parents=True)
    source = REPO_ROOT / "awx" / "inventory" / "fleet.gpu_nodes.yml"
    (private / "inventory" / source.name).write_text(source.read_text())
    injected = private / "kubeconfig"
    injected.write_text(Path(kubeconfig).read_text())
    env = dict((k, v) for k, v in bed.env.items() if k != "KUBECONFIG" and not k.startswith("K8S_AUTH_"))
    env.update(awx_credential_env(str(injected)), ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               PATH="%s%s%s" % (Path(sys.executable).parent, os.pathsep, env["PATH"]))
    return ansible_runner.run(private_data_dir=str(private), project_dir=str(REPO_ROOT), playbook="site.yml",
                              inventory=str(private / "inventory" / source.name), extravars=launch_vars,
                              envvars=env, quiet=True, timeout=480)


def test_site_job_template_runs_through_ansible_runner_with_the_installer_credential(operator_sandbox, tmp_path):
    """AWX's site template on the installed operator: the chart release is left as it is and every GPU node passes
    validation, with the installer ServiceAccount (rbac/gpu-operator-install.yaml) as the job's credential and the
    hosts from the inventory source, whose connection is local (the hardware is then not read on the hosts)."""
    bed = operator_sandbox.bed
    bed.kubectl("apply", "-f", str(REPO_ROOT / "rbac" / "gpu-operator-install.yaml"))
    installer = bed.serviceaccount_kubeconfig("gpufleet", "gpufleet-installer")
    group_vars = yaml.safe_load((operator_sandbox.inventory / "group_vars" / "all.yml").read_text())
    launch_vars = dict((k, v) for k, v in group_vars.items() if k.startswith(("gpu_operator_", "gpu_validate_")))
    launch_vars["gpu_validate_collect_hardware"] = False
    revision = operator_sandbox.releases()[0]["revision"]

    job = run_site_job(operator_sandbox, tmp_path, installer, launch_vars)
    assert job.status == "successful", "site job %s rc=%s:\n%s" % (job.status, job.rc, job.stdout.read()[-6000:])
    assert operator_sandbox.releases()[0]["revision"] == revision, "the site job changed the chart release"
    tables = [e["event_data"]["res"]["msg"] for e in job.events if e.get("event") == "runner_on_ok"
              and e["event_data"].get("task", "").startswith("Print the validation table")]
    assert tables, "the site job did not validate"
    rows = tables[0][1:]
    assert sorted(line.split()[0] for line in rows if line.split()[0] in NODE_NAMES) == sorted(NODE_NAMES), tables[0]
    assert all(line.split()[-1] == "PASS" for line in rows if line.split()[0] in NODE_NAMES), tables[0]


def test_check_mode_on_an_installed_operator_changes_nothing(operator_sandbox):
    revision = operator_sandbox.releases()[0]["revision"]
    result = operator_sandbox.site("--check", "--diff", "--tags", "operator",
                                   extra_vars={"gpu_operator_mig_strategy": "mixed", "gpu_operator_mig_with_reboot": True})
    assert result.rc == 0, result
    assert result.task_results("Install or upgrade the GPU Operator chart")[0][1]["changed"] is True
    # --diff shows the chart values and the ClusterPolicy before -> after; a callback prints a diff only when the
    # task reports changed.
    values = result.task_results("Show how the chart values would change")[0][1]
    added = [line for line in values["diff"]["prepared"].splitlines() if line.startswith("+")]
    assert values["changed"] is True and any("strategy: mixed" in line for line in added), values
    patch = result.task_results("Patch ClusterPolicy")[0][1]
    assert patch["changed"] is True, patch
    assert patch["diff"]["before"]["spec"]["mig"]["strategy"] == "single", patch["diff"]
    assert patch["diff"]["after"]["spec"]["mig"]["strategy"] == "mixed", patch["diff"]
    assert operator_sandbox.releases()[0]["revision"] == revision
    assert operator_sandbox.policy()["spec"]["mig"]["strategy"] == "single"


def test_strategy_patch_single_to_mixed_and_resources_follow(operator_sandbox):
    set_mig_config(operator_sandbox, "op-h100", "all-1g.10gb")
    wait_for(lambda: allocatable(operator_sandbox, "op-h100", "nvidia.com/gpu") == H100_MIG_1G,
             what="single strategy: MIG devices advertised as nvidia.com/gpu")
    revision = operator_sandbox.releases()[0]["revision"]

    check = operator_sandbox.playbook(HERE / "reconfigure.yml", "--check", "--diff",
                                      extra_vars={"gpu_operator_mig_strategy": "mixed"})
    assert check.rc == 0, check
    assert check.task_results("Patch ClusterPolicy")[0][1]["changed"] is True
    assert operator_sandbox.policy()["spec"]["mig"]["strategy"] == "single"

    result = operator_sandbox.playbook(HERE / "reconfigure.yml", extra_vars={"gpu_operator_mig_strategy": "mixed"})
    assert result.rc == 0, result
    patch = result.task_results("Patch ClusterPolicy")[0][1]
    assert patch["changed"] is True
    assert operator_sandbox.releases()[0]["revision"] == revision  # no Helm upgrade
    assert operator_sandbox.policy()["spec"]["mig"]["strategy"] == "mixed"
    wait_for(lambda: allocatable(operator_sandbox, "op-h100", "nvidia.com/mig-1g.10gb") == H100_MIG_1G
             and allocatable(operator_sandbox, "op-h100", "nvidia.com/gpu") == 0
             and node_labels(operator_sandbox, "op-h100").get("nvidia.com/mig.strategy") == "mixed",
             what="mixed strategy: nvidia.com/mig-1g.10gb advertised")

    again = operator_sandbox.playbook(HERE / "reconfigure.yml", extra_vars={"gpu_operator_mig_strategy": "mixed"})
    assert again.rc == 0 and again.changed == 0, again


CUSTOM = {"version": "v1", "mig-configs": {
    "halves": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
}}


def test_custom_mig_config_is_applied_and_used_by_mig_manager(operator_sandbox):
    settings = {"gpu_operator_mig_strategy": "mixed", "gpu_operator_mig_config": CUSTOM}
    result = operator_sandbox.site(extra_vars=settings)
    assert result.rc == 0, result
    policy = operator_sandbox.policy()
    assert policy["spec"]["migManager"]["config"]["name"] == "gpufleet-mig-parted-config"
    configmap = operator_sandbox.bed.core.read_namespaced_config_map("gpufleet-mig-parted-config", "gpu-operator")
    assert "halves" in configmap.data["config.yaml"]
    set_mig_config(operator_sandbox, "op-h100", "halves")  # a name only the custom config has
    wait_for(lambda: allocatable(operator_sandbox, "op-h100", "nvidia.com/mig-3g.40gb") == 4,
             what="custom config applied: 4 x 3g.40gb on op-h100")
    validate = operator_sandbox.site("--tags", "validate", extra_vars=settings)
    assert validate.rc == 0, validate
    assert "3g.40gb" in " ".join(validate.table())
    assert operator_sandbox.site(extra_vars=settings).changed == 0


def test_validation_catches_broken_nodes_and_passes_healthy_ones(operator_sandbox):
    core = operator_sandbox.bed.core
    settings = {"gpu_operator_mig_strategy": "mixed", "gpu_operator_mig_config": CUSTOM, "gpu_validate_smoke_timeout": 20}
    # op-a100: device plugin switched off, so nothing is advertised
    core.patch_node("op-a100", {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "false"}}})
    # op-h200: an untolerated NoExecute taint evicts every operand pod
    core.patch_node("op-h200", {"spec": {"taints": [{"key": "example.com/broken", "value": "x", "effect": "NoExecute"}]}})
    try:
        wait_for(lambda: allocatable(operator_sandbox, "op-a100", "nvidia.com/gpu") == 0, what="op-a100 advertises 0")
        wait_for(lambda: not [p for p in core.list_namespaced_pod("gpu-operator").items if p.spec.node_name == "op-h200"],
                 what="operand pods gone from op-h200")
        result = operator_sandbox.site("--tags", "validate", extra_vars=settings)
        assert result.rc != 0, result
        rows = dict((line.split()[0], line) for line in result.table()[1:4])
        assert rows["op-h100"].split()[-1] == "PASS", result.table()
        assert rows["op-a100"].split()[-1] == "FAIL" and rows["op-h200"].split()[-1] == "FAIL"
        failures = result.table()[4:]
        assert "op-a100: device plugin advertises 0 GPU resources (allocatable has no nvidia.com/gpu or nvidia.com/mig-*)" in failures
        assert any(f.startswith("op-a100: smoke nvidia.com/gpu: did not finish") and "Insufficient nvidia.com/gpu" in f
                   for f in failures), failures
        assert "op-h200: operand device-plugin: no nvidia-device-plugin-daemonset pod on the node" in failures
        assert "op-h200: operand mig-manager: no nvidia-mig-manager pod on the node" in failures
        message = " ".join(result.failure_messages())
        assert "op-a100" in message and "op-h200" in message and "op-h100:" not in message
        assert not core.list_pod_for_all_namespaces(label_selector="gpufleet.io/smoke-test=true").items  # cleaned up
        # Check mode validates the nodes as they are and fails the same way (no smoke pods: nothing is created).
        checked = operator_sandbox.site("--check", "--tags", "validate", extra_vars=settings)
        assert checked.rc != 0, checked
        message = " ".join(checked.failure_messages())
        assert "op-a100" in message and "op-h200" in message and "op-h100:" not in message
        # Unless this check run's operator stage would change the ClusterPolicy: the problems then describe the cluster
        # before that change, and are reported instead of failing the run.
        ahead = operator_sandbox.site("--check", "--tags", "operator,validate",
                                      extra_vars=dict(settings, gpu_operator_mig_strategy="single"))
        assert ahead.rc == 0, ahead
        assert ahead.task_results("Patch ClusterPolicy")[0][1]["changed"] is True
        reported = ahead.task_results("Report problems found before the operator changes")[0][1]["msg"]
        assert reported.startswith("Check mode: the operator stage would change the chart or the ClusterPolicy"), reported
        assert "op-a100" in reported and "op-h200" in reported and "op-h100:" not in reported, reported
        assert operator_sandbox.policy()["spec"]["mig"]["strategy"] == "mixed"

        # The operator role's readiness wait names each node and operand that is not ready.
        waited = operator_sandbox.site("--tags", "operator", extra_vars=dict(settings, gpu_operator_wait_timeout=5))
        assert waited.rc != 0, waited
        message = " ".join(waited.failure_messages())
        assert message.startswith("GPU Operator not ready after 5s"), message
        assert "op-h200: device-plugin (no nvidia-device-plugin-daemonset pod on the node)" in message
        assert "op-h200: gpu-feature-discovery (no gpu-feature-discovery pod on the node)" in message
        assert "op-h100:" not in message
    finally:
        core.patch_node("op-a100", {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}})
        core.patch_node("op-h200", {"spec": {"taints": None}})
    wait_for(lambda: allocatable(operator_sandbox, "op-a100", "nvidia.com/gpu") == 2, what="op-a100 advertises again")
    healed = operator_sandbox.site(extra_vars=settings)
    assert healed.rc == 0, healed
    assert all(line.split()[-1] == "PASS" for line in healed.table()[1:4]), healed.table()


def test_validation_reads_the_hardware_from_dcgm_exporter_through_prometheus(operator_sandbox, tmp_path):
    """gpu_validate_hardware_source=dcgm: one Prometheus query instead of gpu_info per host, with the same checks."""
    settings = {"gpu_operator_mig_strategy": "mixed", "gpu_operator_mig_config": CUSTOM, "gpu_validate_smoke_timeout": 20,
                "gpu_validate_hardware_source": "dcgm"}
    agents = operator_sandbox.agents
    sim = DcgmSimulator()
    # The exporters read the nodes' simulated NVML state, as dcgm-exporter reads the GPUs; op-h200's claims an A100
    # instead (hardware that disagrees with GFD's labels) and op-a100 has no exporter Prometheus scrapes.
    sim.add_node("op-h100", state_path=str(agents.state_path("op-h100")))
    sim.add_node("op-h200", gpus=[{"index": 0, "model": "NVIDIA A100-SXM4-40GB", "instances": []}])
    server = Prometheus(tmp_path / "prometheus", dict((n, sim.target(n)) for n in ("op-h100", "op-h200"))).start()
    try:
        server.wait_for_series('DCGM_FI_DEV_FB_USED{node="op-h200"}', 1)
        server.wait_for_series('DCGM_FI_DEV_FB_USED{node="op-h100"}', 1)
        result = operator_sandbox.site("--tags", "validate", extra_vars=dict(settings, gpu_validate_prometheus_url=server.url))
        assert result.rc != 0, result
        read = result.task_results("Read the host's GPUs with gpu_info")
        assert all(outcome.get("skipped") for _host, outcome in read), "gpu_info ran on a host: %s" % read
        rows = dict((line.split()[0], line.split()) for line in result.table()[1:4])
        assert rows["op-h100"][-1] == "PASS" and "dcgm" in rows["op-h100"], result.table()
        assert rows["op-h200"][-1] == "FAIL" and "dcgm" in rows["op-h200"], result.table()
        assert rows["op-a100"][-1] == "FAIL" and "not read" in " ".join(rows["op-a100"]), result.table()
        failures = result.table()[4:]
        assert any(f.startswith("op-h200: label nvidia.com/gpu.product=NVIDIA-H200") and "the hardware is NVIDIA A100" in f
                   for f in failures), failures
        assert any(f.startswith("op-a100: hardware not readable from dcgm-exporter: no dcgm-exporter series for the node "
                                "in Prometheus %s" % server.url) for f in failures), failures

        # With every exporter reading its node's GPUs, every node passes.
        sim.remove_node("op-h200")
        for name in ("op-h200", "op-a100"):
            sim.add_node(name, state_path=str(agents.state_path(name)))
        server.stop()
        server = Prometheus(tmp_path / "prometheus-all", dict((n, sim.target(n)) for n in sim.nodes)).start()
        for name in sim.nodes:
            server.wait_for_series('DCGM_FI_DEV_FB_USED{node="%s"}' % name, 1)
        healed = operator_sandbox.site("--tags", "validate", extra_vars=dict(settings, gpu_validate_prometheus_url=server.url))
        assert healed.rc == 0, healed
        assert all(line.split()[-1] == "PASS" and "dcgm" in line.split() for line in healed.table()[1:4]), healed.table()
    finally:
        server.stop()
        sim.stop()


def test_a_node_whose_gpus_are_all_held_is_reported_busy_not_failed(operator_sandbox):
    """Smoke pods are not run for a resource every unit of which is held by the node's pods: they would only wait
    for the timeout. The node passes its other checks, and the table and a warning say why nothing ran."""
    bed = operator_sandbox.bed
    settings = {"gpu_operator_mig_strategy": "mixed", "gpu_operator_mig_config": CUSTOM, "gpu_validate_smoke_timeout": 20}
    held = allocatable(operator_sandbox, "op-a100", "nvidia.com/gpu")
    assert held >= 1, "op-a100 advertises no whole GPU"
    namespace = bed.create_namespace("busy")
    bed.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holds-every-gpu", "namespace": namespace},
        "spec": {"nodeName": "op-a100", "tolerations": [{"operator": "Exists"}], "containers": [{
            "name": "main", "image": "registry.invalid/cuda:latest",
            "resources": {"limits": {"nvidia.com/gpu": str(held)}}}]}}))
    try:
        result = operator_sandbox.site("--tags", "validate", extra_vars=settings)
        assert result.rc == 0, result
        rows = dict((line.split()[0], line) for line in result.table()[1:4])
        assert "busy" in rows["op-a100"] and rows["op-a100"].split()[-1] == "PASS", result.table()
        note = "op-a100: smoke nvidia.com/gpu not run: all %d nvidia.com/gpu of the node are held by its pods" % held
        assert note in result.table()[4:], result.table()
        assert all(line.split()[-1] == "PASS" for line in result.table()[1:4]), result.table()
    finally:
        bed.delete_namespace(namespace)
