"""awx/configure.yml without an AWX server (there is none here): syntax check, every awx.awx task's arguments
validated against that module's own argument_spec (as the module would on a controller), and the surveys
checked against AWX's survey rules and against the named configs the collection knows."""

import importlib
import json
import os
import subprocess

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import resolve
from tests.support import playbook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AWX_DIR = os.path.join(ROOT, "awx")
PLAYBOOK = os.path.join(AWX_DIR, "configure.yml")
BIN = os.path.join(ROOT, ".venv", "bin")
# Settings a user supplies (docs/awx.md); everything else comes from awx/vars/controller.yml and the play.
USER_VARS = {
    "gpufleet_awx_host": "https://awx.example.invalid",
    "gpufleet_awx_token": "token-not-real",
    "gpufleet_awx_scm_url": "https://git.example.invalid/gpufleet/gpu_operator.git",
    "gpufleet_awx_kubeconfig": "apiVersion: v1\nkind: Config\nusers: [{name: gpufleet-automation}]\n",
    "gpufleet_awx_installer_kubeconfig": "apiVersion: v1\nkind: Config\nusers: [{name: gpufleet-installer}]\n",
}
VALIDATOR_KWARGS = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")


class _Captured(Exception):
    pass


def awx_argument_spec(module_name):
    """(argument_spec incl. the controller auth options, validator kwargs) of an installed awx.awx module.

    awx.awx modules build their spec inside main(); we run main() with the module class replaced by one that
    hands back what it was given, so the spec is exactly the installed version's.
    """
    module = importlib.import_module("ansible_collections.awx.awx.plugins.modules." + module_name)
    from ansible_collections.awx.awx.plugins.module_utils.controller_api import ControllerModule

    class CaptureSpec(object):
        def __init__(self, argument_spec=None, **kwargs):
            raise _Captured(argument_spec, kwargs)

    original = module.ControllerAPIModule
    module.ControllerAPIModule = CaptureSpec
    spec, kwargs = None, None
    try:
        module.main()
    except _Captured as captured:
        spec, kwargs = captured.args
    finally:
        module.ControllerAPIModule = original
    assert spec is not None, "awx.awx.%s did not build its module" % module_name
    full = dict(ControllerModule.AUTH_ARGSPEC)
    full.update(spec)
    return full, dict((k, v) for k, v in kwargs.items() if k in VALIDATOR_KWARGS)


_PLUGINS = []


def _init_plugins():
    """The play's vars use lookups: load Ansible's plugins once per test process."""
    if not _PLUGINS:
        init_plugin_loader()
        _PLUGINS.append(True)


def rendered_tasks():
    """(task name, module name, templated args incl. module_defaults) for every awx.awx task of the play."""
    _init_plugins()
    loader = DataLoader()
    loader.set_basedir(AWX_DIR)
    play = loader.load_from_file(PLAYBOOK, trusted_as_template=True)[0]
    variables = {"playbook_dir": AWX_DIR}
    for vars_file in play.get("vars_files", []):
        variables.update(loader.load_from_file(os.path.join(AWX_DIR, vars_file), trusted_as_template=True))
    variables.update(play.get("vars", {}))
    variables.update(USER_VARS)
    templar = Templar(loader=loader, variables=variables)
    defaults = play["module_defaults"]["group/awx.awx.controller"]
    for task in play["tasks"]:
        action = next((key for key in task if key.startswith("awx.awx.")), None)
        if action is None:
            continue
        args = dict(defaults)
        args.update(task[action])
        rendered = templar.template(args)
        # `omit` placeholders are dropped by the task executor before the module runs.
        omit = variables.get("omit")
        rendered = dict((k, v) for k, v in rendered.items() if omit is None or v != omit)
        yield task["name"], action.split(".")[-1], rendered


def test_syntax_check():
    proc = playbook.run(PLAYBOOK, "--syntax-check", inventory="localhost,", env=dict(os.environ), cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_awx_task_matches_the_installed_module_argument_spec():
    tasks = list(rendered_tasks())
    modules = {module for _name, module, _args in tasks}
    assert {"execution_environment", "credential_type", "credential", "project", "inventory", "inventory_source",
            "job_template", "workflow_job_template", "workflow_job_template_node"} <= modules
    for name, module, args in tasks:
        spec, kwargs = awx_argument_spec(module)
        result = ArgumentSpecValidator(spec, **kwargs).validate(args)
        assert not result.error_messages, "task %r (awx.awx.%s): %s" % (name, module, result.error_messages)
        assert not result.unsupported_parameters, "task %r: unsupported %s" % (name, result.unsupported_parameters)


def test_validation_rejects_a_wrong_argument():
    """The check above can fail: a wrong choice and an unknown option are reported."""
    spec, kwargs = awx_argument_spec("job_template")
    result = ArgumentSpecValidator(spec, **kwargs).validate({"name": "x", "job_type": "plan", "surveys": {}})
    assert any("job_type" in message for message in result.error_messages)
    assert "surveys" in result.unsupported_parameters


def test_templates_workflow_and_credential_type_wiring():
    tasks = dict((name, (module, args)) for name, module, args in rendered_tasks())
    by_module = {}
    for module, args in tasks.values():
        by_module.setdefault(module, []).append(args)
    playbooks = {args["playbook"]: args for args in by_module["job_template"]}
    assert set(playbooks) == {"site.yml", "mig-reconfigure.yml", "report.yml"}
    # The report's files go to a directory per job under a path the job template sets (exposed to jobs), so they
    # outlive the job's container; AWX fills in awx_job_id at launch (Jinja in template extra vars).
    report = playbooks["report.yml"]
    assert report["extra_vars"]["gpu_report_dir"] == "/var/lib/gpufleet/reports/job-{{ awx_job_id }}"
    # The chart values stay out of the site job's output unless a person asks for --diff at launch.
    assert playbooks["site.yml"]["diff_mode"] is False and playbooks["site.yml"]["ask_diff_mode_on_launch"] is True
    # Two credentials: the installer's (cluster-admin, rbac/gpu-operator-install.yaml) only on the site template;
    # the reconfiguration account's (rbac/mig-reconfigure.yaml) on the others and the inventory source.
    credentials = dict((args["name"], args) for args in by_module["credential"])
    assert len(credentials) == 2, sorted(credentials)
    installer = [name for name in credentials if "installer" in name]
    assert len(installer) == 1, sorted(credentials)
    installer = installer[0]
    reconfigurer = next(name for name in credentials if name != installer)
    assert playbooks["site.yml"]["credentials"] == [installer]
    assert playbooks["mig-reconfigure.yml"]["credentials"] == [reconfigurer]
    assert playbooks["report.yml"]["credentials"] == [reconfigurer]
    assert by_module["inventory_source"][0]["credential"] == reconfigurer
    assert credentials[installer]["inputs"]["kubeconfig"] != credentials[reconfigurer]["inputs"]["kubeconfig"]
    reconfigure = playbooks["mig-reconfigure.yml"]
    assert reconfigure["survey_enabled"] is True and reconfigure["ask_job_type_on_launch"] is True
    assert "survey_profile" in reconfigure["extra_vars"]["profile"], "profile is not derived from the survey"

    nodes = dict((args["identifier"], args) for args in by_module["workflow_job_template_node"])
    assert nodes["plan"]["job_type"] == "check" and nodes["plan"]["success_nodes"] == ["approve"]
    assert "approval_node" in nodes["approve"] and nodes["approve"]["success_nodes"] == ["apply"]
    assert nodes["apply"]["job_type"] == "run"

    credential_type = by_module["credential_type"][0]
    assert credential_type["injectors"]["env"]["K8S_AUTH_KUBECONFIG"] == "{{ tower.filename.kubeconfig }}"
    assert credential_type["injectors"]["file"]["template.kubeconfig"] == "{{ kubeconfig }}"
    source = by_module["inventory_source"][0]
    assert source["source"] == "scm"
    with open(os.path.join(ROOT, source["source_path"])) as handle:
        assert yaml.safe_load(handle)["plugin"] == "gpufleet.gpu_operator.gpu_nodes"


def test_surveys_are_generated_from_the_named_configs():
    proc = subprocess.run([os.path.join(BIN, "python"), os.path.join(AWX_DIR, "generate_survey.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(os.path.join(AWX_DIR, "surveys", "mig-reconfigure.json")) as handle:
        survey = json.load(handle)
    profile = next(q for q in survey["spec"] if q["variable"] == "survey_profile")
    assert profile["choices"] == sorted(set(resolve.named_configs())) + ["custom"]
    assert {"all-disabled", "all-balanced"} <= set(profile["choices"])
    # A required question without a default: launching makes the person choose (no accidental all-disabled).
    assert profile["required"] is True and profile["default"] == ""


def test_survey_follows_awx_survey_rules():
    with open(os.path.join(AWX_DIR, "surveys", "mig-reconfigure.json")) as handle:
        survey = json.load(handle)
    assert awx_survey_errors(survey) == []
    # mig-reconfigure.yml reads profile (set from survey_profile by the template), nodes, max_unavailable and
    # allow_unschedulable (false unless the person accepts Pending pods).
    assert {q["variable"] for q in survey["spec"]} == {"survey_profile", "survey_custom_profile", "nodes",
                                                       "max_unavailable", "allow_unschedulable"}
    allow = next(q for q in survey["spec"] if q["variable"] == "allow_unschedulable")
    assert allow["choices"] == ["false", "true"] and allow["default"] == "false"


def test_survey_rules_catch_bad_surveys():
    bad = {"name": "x", "description": "", "spec": [
        {"type": "multiplechoice", "question_name": "q", "variable": "v", "required": True,
         "choices": ["a"], "default": "b"},
        {"type": "text", "question_name": "q2", "variable": "v", "required": "yes"},
    ]}
    errors = awx_survey_errors(bad)
    assert any("default" in e for e in errors) and any("unique" in e for e in errors)
    assert any("required" in e for e in errors)


SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def awx_survey_errors(survey):
    """AWX's survey validation rules (awx/api/views `_validate_spec_data`, reference ansible-ecosystem.md §5)."""
    errors = []
    for key in ("name", "description"):
        if not isinstance(survey.get(key), str):
            errors.append("%s must be a string" % key)
    if not isinstance(survey.get("spec"), list) or not survey["spec"]:
        return errors + ["spec must be a non-empty list"]
    seen = set()
    for index, question in enumerate(survey["spec"]):
        where = "spec[%d]" % index
        for key in ("type", "question_name", "variable", "required"):
            if key not in question:
                errors.append("%s lacks %s" % (where, key))
        if not isinstance(question.get("required"), bool):
            errors.append("%s: required must be a boolean" % where)
        if question.get("type") not in SURVEY_TYPES:
            errors.append("%s: type %r is not a survey type" % (where, question.get("type")))
        if question.get("variable") in seen:
            errors.append("%s: variable %r is not unique" % (where, question.get("variable")))
        seen.add(question.get("variable"))
        for bound in ("min", "max"):
            if question.get(bound) is not None and not isinstance(question[bound], int):
                errors.append("%s: %s must be an integer or null" % (where, bound))
        if question.get("type") in ("multiplechoice", "multiselect"):
            choices = question.get("choices")
            if isinstance(choices, str):
                choices = choices.split("\n")
            if not choices:
                errors.append("%s: choices are required" % where)
            default = question.get("default")
            if question["type"] == "multiplechoice" and default not in (None, "") and default not in (choices or []):
                errors.append("%s: default %r is not among the choices" % (where, default))
        if question.get("default") == "$encrypted$" and question.get("type") != "password":
            errors.append("%s: $encrypted$ default only on password questions" % where)
    return errors
