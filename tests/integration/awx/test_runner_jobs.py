"""The MIG reconfigure job template run the way AWX runs a job: ansible-runner (AWX's engine) with a private data
dir, the project checked out (this repository), the template's extra vars merged with the survey's answers, the
kubeconfig credential injected as K8S_AUTH_KUBECONFIG (a ServiceAccount bound to rbac/mig-reconfigure.yaml), the
job's limit, and the inventory source awx/inventory/fleet.gpu_nodes.yml (the gpu_nodes plugin) - against the
simulated GPU nodes. A plan-only job (job type check = --check), then an apply job."""

import json
import os
import sys

import ansible_runner
import jinja2.sandbox
import yaml

from tests.integration.reconfigure.conftest import apply_automation_rbac

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AWX_DIR = os.path.join(ROOT, "awx")
CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
# all-balanced on an H100 80GB: 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb per GPU (reference §4.2 static config).
H100_BALANCED_PER_GPU = {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}


class _AwxLoader(yaml.SafeLoader):
    pass


_AwxLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def reconfigure_template_extra_vars():
    """The extra vars saved on the reconfigure job template by awx/configure.yml (as AWX stores them)."""
    with open(os.path.join(AWX_DIR, "configure.yml")) as handle:
        play = yaml.load(handle, Loader=_AwxLoader)[0]  # noqa: S506 - SafeLoader subclass
    return dict(play["vars"]["gpufleet_awx_reconfigure_extra_vars"])


def awx_credential_env(kubeconfig_path, context=""):
    """The environment AWX injects for the kubeconfig credential: the credential type's env injectors from
    awx/configure.yml rendered as AWX renders them (Jinja, with the credential's inputs and tower.filename.<id>
    for each file injector). An empty optional field still sets its variable, to an empty string."""
    with open(os.path.join(AWX_DIR, "configure.yml")) as handle:
        play = yaml.load(handle, Loader=_AwxLoader)[0]  # noqa: S506 - SafeLoader subclass
    credential_type = next(task["awx.awx.credential_type"] for task in play["tasks"]
                           if "awx.awx.credential_type" in task)
    inputs = {"kubeconfig": open(kubeconfig_path).read(), "context": context}
    variables = dict(inputs, tower={"filename": {"kubeconfig": kubeconfig_path}})
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined)
    return dict((name, env.from_string(template).render(**variables))
                for name, template in credential_type["injectors"]["env"].items())


def survey_defaults():
    with open(os.path.join(AWX_DIR, "surveys", "mig-reconfigure.json")) as handle:
        return dict((q["variable"], q.get("default")) for q in json.load(handle)["spec"])


def run_job(tmp_path, name, kubeconfig, limit, answers, check, isolation):
    """One AWX-style job; returns the ansible_runner Runner."""
    private = tmp_path / name
    (private / "inventory").mkdir(parents=True)
    # The inventory source from the project, as the inventory update runs it.
    with open(os.path.join(AWX_DIR, "inventory", "fleet.gpu_nodes.yml")) as handle:
        (private / "inventory" / "fleet.gpu_nodes.yml").write_text(handle.read())
    # Credential injection: kubeconfig content written to a file in the private data dir.
    injected = private / "kubeconfig"
    injected.write_text(open(kubeconfig).read())
    extravars = reconfigure_template_extra_vars()
    extravars.update(survey_defaults())
    extravars.update(answers)
    extravars.update(isolation)
    bin_dir = os.path.dirname(sys.executable)
    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=ROOT,
        playbook="mig-reconfigure.yml",
        inventory=str(private / "inventory" / "fleet.gpu_nodes.yml"),
        extravars=extravars,
        envvars=dict(awx_credential_env(str(injected)), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                     PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
                     ANSIBLE_PYTHON_INTERPRETER=sys.executable),
        cmdline="--check" if check else None,
        limit=",".join(limit),
        quiet=True,
        timeout=480,
    )


def task_results(runner, task_prefix):
    return [event["event_data"].get("res", {}) for event in runner.events
            if event.get("event") == "runner_on_ok"
            and event["event_data"].get("task", "").startswith(task_prefix)]


def tasks_run(runner):
    return {event["event_data"].get("task") for event in runner.events if event.get("event") == "runner_on_ok"}


def node_labels(testbed, name):
    return dict(testbed.core.read_node(name).metadata.labels or {})


def gpu_allocatable(testbed, name):
    allocatable = testbed.core.read_node(name).status.allocatable or {}
    return dict((k, int(v)) for k, v in allocatable.items() if k.startswith("nvidia.com/") and v != "0")


def wait_settled(testbed, name, gpus):
    """GPUs advertised, and NVIDIA's controller has set the node's default MIG config label and MIG Manager has
    reported on it: a snapshot taken earlier sees the label arrive under it."""
    testbed.wait_for(lambda: gpu_allocatable(testbed, name).get("nvidia.com/gpu") == gpus
                     and node_labels(testbed, name).get(CONFIG)
                     and node_labels(testbed, name).get(CONFIG + ".state") == "success", 90, "GPUs and MIG config on %s" % name)


def automation_kubeconfig(testbed):
    return apply_automation_rbac(testbed)


def test_plan_job_then_apply_job_through_ansible_runner(testbed, gpu_cluster, add_gpu_node, tmp_path):
    nodes = sorted([add_gpu_node("awx-h100", "H100-80GB-HBM3", 2), add_gpu_node("awx-h100", "H100-80GB-HBM3", 2)])
    for name in nodes:
        wait_settled(testbed, name, 2)
    before = dict((n, node_labels(testbed, n).get(CONFIG)) for n in nodes)
    kubeconfig = automation_kubeconfig(testbed)
    # The credential has no context: AWX still injects K8S_AUTH_CONTEXT="" (the inventory plugin and the modules
    # must read that as unset, not as a context named "").
    assert awx_credential_env(kubeconfig)["K8S_AUTH_CONTEXT"] == ""
    answers = {"survey_profile": "all-balanced", "survey_custom_profile": "", "nodes": "", "max_unavailable": "1"}
    isolation = {"mig_reconfigure_lock_name": "awx-runner-%s" % nodes[0][-6:], "mig_reconfigure_apply_timeout": 120,
                 "mig_reconfigure_verify_timeout": 60, "mig_reconfigure_drain_timeout": 60}

    plan = run_job(tmp_path, "plan", kubeconfig, nodes, answers, check=True, isolation=isolation)
    assert plan.status == "successful", "plan job %s rc=%s:\n%s" % (plan.status, plan.rc, plan.stdout.read()[-6000:])
    planned = task_results(plan, "Plan every node")
    assert planned, "the plan job did not plan"
    assert sorted(p["node"] for p in planned[0]["plan"]) == nodes
    assert not any(t and t.startswith("Reconfigure") for t in tasks_run(plan)), "check job went past the plan"
    for name in nodes:
        assert node_labels(testbed, name).get(CONFIG) == before[name], "plan job changed %s" % name

    apply = run_job(tmp_path, "apply", kubeconfig, nodes, answers, check=False, isolation=isolation)
    assert apply.status == "successful", "apply job %s rc=%s:\n%s" % (apply.status, apply.rc,
                                                                      apply.stdout.read()[-6000:])
    for name in nodes:
        labels = node_labels(testbed, name)
        assert labels.get(CONFIG) == "all-balanced" and labels.get(STATE) == "success", labels
        assert gpu_allocatable(testbed, name) == dict((k, 2 * v) for k, v in H100_BALANCED_PER_GPU.items())
        assert testbed.core.read_node(name).spec.unschedulable in (None, False)
    # The job output shows each node's steps while its step runs: job events before that step's result.
    events = list(apply.events)
    for name in nodes:
        lines = [e for e in events if "MIG rollout: " in (e.get("stdout") or "") and "  %s  " % name in e["stdout"]]
        steps = [e["stdout"].split("  ")[2] for e in lines]
        assert steps[:1] == ["draining"] and steps[-1:] == ["done"] and "verifying" in steps, steps
        result = [e for e in events if e.get("event") == "runner_on_ok" and e["event_data"].get("task", "").startswith(
            "Reconfigure step") and name in [r["node"] for r in e["event_data"].get("res", {}).get("rows", [])]]
        assert result and lines[-1]["counter"] < result[0]["counter"], (name, [e["counter"] for e in lines], result)


def test_custom_profile_answer_reaches_the_playbook(testbed, gpu_cluster, add_gpu_node, tmp_path):
    """Survey 'custom' + free text: the template's extra vars turn it into profile=<text>; an unknown name is
    refused by the playbook's pre-flight before anything changes."""
    name = add_gpu_node("awx-custom", "H100-80GB-HBM3", 1)
    wait_settled(testbed, name, 1)
    before = node_labels(testbed, name).get(CONFIG)
    answers = {"survey_profile": "custom", "survey_custom_profile": " no-such-layout ", "nodes": name,
               "max_unavailable": "1"}
    job = run_job(tmp_path, "custom", automation_kubeconfig(testbed), [name], answers, check=True,
                  isolation={"mig_reconfigure_lock_name": "awx-custom-%s" % name[-6:]})
    output = job.stdout.read()
    assert job.status == "failed", output[-4000:]
    assert "no-such-layout" in output
    assert node_labels(testbed, name).get(CONFIG) == before


def report_template_extra_vars():
    """The extra vars saved on the report job template by awx/configure.yml, rendered as configure.yml renders them."""
    with open(os.path.join(AWX_DIR, "configure.yml")) as handle:
        play = yaml.load(handle, Loader=_AwxLoader)[0]  # noqa: S506 - SafeLoader subclass
    with open(os.path.join(AWX_DIR, "vars", "controller.yml")) as handle:
        root = yaml.safe_load(handle)["gpufleet_awx_report_dir"]
    template = play["vars"]["gpufleet_awx_report_extra_vars"]["gpu_report_dir"]
    return {"gpu_report_dir": jinja2.Environment().from_string(template).render(gpufleet_awx_report_dir=root)}


def test_report_job_keeps_files_and_stats(testbed, gpu_cluster, add_gpu_node, tmp_path):
    """The report job template as AWX runs it (credential injected with an empty context, awx_job_id passed):
    report.json/report.html land in the job's directory under the template's path, and the totals and findings
    reach the job's artifacts through set_stats."""
    name = add_gpu_node("awx-report", "H100-80GB-HBM3", 1, labels={"gpufleet.test/awx-report": "yes"})
    testbed.wait_for(lambda: gpu_allocatable(testbed, name).get("nvidia.com/gpu") == 1, 90, "GPU on %s" % name)
    kubeconfig = automation_kubeconfig(testbed)
    extravars = report_template_extra_vars()
    assert extravars["gpu_report_dir"] == "/var/lib/gpufleet/reports/job-{{ awx_job_id }}"
    # The directory AWX would expose to jobs; here under the test's tmp dir.
    extravars["gpu_report_dir"] = extravars["gpu_report_dir"].replace("/var/lib/gpufleet/reports",
                                                                      str(tmp_path / "kept"))
    extravars.update({"awx_job_id": 4242, "gpu_report_label_selector": "gpufleet.test/awx-report=yes"})
    private = tmp_path / "report-job"
    private.mkdir()
    bin_dir = os.path.dirname(sys.executable)
    job = ansible_runner.run(
        private_data_dir=str(private), project_dir=ROOT, playbook="report.yml", inventory="localhost,",
        extravars=extravars,
        envvars=dict(awx_credential_env(kubeconfig), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                     PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_PYTHON_INTERPRETER=sys.executable),
        quiet=True, timeout=300)
    output = job.stdout.read()
    assert job.status == "successful", output[-6000:]
    kept = tmp_path / "kept" / "job-4242"
    report = json.loads((kept / "report.json").read_text())
    assert [n["name"] for n in report["nodes"]] == [name]
    assert "<html" in (kept / "report.html").read_text().lower()
    stats = [e["event_data"] for e in job.events if e.get("event") == "playbook_on_stats"]
    artifacts = stats[-1].get("artifact_data") or {}
    assert artifacts["gpu_report_totals"] == report["totals"] and artifacts["gpu_report_totals"]["nodes"] == 1
    assert artifacts["gpu_report_findings"] == report["findings"]
    assert artifacts["gpu_report_files"] == [str(kept / "report.json"), str(kept / "report.html")]
