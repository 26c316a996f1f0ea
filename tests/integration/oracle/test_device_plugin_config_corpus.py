"""Device-plugin configs: the gpu_operator role accepts a config exactly when NVIDIA's device plugin does.

NVIDIA's side is its own code: api/config/v1 of NVIDIA/k8s-device-plugin v0.20.0 and the device
plugin's start-up checks (tests/testbed/oracle/dpconfig, built by tests/testbed/build-nvidia.sh), run with the
environment the GPU Operator gives the device plugin (its DaemonSet asset, MIG_STRATEGY from the ClusterPolicy).
The collection's side is the gpu_operator_values module the role runs. The corpus is
tests/fixtures/device_plugin_configs/corpus.yaml; a rejection must name the config key and the field.
"""

from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import values
from tests.testbed import oracle

ROOT = Path(__file__).resolve().parents[3]
CORPUS = yaml.safe_load((ROOT / "tests" / "fixtures" / "device_plugin_configs" / "corpus.yaml").read_text())


def dump(config):
    """What the role puts in the ConfigMap for a config (gpu_operator_values' dump_yaml)."""
    return yaml.safe_dump(config, default_flow_style=False, sort_keys=False)


@pytest.fixture(scope="module")
def nvidia_verdicts():
    return oracle.check_configs([(e["id"], dump(e["config"]), oracle.device_plugin_env(e["mig_strategy"])) for e in CORPUS])


def run_module(tmp_path, args):
    """gpu_operator_values as Ansible runs it (tests/unit/plugins/modules/module_runner.py)."""
    from tests.unit.plugins.modules.module_runner import run_module as run  # pylint: disable=import-outside-toplevel
    return run(tmp_path, "gpu_operator_values", **args)


def test_corpus_is_large_and_has_both_verdicts(nvidia_verdicts):
    assert len(CORPUS) >= 50
    accepted = sum(1 for v in nvidia_verdicts.values() if v["accepted"])
    assert 15 <= accepted <= len(CORPUS) - 15, "corpus should exercise both verdicts"
    assert {v["stage"] for v in nvidia_verdicts.values() if not v["accepted"]} == {"parse", "validate"}


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_role_check_accepts_exactly_what_nvidia_accepts(entry, nvidia_verdicts):
    """Each config alone, under its MIG strategy, through the role's settings check (the module's logic)."""
    verdict, key = nvidia_verdicts[entry["id"]], entry["id"]
    problems = values.settings_problems({"mig_strategy": entry["mig_strategy"], "device_plugin_config": {key: entry["config"]},
                                         "device_plugin_config_name": "dp-config", "device_plugin_config_default": key})
    if verdict["accepted"]:
        assert problems == [], "NVIDIA accepts %s but the role refuses it: %s" % (key, problems)
    else:
        assert problems, "NVIDIA refuses %s (%s) but the role accepts it" % (key, verdict["error"])
        where = "device_plugin_config[%s]%s" % (key, "." + entry["field"] if entry["field"] else "")
        assert any(where in p for p in problems), "no problem names %s: %s (NVIDIA: %s)" % (where, problems, verdict["error"])


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_module_renders_every_accepted_config_and_names_every_refused_one(strategy, nvidia_verdicts, tmp_path):
    """The module the role runs: all configs NVIDIA accepts under a strategy pass together and reach the ConfigMap
    unchanged; all it refuses fail together, one problem per config, each naming its key. Never a traceback."""
    entries = [e for e in CORPUS if e["mig_strategy"] == strategy]
    good = dict((e["id"], e["config"]) for e in entries if nvidia_verdicts[e["id"]]["accepted"])
    bad = dict((e["id"], e["config"]) for e in entries if not nvidia_verdicts[e["id"]]["accepted"])
    result = run_module(tmp_path, {"mig_strategy": strategy, "device_plugin_config": good})
    assert not result.get("failed"), result.get("problems")
    rendered = result["configmaps"][-1]["data"]
    assert dict((k, yaml.safe_load(v)) for k, v in rendered.items()) == good
    if bad:
        result = run_module(tmp_path, {"mig_strategy": strategy, "device_plugin_config": bad})
        assert result.get("failed") and "Traceback" not in result["msg"]
        for key in bad:
            assert any("device_plugin_config[%s]" % key in p for p in result["problems"]), (key, result["problems"])


def test_accepted_configs_share_what_nvidia_shares(nvidia_verdicts):
    """The sharing strategy and replicated resources the collection derives equal NVIDIA's after its parse
    (renameByDefault gives <name>.shared; custom renames and device lists are dropped by the device plugin)."""
    from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.device_plugin_config import check_config
    compared = 0
    for entry in CORPUS:
        verdict = nvidia_verdicts[entry["id"]]
        if not verdict["accepted"]:
            continue
        _problems, _warnings, effect = check_config("c", entry["config"], entry["mig_strategy"])
        nvidia = [{"name": r["name"], "rename": r["rename"] or None, "replicas": r["replicas"]}
                  for r in verdict["resources"] or []] if verdict["sharing_strategy"] != "none" else []
        assert (effect["sharing"], effect["resources"]) == (verdict["sharing_strategy"], nvidia), entry["id"]
        compared += 1
    assert compared >= 15


@pytest.mark.parametrize("keys, default", [
    (["a", "b"], None), (["a", "b"], "a"), (["default", "b"], None), (["only"], None), (["a"], "missing"),
    (["default"], "default"), ([], None), ([], "a"),
])
def test_which_config_a_node_gets_is_what_nvidias_config_manager_does(testbed, tmp_path, keys, default):
    """NVIDIA's config-manager (tests/testbed/oracle/config_manager.py) on real Nodes, with the ConfigMap keys and
    DEFAULT_CONFIG the role renders and FALLBACK_STRATEGIES=empty as NVIDIA's GPU Operator sets it (gpu-operator
    controllers/object_controls.go): the module refuses the settings exactly when NVIDIA's program fails on an
    unlabelled node; otherwise a node labelled with a key gets that key, and every other node gets what the module's
    device_plugin_config_selection says."""
    from tests.testbed.oracle import config_manager
    from tests.testbed.pytest_cluster import unique_name
    args = {"mig_strategy": "single", "device_plugin_config": dict((k, {"version": "v1"}) for k in keys)}
    if default:
        args["device_plugin_config_default"] = default
    result = run_module(tmp_path, args)
    rendered = keys if result.get("failed") else list(result["configmaps"][-1]["data"])
    rendered_default = default or "" if result.get("failed") else result["values"]["devicePlugin"]["config"]["default"]
    configs = dict((k, "version: v1\n") for k in rendered)

    def nvidia_choice(label):
        node = unique_name("cfgmgr")
        testbed.create_node(node, labels={config_manager.NODE_LABEL: label} if label else {})
        try:
            return config_manager.choose(testbed.kubeconfig, node, configs, label, default=rendered_default)
        finally:
            testbed.delete_node(node)

    unlabelled, error = nvidia_choice(None)
    assert bool(result.get("failed")) == (error is not None), (result.get("msg"), error)
    if error is not None:
        return
    selection = result["device_plugin_config_selection"]
    if unlabelled is None:
        assert selection.endswith("every other node gets no config (no sharing: the operator's config manager falls "
                                  "back to an empty config)"), selection
    else:
        assert selection.endswith("every other node gets config %r" % unlabelled), selection
    for key in keys:
        assert nvidia_choice(key) == (key, None)
        assert key in selection.split("get that config (", 1)[1].split(")", 1)[0].split(", ")
