#!/usr/bin/env python3
"""Write awx/surveys/mig-reconfigure*.json: the MIG reconfiguration surveys (job template, workflow), its profile choices taken from the
named configs the collection knows (planning library ``resolve.named_configs``), so AWX offers exactly what the
playbook's pre-flight accepts. Run from the repository root after `make setup`:

    .venv/bin/python awx/generate_survey.py          # rewrite the file
    .venv/bin/python awx/generate_survey.py --check  # exit 1 if a committed file is stale (used by the tests)
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SURVEY_DIR = os.path.join(ROOT, "awx", "surveys")
# The job template asks whether to only plan; the workflow does not (its plan node runs in check mode and its
# apply node after approval), because workflow-level answers would override the nodes' own values.
SURVEYS = {"mig-reconfigure.json": True, "mig-reconfigure-workflow.json": False}
CUSTOM_CHOICE = "custom"  # picks the free-text answer instead (a config name from a custom mig-parted ConfigMap)


def named_configs():
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import resolve

    return list(resolve.named_configs())


def build_survey(configs, with_plan_only=True):
    # Survey format and validation rules: AWX job_template_survey_spec.md / _validate_spec_data
    # (reference ansible-ecosystem.md §5): name, description, non-empty spec; each question needs type,
    # question_name, variable, required; multiplechoice default must be one of the choices; min/max int or null.
    choices = sorted(set(configs)) + [CUSTOM_CHOICE]
    survey = {
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
                "default": "all-disabled" if "all-disabled" in choices else choices[0],
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
                "variable": "target_nodes",
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
                "question_name": "Plan only (check)",
                "question_description": "yes: print the plan per node and change nothing; no: apply it.",
                "variable": "plan_only",
                "required": True,
                "choices": ["yes", "no"],
                "default": "yes",
                "min": None,
                "max": None,
            },
        ],
    }
    if not with_plan_only:
        survey["spec"] = [q for q in survey["spec"] if q["variable"] != "plan_only"]
    return survey


def render(survey):
    return json.dumps(survey, indent=2, sort_keys=False) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed survey is out of date")
    args = parser.parse_args()
    configs = named_configs()
    for name, with_plan_only in SURVEYS.items():
        path = os.path.join(SURVEY_DIR, name)
        text = render(build_survey(configs, with_plan_only))
        if args.check:
            current = open(path).read() if os.path.exists(path) else None
            if current != text:
                sys.exit("%s is stale: run .venv/bin/python awx/generate_survey.py" % path)
            continue
        with open(path, "w") as handle:
            handle.write(text)
        print("wrote %s" % path)


if __name__ == "__main__":
    main()
