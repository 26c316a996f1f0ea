"""Generated bad inputs for every user-facing input of the collection.

Each strategy draws a ``Case``: where the input goes (a module, a role entry point, the inventory plugin), the bad
input itself, and the names one of which the error message must contain (the option, or the field path of a
mig-parted / device-plugin config). The strategies are derived from the specs themselves, so a new option is covered
without editing this file:

- modules: ``tests/unit/plugins/modules/argument_specs.json`` (the snapshot of what each module hands AnsibleModule);
- roles: every entry point of ``roles/*/meta/argument_specs.yml``;
- the inventory plugin: its DOCUMENTATION options.

Fault classes (the ``kind`` of a case, listed in docs/reliability.md): wrong type, value outside ``choices``, wrong list
element, missing required option, unknown option (a typo of a real one), missing or wrongly typed suboption, options
that exclude each other or of which one is required, negative numbers (timeouts, delays, counts, ports, indices),
values out of range, malformed Kubernetes names, malformed mig-parted configs, malformed device-plugin configs,
malformed ``max_unavailable`` and kubeconfig values.

Used by tests/unit/reliability/test_bad_input_generated.py (all of them, no cluster) and
tests/integration/reliability/test_bad_input_cluster.py (a sample, against the testbed).
"""

import collections
import json
import os
import string

import yaml
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir, os.pardir))
SNAPSHOT = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "argument_specs.json")

Case = collections.namedtuple("Case", "target kind args names")

# The kube_auth options every API module shares; their faults are drawn for one module only (gpu_operator_status)
# besides kubeconfig, so that each module's own options get the examples.
AUTH_OPTIONS = frozenset(("api_key", "ca_cert", "client_cert", "client_key", "context", "host", "impersonate_user",
                          "impersonate_groups", "kubeconfig", "proxy", "validate_certs", "request_timeout",
                          "api_retry_seconds"))

# The least each module needs so that validation reaches the option under test (a bad option must be the one the
# message names, not a missing required one).
MODULE_BASE = {
    "gpu_cluster_info": {},
    "gpu_drain": {"name": "gpu-node-1"},
    "gpu_info": {},
    "gpu_node_validate": {"nodes": [{"name": "gpu-node-1"}]},
    "gpu_operator_status": {},
    "gpu_operator_upgrade_check": {},
    "gpu_operator_driver_pools": {},
    "gpu_operator_values": {},
    "gpu_preflight": {"access": [{"verbs": ["get"], "resource": "nodes"}]},
    "gpu_smoke_test": {"targets": [{"node": "gpu-node-1"}]},
    "mig_apply": {"config_name": "all-disabled"},
    "mig_plan": {"gpu_model": "H100 80GB HBM3", "config_name": "all-balanced"},
    "mig_rollout": {"config": "all-balanced", "nodes": ["gpu-node-1"]},
    "mig_rollout_lock": {"holder": "badinput-test"},
    "node_mig_config": {"name": "gpu-node-1", "config": "all-balanced"},
}

# Options that name Kubernetes objects (node names, namespaces, Lease and ConfigMap names): a malformed name must be
# refused before any API call (an empty node name would address the node collection).
K8S_NAME_OPTIONS = {
    "gpu_drain": ["name"],
    "node_mig_config": ["name", "operator_namespace"],
    "mig_rollout": ["nodes[]", "operator_namespace", "lock.name", "lock.namespace"],
    "mig_rollout_lock": ["name", "namespace"],
    "gpu_operator_status": ["namespace", "nodes[]"],
    "gpu_operator_upgrade_check": ["namespace", "lease_name", "lease_namespace", "nodes[]"],
    "gpu_operator_driver_pools": ["release_namespace", "gpu_nodes[]"],
    "gpu_operator_values": ["namespace", "mig_config_name", "device_plugin_config_name"],
    "gpu_node_validate": ["namespace", "nodes[].name"],
    "gpu_smoke_test": ["namespace", "targets[].node"],
    "gpu_preflight": ["access[].namespace"],
}

# Numbers with a range besides "not negative" (every int/float option is drawn negative as well).
RANGES = {
    ("gpu_cluster_info", "dcgm_port"): (1, 65535),
    ("gpu_cluster_info", "idle_below"): (0, 1),
    ("gpu_operator_status", "request_timeout"): (0, 3600),
    ("gpu_operator_status", "api_retry_seconds"): (0, 3600),
}

BAD_K8S_NAMES = ["", " ", "Gpu_Node", "node/../x", "-leading-dash", "trailing-dash-", "a b", "UPPER", "x" * 254,
                 "node?watch=1", "ns.with..dots", "%2F"]

identifiers = st.text(alphabet=string.ascii_lowercase + "_", min_size=3, max_size=12)
words = st.text(alphabet=string.ascii_letters, min_size=1, max_size=10)
# 64-bit: ansible-core's int check itself raises OverflowError beyond that (not this collection's to fix).
INT64 = (-2 ** 63, 2 ** 63 - 1)


def integers(min_value=INT64[0], max_value=INT64[1]):
    return st.integers(min_value=min_value, max_value=max_value)


BOOL_WORDS = {"y", "yes", "on", "1", "true", "t", "n", "no", "off", "0", "false", "f"}


def load_module_specs():
    with open(SNAPSHOT) as handle:
        return json.load(handle)


def load_role_specs():
    """{"role:entry": options} for every role entry point."""
    specs = {}
    roles = os.path.join(ROOT, "roles")
    for role in sorted(os.listdir(roles)):
        path = os.path.join(roles, role, "meta", "argument_specs.yml")
        if not os.path.exists(path):
            continue
        with open(path) as handle:
            data = yaml.safe_load(handle)
        for entry, spec in sorted((data.get("argument_specs") or {}).items()):
            specs["%s:%s" % (role, entry)] = spec.get("options") or {}
    return specs


def _float_text(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def not_int():
    return st.one_of(words.filter(lambda w: not _float_text(w)),
                     st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)),
                     st.lists(integers(), min_size=1, max_size=3),
                     st.dictionaries(identifiers, integers(), min_size=1, max_size=2))


def not_float():
    return st.one_of(words.filter(lambda w: not _float_text(w)),
                     st.lists(integers(), min_size=1, max_size=3),
                     st.dictionaries(identifiers, integers(), min_size=1, max_size=2))


def not_bool():
    return st.one_of(words.filter(lambda w: w.lower() not in BOOL_WORDS),
                     integers().filter(lambda i: i not in (0, 1)),
                     st.lists(st.booleans(), min_size=1, max_size=2),
                     st.dictionaries(identifiers, st.booleans(), min_size=1, max_size=2))


def not_dict():
    return st.one_of(words.filter(lambda w: "=" not in w), integers(), st.lists(integers(), min_size=1, max_size=3))


def not_list():
    return st.dictionaries(identifiers, integers(), min_size=1, max_size=2)


WRONG_TYPE = {"int": not_int, "float": not_float, "bool": not_bool, "dict": not_dict, "list": not_list}


def _outside(choices):
    allowed = set(str(c) for c in choices)
    return words.filter(lambda w: w not in allowed)


def option_faults(name, spec, unknown_ok=True):
    """[(kind, strategy of (value_or_MISSING, names))] for one option; ``names`` are what the message may name."""
    faults = []
    names = [name] + list(spec.get("aliases") or [])
    kind = spec.get("type", "str")
    if kind in WRONG_TYPE:
        faults.append(("wrong type", WRONG_TYPE[kind]().map(lambda v: (v, names))))
    if spec.get("choices") and kind != "list":
        faults.append(("not a choice", _outside(spec["choices"]).map(lambda v: (v, names))))
    if kind == "list":
        elements = spec.get("elements")
        if spec.get("choices"):
            faults.append(("list element not a choice",
                           _outside(spec["choices"]).map(lambda v: ([v], names))))
        elif elements in ("int", "float", "bool", "dict"):
            faults.append(("wrong list element", WRONG_TYPE[elements]().filter(lambda v: not isinstance(v, list))
                           .map(lambda v: ([v], names))))
        if elements == "int":
            faults.append(("negative number", integers(max_value=-1).map(lambda v: ([v], names))))
    if kind in ("int", "float"):
        numbers = integers(max_value=-1) if kind == "int" else st.floats(
            max_value=-0.001, allow_nan=False, allow_infinity=False)
        faults.append(("negative number", numbers.map(lambda v: (v, names))))
    for sub_name, sub_spec in sorted((spec.get("options") or {}).items()):
        if kind not in ("dict", "list") or (kind == "list" and spec.get("elements") != "dict"):
            continue
        full = ["%s.%s" % (name, sub_name), sub_name]
        sub_valid = dict((k, _valid_value(v)) for k, v in (spec.get("options") or {}).items() if v.get("required"))
        wrap = (lambda d: [d]) if kind == "list" else (lambda d: d)
        if sub_spec.get("required"):
            missing = dict((k, v) for k, v in sub_valid.items() if k != sub_name)
            faults.append(("missing suboption", st.just((wrap(missing), full))))
        sub_type = sub_spec.get("type", "str")
        if sub_type in WRONG_TYPE:
            faults.append(("suboption of wrong type", WRONG_TYPE[sub_type]().map(
                lambda v, s=sub_name, b=sub_valid, f=full, w=wrap: (w(dict(b, **{s: v})), f))))
        if sub_type in ("int", "float"):
            faults.append(("negative number", integers(max_value=-1).map(
                lambda v, s=sub_name, b=sub_valid, f=full, w=wrap: (w(dict(b, **{s: v})), f))))
    if spec.get("options") and unknown_ok:
        sub_valid = dict((k, _valid_value(v)) for k, v in spec["options"].items() if v.get("required"))
        wrap = (lambda d: [d]) if kind == "list" else (lambda d: d)
        faults.append(("unknown suboption", identifiers.filter(lambda k: k not in spec["options"]).map(
            lambda k, b=sub_valid, w=wrap: (w(dict(b, **{k: 1})), [k]))))
    return faults


def _valid_value(spec):
    kind = spec.get("type", "str")
    return {"int": 1, "float": 1.0, "bool": True, "dict": {}, "list": []}.get(kind, "x")


def _typo(name):
    """Typos of an option name: one letter dropped, doubled or two swapped."""
    out = set()
    for i in range(len(name)):
        out.add(name[:i] + name[i + 1:])
        out.add(name[:i] + name[i] + name[i:])
        if i + 1 < len(name):
            out.add(name[:i] + name[i + 1] + name[i] + name[i + 2:])
    return sorted(out)


def _set_path(args, path, value):
    """args with ``path`` (``a``, ``a[]``, ``a.b``, ``a[].b``) set to value; lists get one element."""
    args = json.loads(json.dumps(args))
    head, _dot, rest = path.partition(".")
    if head.endswith("[]"):
        head = head[:-2]
        if rest:
            element = dict((args.get(head) or [{}])[0])
            element[rest] = value
            args[head] = [element]
        else:
            args[head] = [value]
    elif rest:
        inner = dict(args.get(head) or {})
        if head == "lock":
            inner.setdefault("holder", "badinput-test")
        inner[rest] = value
        args[head] = inner
    else:
        args[head] = value
    return args


def module_faults(module, spec):
    """[(kind, strategy of Case)] for one module: every option's faults plus the module-level ones."""
    options = spec["argument_spec"]
    base = MODULE_BASE[module]
    out = []

    def case(kind, option, strategy):
        def build(drawn):
            value, names = drawn
            return Case(module, kind, _set_path(base, option, value) if value is not MISSING else
                        dict((k, v) for k, v in base.items() if k != option), names)
        out.append((kind, strategy.map(build)))

    for name, opt in sorted(options.items()):
        if name in AUTH_OPTIONS and not (module == "gpu_operator_status" or name == "kubeconfig"):
            continue
        for kind, strategy in option_faults(name, opt):
            case(kind, name, strategy)
        if opt.get("required"):
            case("missing required option", name, st.just((MISSING, [name])))
        lo_hi = RANGES.get((module, name))
        if lo_hi:
            lo, hi = lo_hi
            numbers = integers(min_value=hi + 1) if opt["type"] == "int" else st.floats(
                min_value=hi + 0.001, allow_nan=False, allow_infinity=False)
            case("number out of range", name, numbers.map(lambda v, n=name: (v, [n])))
    for path in K8S_NAME_OPTIONS.get(module, []):
        names = [path.replace("[]", "").split(".")[-1], path.replace("[]", "")]
        bad = [b for b in BAD_K8S_NAMES if b or not path.endswith("[]")]  # empty list entries are dropped
        case("malformed Kubernetes name", path, st.sampled_from(bad).map(lambda v, n=names: (v, n)))
    known = set(options)
    for opt in options.values():
        known.update(opt.get("aliases") or [])
    typos = sorted(set(t for name in options for t in _typo(name) if t not in known and len(t) > 2))
    out.append(("unknown option (typo)", st.sampled_from(typos).map(
        lambda t: Case(module, "unknown option (typo)", dict(base, **{t: 1}), [t]))))
    for group in spec.get("mutually_exclusive") or []:
        args = dict(base)
        for name in group:
            args[name] = args.get(name) or _exclusive_value(module, name, options[name])
        out.append(("mutually exclusive options", st.just(Case(module, "mutually exclusive options", args, list(group)))))
    for group in spec.get("required_one_of") or []:
        args = dict((k, v) for k, v in base.items() if k not in group)
        kind = "one of several options required"
        out.append((kind, st.just(Case(module, kind, args, list(group)))))
    for key, value, needed in spec.get("required_if") or []:
        args = dict((k, v) for k, v in base.items() if k not in needed)
        args[key] = value
        kind = "option required by another"
        out.append((kind, st.just(Case(module, kind, args, list(needed)))))
    return out


def _exclusive_value(module, name, opt):
    samples = {"prometheus_url": "http://127.0.0.1:9/", "dcgm_endpoints": [{"url": "http://127.0.0.1:9/metrics"}],
               "gpu_info": {"gpus": []}, "node_labels": {}, "gpu_model": "H100 80GB HBM3", "config_name": "all-disabled",
               "mig_devices": {"1g.10gb": 1}, "config": {"version": "v1", "mig-configs": {"c": [
                   {"devices": "all", "mig-enabled": False}]}}}
    return samples.get(name, _valid_value(opt))


class _Missing(object):
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


# -- mig-parted configs (through mig_plan and gpu_operator_values) -------------------------------------------------
def _entry(draw):
    return {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}


@st.composite
def bad_migparted(draw):
    """(config, names): a mig-parted v1 config with exactly one defect, and the field path the message must name."""
    name = draw(st.text(alphabet=string.ascii_lowercase + "-", min_size=3, max_size=10).filter(lambda n: n.strip("-")))
    entry = _entry(draw)
    config = {"version": "v1", "mig-configs": {name: [entry]}}
    defect = draw(st.sampled_from(["version", "top field", "configs empty", "entries not list", "entry not map",
                                   "entry field", "devices string", "devices index", "devices empty", "enabled",
                                   "mig-devices missing", "mig-devices type", "profile", "count", "all zero",
                                   "disabled with devices", "filter"]))
    where = "mig-configs.%s[0]" % name
    if defect == "version":
        config["version"] = draw(st.one_of(st.sampled_from(["v2", "1", "V1", ""]), integers()))
        return config, ["version"]
    if defect == "top field":
        key = draw(identifiers.filter(lambda k: k not in ("version",)))
        config[key] = 1
        return config, [key]
    if defect == "configs empty":
        config["mig-configs"] = draw(st.sampled_from([{}, [], "all", 0]))
        return config, ["mig-configs"]
    if defect == "entries not list":
        config["mig-configs"][name] = draw(st.sampled_from([[], {}, "x", 3]))
        return config, ["mig-configs.%s" % name]
    if defect == "entry not map":
        config["mig-configs"][name] = [draw(st.sampled_from(["all", 1, ["x"]]))]
        return config, [where]
    if defect == "entry field":
        key = draw(identifiers.filter(lambda k: k not in ("devices", "mig_enabled")))
        entry[key] = True
        return config, [key]
    if defect == "devices string":
        entry["devices"] = draw(words.filter(lambda w: w != "all"))
        return config, [where + ".devices"]
    if defect == "devices index":
        entry["devices"] = [draw(st.one_of(integers(max_value=-1), words))]
        return config, [where + ".devices"]
    if defect == "devices empty":
        entry["devices"] = []
        return config, [where + ".devices"]
    if defect == "enabled":
        entry["mig-enabled"] = draw(st.one_of(words, integers()))
        return config, [where + ".mig-enabled"]
    if defect == "mig-devices missing":
        del entry["mig-devices"]
        return config, [where + ".mig-devices"]
    if defect == "mig-devices type":
        entry["mig-devices"] = draw(st.one_of(words, st.lists(integers(), min_size=1, max_size=2)))
        return config, [where + ".mig-devices"]
    if defect == "profile":
        entry["mig-devices"] = {draw(st.one_of(words, st.sampled_from(["1g", "1g.", "0g.5gb", "1g.5gb+xx", "7g.80tb"]))): 1}
        return config, [where + ".mig-devices"]
    if defect == "count":
        entry["mig-devices"] = {"1g.10gb": draw(st.one_of(integers(max_value=-1), words, st.floats(0.1, 0.9)))}
        return config, [where + ".mig-devices"]
    if defect == "all zero":
        entry["mig-devices"] = {"1g.10gb": 0}
        return config, [where + ".mig-devices"]
    if defect == "disabled with devices":
        entry["mig-enabled"] = False
        return config, [where + ".mig-devices"]
    entry["device-filter"] = draw(st.one_of(words, st.sampled_from(["0x2330", "2330:10de", "0x233010DEFF", []])))
    return config, [where + ".device-filter"]


def migparted_cases():
    """Bad mig-parted configs where users give them: mig_plan's ``config`` (dict or YAML text) and the operator
    role's custom MIG config (gpu_operator_values ``mig_config``)."""
    def to_case(drawn):
        (config, names), how = drawn
        if how == "mig_plan dict":
            return Case("mig_plan", "malformed mig-parted config",
                        {"gpu_model": "H100 80GB HBM3", "config_name": "all-balanced", "config": config}, names)
        if how == "mig_plan text":
            return Case("mig_plan", "malformed mig-parted config",
                        {"gpu_model": "H100 80GB HBM3", "config_name": "all-balanced",
                         "config": yaml.safe_dump(config)}, names)
        return Case("gpu_operator_values", "malformed mig-parted config",
                    {"mig_config": config, "mig_strategy": "mixed"}, names)
    return st.tuples(bad_migparted(), st.sampled_from(["mig_plan dict", "mig_plan text", "gpu_operator_values"])).map(to_case)


# -- device-plugin configs (gpu_operator_values device_plugin_config) -----------------------------------------------
@st.composite
def bad_device_plugin(draw):
    key = draw(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8))
    resource = {"name": "nvidia.com/gpu", "replicas": 4}
    config = {"version": "v1", "sharing": {"timeSlicing": {"resources": [resource]}}}
    where = "device_plugin_config[%s]" % key
    # Not drawn, because NVIDIA's device plugin accepts them (the collection warns; the corpus in
    # tests/integration/oracle/test_device_plugin_config_corpus.py holds such configs): unknown fields, the file's
    # flags.migStrategy (the operator's MIG_STRATEGY wins), MIG resources shared under single.
    defect = draw(st.sampled_from(["version", "sharing type", "both", "resources empty",
                                   "resource type", "resource name", "replicas", "config not map"]))
    strategy = "mixed"
    if defect == "version":
        config["version"] = draw(st.one_of(st.sampled_from(["v2", "1"]), integers()))  # "" is "missing": accepted
        names = [where + ".version"]
    elif defect == "top field":
        field = draw(identifiers.filter(lambda k: k not in ("version", "flags", "resources", "sharing", "imex")))
        config[field] = {}
        names = [field]
    elif defect == "sharing type":
        config["sharing"] = draw(st.one_of(words, st.lists(integers(), min_size=1, max_size=2)))
        names = [where + ".sharing"]
    elif defect == "sharing field":
        field = draw(identifiers.filter(lambda k: k not in ("mps", "timeSlicing")))
        config["sharing"][field] = {}
        names = [field]
    elif defect == "both":
        config["sharing"]["mps"] = {"resources": [dict(resource)]}
        names = [where + ".sharing"]
    elif defect == "resources empty":
        config["sharing"]["timeSlicing"]["resources"] = draw(st.sampled_from([[], {}, "nvidia.com/gpu"]))
        names = [where + ".sharing.timeSlicing.resources"]
    elif defect == "resource type":
        config["sharing"]["timeSlicing"]["resources"] = [draw(st.one_of(words, integers()))]
        names = [where + ".sharing.timeSlicing.resources[0]"]
    elif defect == "resource field":
        field = draw(identifiers.filter(lambda k: k not in ("name", "replicas", "rename", "devices")))
        resource[field] = 1
        names = [field]
    elif defect == "resource name":
        # names NVIDIA's NewResourceName refuses (any lower-case DNS label after nvidia.com/ is a valid name)
        resource["name"] = draw(st.one_of(words.map(lambda w: w.upper() + "_"), st.sampled_from(
            ["nvidia.com/mig-", "amd.com/gpu", "Nvidia.com/GPU", "gpu!", "-gpu", "", "a_b", "x" * 64])))
        names = [where + ".sharing.timeSlicing.resources[0].name"]
    elif defect == "replicas":
        resource["replicas"] = draw(st.one_of(integers(max_value=1), words, st.floats(2.1, 9.9)))
        names = [where + ".sharing.timeSlicing.resources[0].replicas"]
    elif defect == "strategy flag":
        config["flags"] = {"migStrategy": draw(words.filter(lambda w: w not in ("none", "single", "mixed")))}
        names = [where + ".flags.migStrategy"]
    elif defect == "config not map":
        config = draw(st.one_of(words, integers(), st.lists(integers(), min_size=1, max_size=2)))
        names = [where]
    else:
        resource["name"] = "nvidia.com/mig-1g.10gb"
        strategy = "single"
        names = [where + ".sharing.timeSlicing.resources[0]"]
    return Case("gpu_operator_values", "malformed device-plugin config",
                {"device_plugin_config": {key: config}, "device_plugin_config_default": key, "mig_strategy": strategy},
                names)


# -- raw options that modules check themselves ----------------------------------------------------------------------
def max_unavailable_cases():
    malformed = ["0%", "101%", "-5%", "25 %", "%", "1.5", "2x", "", "25%%"]
    values = st.one_of(integers(max_value=0), words, st.sampled_from(malformed),
                       st.floats(0.1, 9.9).filter(lambda f: f != int(f)), st.lists(integers(1, 3), min_size=1, max_size=2),
                       st.dictionaries(identifiers, integers(), min_size=1, max_size=1))
    return values.map(lambda v: Case("mig_rollout", "malformed max_unavailable",
                                     dict(MODULE_BASE["mig_rollout"], max_unavailable=v), ["max_unavailable"]))


def kubeconfig_cases(modules):
    values = st.one_of(integers(), st.lists(integers(), min_size=1, max_size=2),
                       st.sampled_from([{}, {"clusters": []}, {"apiVersion": "v1"}, {"clusters": "x", "users": 1}]),
                       identifiers.map(lambda n: "/nonexistent/%s/kubeconfig" % n))
    return st.tuples(st.sampled_from(modules), values).map(
        lambda mv: Case(mv[0], "malformed kubeconfig", dict(MODULE_BASE[mv[0]], kubeconfig=mv[1]), ["kubeconfig"]))


# -- role argument specs --------------------------------------------------------------------------------------------
def role_faults(entry, options):
    """[(kind, strategy of Case)] for one role entry point (validated as the role's implicit
    validate_argument_spec task does). Roles take every variable, so unknown names are not faults."""
    out = []
    required = dict((k, _valid_value(v)) for k, v in options.items() if v.get("required"))
    for name, opt in sorted(options.items()):
        for kind, strategy in option_faults(name, opt, unknown_ok=False):
            if kind == "negative number":
                continue  # roles pass numbers on to the modules, whose checks are drawn above
            out.append((kind, strategy.map(lambda vn, n=name, k=kind: Case(entry, k, dict(required, **{n: vn[0]}), vn[1]))))
        if opt.get("required"):
            out.append(("missing required option", st.just(Case(entry, "missing required option",
                                                                dict((k, v) for k, v in required.items() if k != name),
                                                                [name]))))
    return out


# -- inventory plugin options ---------------------------------------------------------------------------------------
INVENTORY_OPTIONS = {
    "plugin": {"type": "str", "choices": ["gpufleet.gpu_operator.gpu_nodes"]},
    "include_cpu_nodes": {"type": "bool"},
    "strict": {"type": "bool"},
    "cache": {"type": "bool"},
    "impersonate_groups": {"type": "list", "elements": "str"},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "keyed_groups": {"type": "list", "elements": "dict"},
    "compose": {"type": "dict"},
    "groups": {"type": "dict"},
    "cache_timeout": {"type": "int"},
}


def inventory_cases():
    """(config dict, names): gpu_nodes inventory sources with one bad option."""
    strategies = []
    for name, opt in sorted(INVENTORY_OPTIONS.items()):
        for kind, strategy in option_faults(name, opt, unknown_ok=False):
            if kind == "negative number" and name != "cache_timeout":
                continue
            strategies.append(strategy.map(lambda vn, n=name, k=kind: Case(
                "inventory", k, dict({"plugin": "gpufleet.gpu_operator.gpu_nodes"}, **{n: vn[0]}), vn[1])))
    strategies.append(st.sampled_from(["group", "label_selector"]).flatmap(
        lambda n: st.sampled_from(["", " ", "bad group!", "a,b", "=x", "!!"]).map(
            lambda v: Case("inventory", "malformed name", {"plugin": "gpufleet.gpu_operator.gpu_nodes", n: v}, [n]))))
    typos = sorted(set(t for name in ("label_selector", "include_cpu_nodes", "kubeconfig", "context", "group")
                       for t in _typo(name)))
    strategies.append(st.sampled_from(typos).map(lambda t: Case(
        "inventory", "unknown option (typo)", {"plugin": "gpufleet.gpu_operator.gpu_nodes", t: "x"}, [t])))
    return st.one_of(strategies)


# -- the verdict ----------------------------------------------------------------------------------------------------
# Messages of a module that got past its checks: the input was not refused for what it is.
NOT_A_CHECK = ("no usable Kubernetes connection", "cannot reach the Kubernetes API server", "NVML library not found",
               "Failed to import")


def problem_of(case, result):
    """None when ``result`` refuses ``case`` as it should (failed, changed=false, one line naming one of
    ``case.names``, no traceback), else what is wrong."""
    if "traceback" in result:
        return "traceback: %s" % result["traceback"].strip().splitlines()[-1]
    if "worker_error" in result:
        return result["worker_error"]
    if not result.get("failed"):
        return "accepted (changed=%s)" % result.get("changed")
    if result.get("changed"):
        return "failed with changed=true"
    msg = str(result.get("msg", ""))
    if "\n" in msg.strip():
        return "message on several lines: %r" % msg[:200]
    if case.kind == "malformed kubeconfig":  # refused when the client is built, before any call
        if "kubeconfig" not in msg or "set kubeconfig (or" in msg:
            return "kubeconfig not named as the cause: %r" % msg[:300]
        return None
    if msg.startswith(NOT_A_CHECK) or not any(name in msg for name in case.names):
        return "message names none of %s: %r" % (case.names, msg[:300])
    return None
