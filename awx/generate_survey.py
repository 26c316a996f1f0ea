"""Write awx/surveys/mig-reconfigure.json: the MIG reconfiguration survey (job template and workflow), its profile choices taken from the
named configs the collection knows (planning library ``resolve.named_configs``), so AWX offers exactly what the
playbook's pre-flight accepts. Run from the repository root after `make setup`:

    .venv/bin/python awx/generate_survey.py          # rewrite the file
    .venv/bin/python awx/generate_survey.py --check  # exit 1 if the committed file is stale (used by the tests)
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SURVEY_PATH = os.path.join(ROOT, "awx", "surveys", "mig-reconfigure.json")
CUSTOM_CHOICE = "custom"  # picks the free-text answer instead (a config name from a custom mig-parted ConfigMap)


def named_configs():
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import resolve

    return list(resolve.named_configs())


def build_survey(configs):
    # Survey format and validation rules: ansible/awx awx/api/templates/api/job_template_survey_spec.md and
    # _validate_spec_data in awx/api/views/__init__.py: name, description, non-empty spec; each question needs type,
    # question_name, variable, required; multiplechoice default must be one of the choices; min/max int or null.
    choices = sorted(set(configs)) + [CUSTOM_CHOICE]
    # Check mode is not a survey question: AWX sets it per launch with the job type prompt (check = plan only),
    # and the workflow's plan node runs as check, its apply node as run.
    return {
        "name": "MIG reconfiguration",
        "description": "Which MIG layout, on which GPU nodes, how many at a time. "
                       "Answers reach mig-reconfigure.yml as extra vars.",
        "spec": [
            {
                "type": "multiplechoice",
                "question_name": "MIG profile (named config)",
                "question_description": "A named config of MIG Manager's config, resolved per GPU model "
                                        "(all-balanced differs on A100, H100, H200). Choose 'custom' to type "
                                        "a name from your own mig-parted config below.",
                "variable": "survey_profile",
                "required": True,
                "choices": choices,
                # No default: a required question with none makes the person choose (a default would turn
                # "launch" into "disable MIG on the fleet").
                "default": "",
                "min": None,
                "max": None,
            },
            {
                "type": "text",
                "question_name": "Custom config name",
                "question_description": "Used only when the profile above is 'custom': a config name from "
                                        "the ClusterPolicy's custom mig-parted ConfigMap.",
                "variable": "survey_custom_profile",
                "required": False,
                "default": "",
                "min": 0,
                "max": 253,
            },
            {
                "type": "text",
                "question_name": "Target nodes",
                "question_description": "Comma-separated node names; empty means every GPU node of the inventory.",
                "variable": "nodes",
                "required": False,
                "default": "",
                "min": 0,
                "max": 4096,
            },
            {
                "type": "text",
                "question_name": "Max unavailable",
                "question_description": "Nodes changed at once after the canary: a count (2) or a percentage (25%).",
                "variable": "max_unavailable",
                "required": True,
                "default": "1",
                "min": 1,
                "max": 8,
            },
            {
                "type": "multiplechoice",
                "question_name": "Allow unschedulable pods",
                "question_description": "By default the rollout stops before any change when the pods it would "
                                        "evict find no GPU room afterwards (it names them). 'true' goes on and "
                                        "leaves them Pending until room appears.",
                "variable": "allow_unschedulable",
                "required": True,
                "choices": ["false", "true"],
                "default": "false",
                "min": None,
                "max": None,
            },
        ],
    }


def render(survey):
    return json.dumps(survey, indent=2, sort_keys=False) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed survey is out of date")
    args = parser.parse_args()
    text = render(build_survey(named_configs()))
    if args.check:
        current = open(SURVEY_PATH).read() if os.path.exists(SURVEY_PATH) else None
        if current != text:
            sys.exit("%s is stale: run .venv/bin/python awx/generate_survey.py" % SURVEY_PATH)
        return
    with open(SURVEY_PATH, "w") as handle:
        handle.write(text)
    print("wrote %s" % SURVEY_PATH)


if __name__ == "__main__":
    main()
