"""Every module's RETURN, as ansible-doc shows it: nested return values have their keys documented.

A return value of type dict (or a list whose elements are dicts) must document its keys under ``contains``,
unless it is a free-form map whose keys are data (node names, resource names, GPU indices...); those are
listed in FREE_FORM below with the reason, and their description says what each value is.
"""

import ast
import os

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULES_DIR = os.path.join(ROOT, "plugins", "modules")
MODULES = sorted(name[:-3] for name in os.listdir(MODULES_DIR)
                 if name.endswith(".py") and not name.startswith("_"))

_PROFILES = "keys are MIG profile names, values are counts"
_LABELS = "keys are node label names, values are label values"
_LOGS = "keys are MIG Manager pods (namespace/name), values are log text"
_RESOURCES = "keys are extended resource names (nvidia.com/gpu, nvidia.com/mig-*), values are counts"

# (module, dotted return path) -> why the value has no fixed keys.
FREE_FORM = {
    ("mig_rollout", "node_configs"): "node name -> MIG config name; the keys are the nodes",
    ("gpu_drain", "evicted.gpu_resources"): _RESOURCES,
    ("gpu_drain", "would_evict.gpu_resources"): _RESOURCES,
    ("gpu_drain", "planned_evictions.gpu_resources"): _RESOURCES,
    ("gpu_drain", "gone_before_eviction.gpu_resources"): _RESOURCES,
    ("gpu_drain", "left_alone.gpu_resources"): _RESOURCES,
    ("gpu_drain", "terminating.gpu_resources"): _RESOURCES,
    ("gpu_drain", "blockers.gpu_resources"): _RESOURCES,
    ("gpu_cluster_info", "report.nodes.allocatable"): _RESOURCES,
    ("gpu_cluster_info", "report.nodes.requested"): _RESOURCES,
    ("gpu_cluster_info", "report.findings.details"): "keys depend on the finding's kind",
    ("gpu_cluster_info", "report.totals.per_resource"): "keys are resource names, values are count dicts",
    ("gpu_cluster_info", "schema"): "a JSON Schema document",
    ("gpu_node_validate", "nodes"): "keys are node names, values are per-node results",
    ("gpu_operator_status", "nodes"): "keys are node names, values map operand names to a status",
    ("gpu_operator_values", "chart_values"): "NVIDIA's chart values tree (the chart's values.yaml layout)",
    ("gpu_operator_values", "cluster_policy_patch"): "a merge patch in NVIDIA's ClusterPolicy layout",
    ("gpu_operator_values", "configmaps.metadata.labels"): "keys are label names",
    ("gpu_operator_values", "configmaps.data"): "keys are file names, values are YAML text",
    ("gpu_operator_values", "nvidia_drivers.node_selector"): "keys are label names",
    ("gpu_operator_values", "nvidia_drivers.manifest"): "an NVIDIADriver in NVIDIA's CRD layout",
    ("gpu_operator_driver_pools", "nodes_by_pool"): "keys are pool names, values are node names",
    ("gpu_operator_driver_pools", "route_trigger.metadata"): "an NVIDIADriver's metadata",
    ("gpu_operator_driver_pools", "route_trigger.spec"): "an NVIDIADriver's spec in NVIDIA's CRD layout",
    ("mig_plan", "plan.gpus.target"): _PROFILES,
    ("mig_plan", "plan.gpus.current"): _PROFILES,
    ("mig_plan", "plan.gpus.alternatives"): "each element maps profile names to counts",
    ("mig_apply", "plan.gpus.target"): _PROFILES,
    ("mig_apply", "plan.gpus.current"): _PROFILES,
    ("mig_apply", "plan.gpus.alternatives"): "each element maps profile names to counts",
    ("mig_plan", "expected_resources"): _RESOURCES,
    ("mig_plan", "expected_gfd_labels"): _LABELS,
    ("mig_apply", "gpu_states"): "keys are GPU indices, values are states",
    ("mig_apply", "mismatches.current"): _PROFILES,
    ("mig_apply", "mismatches.target"): _PROFILES,
    ("node_mig_config", "plan.expected_resources"): _RESOURCES,
    ("node_mig_config", "plan.expected_gfd_labels"): _LABELS,
    ("node_mig_config", "diagnostics.gpu_allocatable"): _RESOURCES,
    ("node_mig_config", "diagnostics.mig_manager_logs"): _LOGS,
    ("mig_rollout", "plan.expected_resources"): _RESOURCES,
    ("mig_rollout", "plan.expected_gfd_labels"): _LABELS,
    ("mig_rollout", "rows.diagnostics.gpu_allocatable"): _RESOURCES,
    ("mig_rollout", "rows.diagnostics.mig_manager_logs"): _LOGS,
    ("mig_rollout", "rows.follow.returned_on"): "keys are node names, values are pod counts",
    ("mig_rollout", "api_requests.by_verb"): "keys are HTTP verbs, values are request counts",
}


def module_return_doc(module):
    """The RETURN string of a module, parsed as YAML, read without importing the module."""
    with open(os.path.join(MODULES_DIR, module + ".py")) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RETURN" for t in node.targets):
            return yaml.safe_load(node.value.value) or {}
    raise AssertionError("%s: no RETURN string" % module)


def _nested(entry):
    return entry.get("type") == "dict" or (entry.get("type") == "list" and entry.get("elements") == "dict")


def walk(doc, path=()):
    """Yield (dotted path, entry) for every documented return value, nested ones included."""
    for key, entry in (doc or {}).items():
        here = path + (str(key),)
        yield ".".join(here), entry
        if isinstance(entry, dict) and isinstance(entry.get("contains"), dict):
            yield from walk(entry["contains"], here)


def undocumented_nested(module, doc):
    """Nested return values (dict / list of dict) with neither ``contains`` nor a FREE_FORM entry."""
    return ["%s: %s" % (module, path) for path, entry in walk(doc)
            if _nested(entry) and "contains" not in entry and (module, path) not in FREE_FORM]


@pytest.mark.parametrize("module", MODULES)
def test_nested_return_values_document_their_keys(module):
    missing = undocumented_nested(module, module_return_doc(module))
    assert not missing, "return values of type dict / list of dict without contains: %s" % ", ".join(missing)


@pytest.mark.parametrize("module", MODULES)
def test_every_return_value_has_description_type_and_returned(module):
    bad = ["%s: %s (lacks %s)" % (module, path, ", ".join(k for k in ("description", "type", "returned")
                                                          if k not in entry))
           for path, entry in walk(module_return_doc(module))
           if not isinstance(entry, dict) or not all(k in entry for k in ("description", "type", "returned"))]
    assert not bad, "incomplete return docs: %s" % "; ".join(bad)


def test_free_form_allowlist_is_current():
    """Every FREE_FORM entry names a documented dict that still has no ``contains`` and a reason."""
    docs = dict((module, dict(walk(module_return_doc(module)))) for module in MODULES)
    stale = []
    for (module, path), reason in sorted(FREE_FORM.items()):
        entry = docs.get(module, {}).get(path)
        if entry is None or not _nested(entry) or "contains" in entry or not reason:
            stale.append("%s: %s" % (module, path))
    assert not stale, "FREE_FORM entries that are not undocumented free-form maps: %s" % ", ".join(stale)


def test_checker_names_module_and_key():
    doc = yaml.safe_load("""
top:
  description: d
  returned: always
  type: dict
  contains:
    rows:
      description: d
      returned: always
      type: list
      elements: dict
    ok:
      description: d
      returned: always
      type: list
      elements: dict
      contains:
        x: {description: d, returned: always, type: str}
flat:
  description: d
  returned: always
  type: dict
""")
    assert undocumented_nested("some_module", doc) == ["some_module: top.rows", "some_module: flat"]
