"""Generated bad input for every module, role entry point, mig-parted config, device-plugin config and the inventory
plugin. Each input must be refused with one line that names the option or field, changed=false,
and never a traceback; the strategies are in bad_inputs.py.

Hypothesis runs derandomized without an example database, so CI draws the same inputs every run. Modules run as
Ansible runs them (a process reading its arguments through AnsibleModule, printing its JSON result) with no kubeconfig
and no NVML library: a module that gets past its checks to the API or to NVML fails with a message that names no
option, and the test reports it. Every failing input is listed at once (no shrinking), then the test fails.
"""

import json
import os
import subprocess
import sys

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.plugins.modules.module_runner import ModuleWorker
from tests.unit.reliability import bad_inputs

# Distinct inputs each test must have run (the strategies are deterministic, so these are exact floors, not hopes).
MIN_DISTINCT = {
    "modules": 260,
    "mig-parted configs": 40,
    "device-plugin configs": 30,
    "role argument specs": 60,
    "inventory": 25,
}

SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])

MODULE_SPECS = bad_inputs.load_module_specs()
ROLE_SPECS = bad_inputs.load_role_specs()


def bare_env(tmp_path):
    """No kubeconfig, no K8S_AUTH_* and no NVML: the module has nothing to reach."""
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("K8S_AUTH_", "KUBECONFIG", "LD_LIBRARY_PATH", "GPUFLEET_")))
    env["HOME"] = str(tmp_path)
    return env


class Recorder(object):
    def __init__(self):
        self.seen = {}
        self.failures = []
        self.kinds = set()

    def add(self, case, problem):
        key = json.dumps([case.target, case.args], sort_keys=True, default=repr)
        if key in self.seen:
            return
        self.seen[key] = case
        self.kinds.add((case.target, case.kind))
        if problem:
            self.failures.append("%s %s %s: %s" % (case.target, case.kind, json.dumps(case.args, default=repr)[:300],
                                                   problem))

    def check(self, floor):
        assert not self.failures, "%d of %d bad inputs not refused clearly:\n%s" % (
            len(self.failures), len(self.seen), "\n".join(self.failures[:int(os.environ.get("BADINPUT_SHOW", "60"))]))
        assert len(self.seen) >= floor, "only %d distinct bad inputs (want >= %d)" % (len(self.seen), floor)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    env = bare_env(tmp_path_factory.mktemp("home"))
    pool = {}

    def get(module):
        if module not in pool:
            pool[module] = ModuleWorker(module, env=env)
        return pool[module]

    yield get
    for worker in pool.values():
        worker.close()


def run_cases(strategy, workers, max_examples):
    recorder = Recorder()

    @settings(max_examples=max_examples, **SETTINGS)
    @given(case=strategy)
    def check(case):
        recorder.add(case, bad_inputs.problem_of(case, workers(case.target).run(case.args)))

    check()
    return recorder


def module_strategy():
    faults = []
    for module, spec in sorted(MODULE_SPECS.items()):
        faults.extend(strategy for _kind, strategy in bad_inputs.module_faults(module, spec))
    faults.append(bad_inputs.max_unavailable_cases())
    faults.append(bad_inputs.kubeconfig_cases(sorted(m for m in MODULE_SPECS if "kubeconfig" in MODULE_SPECS[m]["argument_spec"])))
    return st.sampled_from(faults).flatmap(lambda s: s)


def test_the_floors_add_up_to_at_least_200_distinct_bad_inputs():
    assert sum(MIN_DISTINCT.values()) >= 200


def test_every_module_refuses_generated_bad_options(workers):
    recorder = run_cases(module_strategy(), workers, 420)
    recorder.check(MIN_DISTINCT["modules"])
    modules = set(target for target, _kind in recorder.kinds)
    assert modules == set(MODULE_SPECS), "modules without a bad input: %s" % sorted(set(MODULE_SPECS) - modules)


def test_malformed_mig_parted_configs_are_refused_naming_the_field(workers):
    recorder = run_cases(bad_inputs.migparted_cases(), workers, 70)
    recorder.check(MIN_DISTINCT["mig-parted configs"])


def test_malformed_device_plugin_configs_are_refused_naming_the_field(workers):
    recorder = run_cases(bad_inputs.bad_device_plugin(), workers, 60)
    recorder.check(MIN_DISTINCT["device-plugin configs"])


def validate_role_input(case):
    """What the role's implicit validate_argument_spec task does: Ansible's ArgumentSpecValidator on the entry
    point's options."""
    validator = ArgumentSpecValidator(ROLE_SPECS[case.target])
    result = validator.validate(case.args)
    if not result.error_messages:
        return {"failed": False, "changed": False}
    return {"failed": True, "msg": result.error_messages[0]}


def test_every_role_entry_point_refuses_generated_bad_variables():
    recorder = Recorder()
    faults = []
    for entry, options in sorted(ROLE_SPECS.items()):
        faults.extend(strategy for _kind, strategy in bad_inputs.role_faults(entry, options))

    @settings(max_examples=150, **SETTINGS)
    @given(case=st.sampled_from(faults).flatmap(lambda s: s))
    def check(case):
        recorder.add(case, bad_inputs.problem_of(case, validate_role_input(case)))

    check()
    recorder.check(MIN_DISTINCT["role argument specs"])


INVENTORY_RUNNER = r"""
import json, os, sys, tempfile
from ansible.plugins.loader import init_plugin_loader, inventory_loader
init_plugin_loader([sys.argv[1]])
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
summary = json.loads(sys.argv[2])
directory = tempfile.mkdtemp()
for line in sys.stdin:
    path = os.path.join(directory, "src.gpu_nodes.yml")
    with open(path, "w") as handle:
        handle.write(line)
    plugin = inventory_loader.get("gpufleet.gpu_operator.gpu_nodes")
    plugin._fetch_nodes = lambda path: [summary]
    try:
        plugin.parse(InventoryData(), DataLoader(), path, cache=False)
        result = {"failed": False, "changed": False}
    except Exception as exc:  # what ansible-inventory shows: the error's message
        result = {"failed": True, "msg": str(exc)}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
"""


def test_inventory_plugin_refuses_generated_bad_options(tmp_path):
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts

    summary = cluster_facts.node_summary({"metadata": {"name": "gpu-node-1", "labels": {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, "status": {}})
    root = bad_inputs.ROOT
    env = dict(bare_env(tmp_path), PYTHONPATH=os.pathsep.join([os.path.join(root, ".collections"), root]))
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-c", INVENTORY_RUNNER, os.path.join(root, ".collections"),
                             json.dumps(summary)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    recorder = Recorder()
    try:
        @settings(max_examples=60, **SETTINGS)
        @given(case=bad_inputs.inventory_cases())
        def check(case):
            proc.stdin.write(json.dumps(case.args) + "\n")  # JSON is YAML: one source file per line
            proc.stdin.flush()
            recorder.add(case, bad_inputs.problem_of(case, json.loads(proc.stdout.readline())))

        check()
    finally:
        proc.kill()
        proc.wait()
    recorder.check(MIN_DISTINCT["inventory"])
