"""The examples users copy work with what the collection ships and with the example inventory.

Covered: every module's and filter's EXAMPLES, and the YAML plays and task lists in README.md, docs/ and the roles'
READMEs. Each task's module must come from a collection galaxy.yml declares (or ansible.builtin and this
collection); this collection's modules' arguments are checked against the argument spec the module passes to
AnsibleModule (keys known, required present, choices, types, suboptions, mutually exclusive and required_* rules)
and ansible.builtin modules' arguments against the options their DOCUMENTATION lists; a templated value
(``{{ }}``) skips the type and choice checks. Every template is parsed with Jinja2, every collection a template names
(a filter, test or lookup in FQCN form) must be declared, and every variable a template reads must be defined by the
example inventory (inventories/example: its host and group variables, or a host variable of the gpu_nodes inventory
plugin), a role's defaults or argument spec, an earlier task of the same example (register, set_fact), the play or
task, or be one of Ansible's special variables. A variable read only behind ``default(...)`` or ``is defined`` may be
undefined. Templates that read only the example inventory's and Ansible's variables are rendered as a play on the
example inventory's gpu_nodes group renders them (example_renderer.py, a process of its own) and must not fail; where
a module takes Kubernetes node names (NODE_NAME_PATHS), each value, literal or rendered, must be the node name of a
host of that inventory (its gpu_node_name), not an inventory host name.
"""

import ast
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateSyntaxError

from .test_argument_specs import capture

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
COLLECTION = "gpufleet.gpu_operator"
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                 if name.endswith(".py") and not name.startswith("_"))
FILTERS = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "filter"))
                 if name.endswith(".py") and not name.startswith("_"))
ROLES = sorted(name for name in os.listdir(os.path.join(ROOT, "roles"))
               if os.path.isfile(os.path.join(ROOT, "roles", name, "tasks", "main.yml")))
MARKDOWN = ["README.md"] + ["docs/%s" % n for n in sorted(os.listdir(os.path.join(ROOT, "docs"))) if n.endswith(".md")] + [
    "roles/%s/README.md" % r for r in ROLES]

# Ansible's special variables (https://docs.ansible.com/ansible/latest/reference_appendices/special_variables.html)
# and the globals Ansible's and Jinja2's templating add (lookup/query/q/now/undef; range/dict/namespace/...).
SPECIAL_VARIABLES = frozenset("""
ansible_check_mode ansible_collection_name ansible_config_file ansible_dependent_role_names ansible_diff_mode
ansible_facts ansible_forks ansible_inventory_sources ansible_limit ansible_local ansible_loop ansible_loop_var
ansible_index_var ansible_parent_role_names ansible_parent_role_paths ansible_play_batch ansible_play_hosts
ansible_play_hosts_all ansible_play_name ansible_play_role_names ansible_playbook_python ansible_role_name
ansible_role_names ansible_run_tags ansible_search_path ansible_skip_tags ansible_verbosity ansible_version
group_names groups hostvars inventory_dir inventory_file inventory_hostname inventory_hostname_short omit play_hosts
playbook_dir role_name role_names role_path ansible_failed_task ansible_failed_result
lookup query q now undef range dict lipsum cycler joiner namespace
""".split())
GUARD_FILTERS = frozenset(["default", "d", "ansible.builtin.default"])
GUARD_TESTS = frozenset(["defined", "undefined", "ansible.builtin.defined", "ansible.builtin.undefined"])
CONDITIONAL_KEYWORDS = ("when", "changed_when", "failed_when", "until")
FQCN = re.compile(r"^([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*$")


class _AnyName(dict):
    """Filters and tests are Ansible's and collections' (template_problems checks the collections): Jinja2's analysis
    takes any name."""

    def __contains__(self, name):
        return True

    def get(self, name, default=None):
        return dict.get(self, name) or (lambda *args, **kwargs: None)


JINJA = Environment()
JINJA.filters = _AnyName(JINJA.filters)
JINJA.tests = _AnyName(JINJA.tests)
# Where this collection's modules take Kubernetes node names (a[] = each element of list a, a{} = each key of dict a).
NODE_NAME_PATHS = {
    "gpu_cluster_facts": ["dcgm_endpoints[].node"],
    "gpu_drain": ["name"],
    "gpu_node_validate": ["nodes[].name"],
    "gpu_operator_status": ["nodes[]"],
    "gpu_operator_upgrade_check": ["nodes[]"],
    "gpu_operator_driver_pools": ["gpu_nodes[]"],
    "gpu_smoke_test": ["targets[].node"],
    "mig_rollout": ["nodes[]", "hardware{}"],
    "node_mig_config": ["name"],
}
NOT_RENDERED = "{{ not rendered: reads a variable of the example itself }}"
OMITTED = object()


# ---- what the collection declares and ships ------------------------------------------------------------------------

def declared_collections():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        galaxy = yaml.safe_load(handle)
    return frozenset(galaxy.get("dependencies") or {}) | {"ansible.builtin", COLLECTION}


def _python_constant(path, name):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return node.value.value
    return None


def examples_of(kind, name):
    text = _python_constant(os.path.join(ROOT, "plugins", kind, name + ".py"), "EXAMPLES")
    return yaml.safe_load(text) if text else None


def yaml_blocks(relpath):
    """[(line, data)] for each ```yaml block of a Markdown file."""
    with open(os.path.join(ROOT, relpath)) as handle:
        lines = handle.read().splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if start is None and stripped.startswith("```"):
            start = number if stripped[3:].strip() in ("yaml", "yml") else -number
        elif start is not None and stripped.startswith("```"):
            if start > 0:
                blocks.append((start, yaml.safe_load("\n".join(lines[start:number - 1]))))
            start = None
    return blocks


def _options_from_doc(options):
    """A DOCUMENTATION options mapping in argument-spec form (suboptions -> options)."""
    spec = {}
    for name, doc in (options or {}).items():
        opt = dict((k, doc[k]) for k in ("type", "required", "choices", "aliases", "elements") if k in doc)
        if doc.get("suboptions"):
            opt["options"] = _options_from_doc(doc["suboptions"])
        spec[name] = opt
    return spec


def builtin_module_spec(short_name):
    """argument_spec-like dict of an ansible.builtin module from its DOCUMENTATION, None if there is no such module,
    {} when the module takes free-form arguments."""
    import ansible.modules

    path = os.path.join(os.path.dirname(ansible.modules.__file__), short_name + ".py")
    if not os.path.isfile(path):
        return None
    options = (yaml.safe_load(_python_constant(path, "DOCUMENTATION") or "{}") or {}).get("options") or {}
    if "free_form" in options or "key_value" in options:
        return {}
    return {"argument_spec": _options_from_doc(options)}


def inventory_variables():
    """Host and group variables the example inventory defines, and the host variables of the gpu_nodes plugin."""
    found, hosts, groups, node_names = set(), set(), {"all", "ungrouped"}, set()
    base = os.path.join(ROOT, "inventories", "example")

    def walk(group_name, group):
        groups.add(group_name)
        group = group or {}
        for host, variables in (group.get("hosts") or {}).items():
            hosts.add(host)
            found.update(variables or {})
            node_names.add((variables or {}).get("gpu_node_name") or host)
        found.update(group.get("vars") or {})
        for child, data in (group.get("children") or {}).items():
            walk(child, data)

    with open(os.path.join(base, "hosts.yml")) as handle:
        for name, data in yaml.safe_load(handle).items():
            walk(name, data)
    for folder in ("group_vars", "host_vars"):
        if os.path.isdir(os.path.join(base, folder)):
            for filename in os.listdir(os.path.join(base, folder)):
                with open(os.path.join(base, folder, filename)) as handle:
                    found.update(yaml.safe_load(handle) or {})
    plugin_examples = _python_constant(os.path.join(ROOT, "plugins", "inventory", "gpu_nodes.py"), "EXAMPLES")
    host_vars_doc = plugin_examples[plugin_examples.index("# Host variables"):]
    found.update(re.findall(r"\b(gpu_[a-z_]+)\b", host_vars_doc))
    return found, hosts, groups, node_names


def role_options(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as handle:
        return set(yaml.safe_load(handle)["argument_specs"]["main"]["options"])


def role_variables():
    found = set()
    for role in ROLES:
        path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                found.update(yaml.safe_load(handle) or {})
        found.update(role_options(role))
    return found


# ---- checks ------------------------------------------------------------------------------------------------------

def is_templated(value):
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _type_problem(value, type_name, where):
    from ansible.module_utils.common.parameters import DEFAULT_TYPE_VALIDATORS

    checker = DEFAULT_TYPE_VALIDATORS.get(type_name or "str")
    if checker is None:  # raw, or a callable type
        return None, value
    try:
        return None, checker(value)
    except (TypeError, ValueError) as exc:
        return "%s: %r is not %s (%s)" % (where, value, type_name, exc), value


def value_problems(value, opt, where):
    if value is None or is_templated(value):
        return []
    problem, converted = _type_problem(value, opt.get("type", "str"), where)
    if problem:
        return [problem]
    problems = []
    if opt.get("type") == "list":
        for index, element in enumerate(converted):
            at = "%s[%d]" % (where, index)
            if element is None or is_templated(element):
                continue
            element_problem, element = _type_problem(element, opt.get("elements", "raw"), at)
            if element_problem:
                problems.append(element_problem)
            elif opt.get("options") and opt.get("elements") == "dict":
                problems.extend(spec_problems(element, opt["options"], at, opt))
            elif opt.get("choices") and element not in opt["choices"]:
                problems.append("%s: %r is not one of %s" % (at, element, opt["choices"]))
    elif opt.get("type") == "dict" and opt.get("options"):
        problems.extend(spec_problems(converted, opt["options"], where, opt))
    elif opt.get("choices") and converted not in opt["choices"]:
        problems.append("%s: %r is not one of %s" % (where, value, opt["choices"]))
    return problems


def spec_problems(params, spec, where, rules=None):
    """Problems of ``params`` against an argument spec: unknown and missing options, values, and the rules
    (mutually_exclusive, required_*) given in ``rules`` (AnsibleModule's keyword arguments or a suboption)."""
    from ansible.module_utils.common import validation

    if is_templated(params):
        return []
    if not isinstance(params, dict):
        return ["%s: %r is not a mapping of options" % (where, params)]
    names = {}
    for name, opt in spec.items():
        names[name] = name
        for alias in opt.get("aliases") or ():
            names[alias] = name
    problems = ["%s: unknown option %s (known: %s)" % (where, key, ", ".join(sorted(spec)))
                for key in params if key not in names]
    given = dict((names[k], v) for k, v in params.items() if k in names)
    problems.extend("%s: required option %s missing" % (where, name)
                    for name, opt in sorted(spec.items()) if opt.get("required") and name not in given)
    for name, value in sorted(given.items()):
        problems.extend(value_problems(value, spec[name], "%s.%s" % (where, name)))
    rules = rules or {}
    for key, check in (("mutually_exclusive", validation.check_mutually_exclusive),
                       ("required_one_of", validation.check_required_one_of),
                       ("required_together", validation.check_required_together),
                       ("required_if", validation.check_required_if),
                       ("required_by", validation.check_required_by)):
        if rules.get(key):
            try:
                check(rules[key], given)
            except TypeError as exc:
                problems.append("%s: %s" % (where, exc))
    return problems


def parse_template(text):
    """(Jinja2 AST, the variables it reads that it does not set, those of them read unguarded)."""
    from jinja2 import meta

    tree = JINJA.parse(text)
    guarded = set()
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        guard = GUARD_FILTERS if isinstance(node, nodes.Filter) else GUARD_TESTS
        if node.name in guard and node.node is not None:
            guarded.update(id(n) for n in node.node.find_all(nodes.Name))
            if isinstance(node.node, nodes.Name):
                guarded.add(id(node.node))
    undeclared = meta.find_undeclared_variables(tree)
    unguarded = set(n.name for n in tree.find_all(nodes.Name) if n.ctx == "load" and id(n) not in guarded)
    return tree, undeclared, undeclared & unguarded


def template_problems(text, where, known, declared):
    """Jinja2 syntax, undeclared collections and undefined variables of one template."""
    try:
        tree, _undeclared, unguarded = parse_template(text)
    except TemplateSyntaxError as exc:
        return ["%s: Jinja2 syntax error %s in %r" % (where, exc, text)]
    problems = []
    referenced = set(n.name for n in tree.find_all((nodes.Filter, nodes.Test)))
    referenced.update(n.value for n in tree.find_all(nodes.Const) if isinstance(n.value, str))
    for name in sorted(referenced):
        match = FQCN.match(name)
        if match and "%s.%s" % match.groups() not in declared:
            problems.append("%s: %s is from collection %s.%s, which galaxy.yml does not declare" % (
                (where, name) + match.groups()))
        elif match and name.startswith(COLLECTION + ".") and name.split(".")[-1] not in FILTERS:
            problems.append("%s: %s is not a filter of this collection" % (where, name))
    missing = sorted(unguarded - known)
    if missing:
        problems.append("%s: %s not defined by the example inventory, a role default, the example or Ansible "
                        "(in %r)" % (where, ", ".join(missing), text))
    return problems


class Renderer(object):
    """Templates rendered by example_renderer.py in a process of its own, on the example inventory."""

    def __init__(self):
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, os.path.join(HERE, "example_renderer.py")], cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def __call__(self, text):
        self.process.stdin.write(json.dumps(text) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "example_renderer.py ended (exit code %s)" % self.process.poll()
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def path_values(value, segments):
    """The values at a NODE_NAME_PATHS path."""
    if not segments:
        yield value
        return
    if not isinstance(value, dict):
        return
    segment = segments[0]
    if segment.endswith("[]"):
        found = value.get(segment[:-2])
        for element in found if isinstance(found, list) else []:
            yield from path_values(element, segments[1:])
    elif segment.endswith("{}"):
        found = value.get(segment[:-2])
        for key in found if isinstance(found, dict) else []:
            yield from path_values(key, segments[1:])
    elif segment in value:
        yield from path_values(value[segment], segments[1:])


def _strings(value, path):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, "%s.%s" % (path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, "%s[%d]" % (path, index))


def _task_keywords():
    from ansible.playbook.task import Task

    return frozenset(Task.fattributes) | {"local_action", "block", "rescue", "always"}


class Checker(object):
    def __init__(self, monkeypatch, renderer=None):
        self.monkeypatch = monkeypatch
        self.renderer = renderer
        self.declared = declared_collections()
        inventory_vars, self.hosts, self.groups, self.node_names = inventory_variables()
        self.renderable = frozenset(inventory_vars | SPECIAL_VARIABLES)
        self.known = frozenset(inventory_vars | role_variables() | SPECIAL_VARIABLES)
        self.keywords = _task_keywords()
        self._specs = {}

    def module_spec(self, name):
        if name not in self._specs:
            namespace, collection, short = name.split(".")
            if "%s.%s" % (namespace, collection) == COLLECTION:
                self._specs[name] = capture(short, self.monkeypatch) if short in MODULES else None
            elif "%s.%s" % (namespace, collection) == "ansible.builtin":
                self._specs[name] = builtin_module_spec(short)
            else:
                self._specs[name] = {}  # another collection's module: declared is what is checked
        return self._specs[name]

    def render(self, value, where, problems):
        """``value`` with each template that reads only the example inventory's and Ansible's variables rendered;
        others become NOT_RENDERED (their checks are skipped); rendering errors are added to ``problems``."""
        if isinstance(value, dict):
            rendered = ((k, self.render(v, "%s.%s" % (where, k), problems)) for k, v in value.items())
            return dict((k, v) for k, v in rendered if v is not OMITTED)
        if isinstance(value, list):
            return [v for v in (self.render(v, "%s[%d]" % (where, i), problems) for i, v in enumerate(value))
                    if v is not OMITTED]
        if not is_templated(value) or self.renderer is None:
            return value
        try:
            _tree, _undeclared, unguarded = parse_template(value)
        except TemplateSyntaxError:
            return NOT_RENDERED  # template_problems reports it
        if unguarded - self.renderable:
            return NOT_RENDERED
        answer = self.renderer(value)
        if "error" in answer:
            problems.append("%s: %r fails on the example inventory: %s" % (where, value, answer["error"]))
            return NOT_RENDERED
        return OMITTED if answer.get("omitted") else answer["value"]

    def node_name_problems(self, short, args, where):
        problems = []
        for path in NODE_NAME_PATHS.get(short, ()):
            for name in path_values(args, path.split(".")):
                if isinstance(name, str) and not is_templated(name) and name not in self.node_names:
                    problems.append("%s: %s gets %r, not a Kubernetes node of the example inventory (%s: each host's "
                                    "gpu_node_name)" % (where, path, name, ", ".join(sorted(self.node_names))))
        return problems

    def templates(self, value, where, known):
        problems = []
        for path, text in _strings(value, where):
            if is_templated(text):
                problems.extend(template_problems(text, path, known, self.declared))
        return problems

    def tasks(self, tasks, where, known):
        """Problems of a task list; ``known`` grows with what each task registers or sets."""
        problems = []
        if not isinstance(tasks, list):
            return ["%s: not a list of tasks" % where]
        for index, task in enumerate(tasks):
            at = "%s task %d (%s)" % (where, index + 1, (task or {}).get("name", "unnamed"))
            problems.extend(self.task(task, at, known))
        return problems

    def task(self, task, where, known):
        if not isinstance(task, dict):
            return ["%s: not a mapping" % where]
        problems = []
        local = set(task.get("vars") or {})
        if "loop" in task or any(k.startswith("with_") for k in task):
            local.add((task.get("loop_control") or {}).get("loop_var", "item"))
        scope = known | local
        for block in ("block", "rescue", "always"):
            if block in task:
                problems.extend(self.tasks(task[block], "%s %s" % (where, block), scope))
        actions = [k for k in task if k not in self.keywords and not k.startswith("with_")]
        if not any(k in task for k in ("block", "rescue", "always")):
            if len(actions) != 1:
                return problems + ["%s: expected one module, found %s" % (where, actions)]
            action = actions[0]
            match = FQCN.match(action)
            if not match:
                problems.append("%s: %s is not a fully qualified module name" % (where, action))
            elif "%s.%s" % match.groups() not in self.declared:
                problems.append("%s: %s is from collection %s.%s, which galaxy.yml does not declare" % (
                    (where, action) + match.groups()))
            else:
                spec = self.module_spec(action)
                args = task[action]
                if spec is None:
                    problems.append("%s: no module %s" % (where, action))
                elif spec and not isinstance(args, str):
                    args = self.render(args or {}, "%s %s" % (where, action), problems)
                    rules = dict((k, v) for k, v in spec.items() if k != "argument_spec")
                    problems.extend(spec_problems(args, spec["argument_spec"], "%s %s" % (where, action), rules))
                    if action.startswith(COLLECTION + "."):
                        problems.extend(self.node_name_problems(action.split(".")[-1], args, "%s %s" % (
                            where, action)))
            problems.extend(self.templates(task[action], where, scope))
            if action in ("ansible.builtin.assert",) and isinstance(task[action], dict):
                that = task[action].get("that")
                for index, condition in enumerate(that if isinstance(that, list) else [that]):
                    if isinstance(condition, str):
                        problems.extend(template_problems("{{ %s }}" % condition, "%s that[%d]" % (where, index),
                                                          scope, self.declared))
        for keyword in CONDITIONAL_KEYWORDS:
            conditions = task.get(keyword)
            for index, condition in enumerate(conditions if isinstance(conditions, list) else [conditions]):
                if isinstance(condition, str) and not is_templated(condition):
                    condition = "{{ %s }}" % condition
                if isinstance(condition, str):
                    problems.extend(template_problems(condition, "%s %s[%d]" % (where, keyword, index), scope,
                                                      self.declared))
        other = dict((k, v) for k, v in task.items() if k in self.keywords and k not in CONDITIONAL_KEYWORDS + (
            "block", "rescue", "always"))
        problems.extend(self.templates(other, where, scope))
        delegate = task.get("delegate_to")
        if isinstance(delegate, str) and not is_templated(delegate) and delegate not in self.hosts | {"localhost"}:
            problems.append("%s: delegate_to %s is not a host of the example inventory" % (where, delegate))
        if task.get("register"):
            known.add(task["register"])
        if actions and actions[0] == "ansible.builtin.set_fact" and isinstance(task[actions[0]], dict):
            known.update(k for k in task[actions[0]] if k != "cacheable")
        return problems

    def play(self, play, where):
        problems = []
        hosts = play.get("hosts")
        for pattern in (hosts if isinstance(hosts, list) else str(hosts).split(",")):
            if pattern not in self.groups | self.hosts | {"localhost"} and not is_templated(pattern):
                problems.append("%s: hosts %s is neither a group nor a host of the example inventory" % (where, pattern))
        for action in play.get("module_defaults") or {}:
            name = action[len("group/"):] if action.startswith("group/") else action
            match = FQCN.match(name)
            if not match or "%s.%s" % match.groups() not in self.declared:
                problems.append("%s: module_defaults %s is not from a declared collection" % (where, action))
        known = set(self.known) | set(play.get("vars") or {})
        problems.extend(self.templates(dict((k, v) for k, v in play.items() if k not in (
            "tasks", "pre_tasks", "post_tasks", "handlers", "roles")), where, known))
        for index, role in enumerate(play.get("roles") or []):
            role = {"role": role} if isinstance(role, str) else role
            name = role.get("role") or role.get("name")
            short = name[len(COLLECTION) + 1:] if name.startswith(COLLECTION + ".") else None
            if short not in ROLES:
                problems.append("%s: role %s is not a role of this collection in FQCN form" % (where, name))
                continue
            unknown = sorted(set(role.get("vars") or {}) - role_options(short))
            if unknown:
                problems.append("%s: role %s has no options %s" % (where, name, unknown))
            problems.extend(self.templates(role, "%s role %d" % (where, index + 1), known))
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            if play.get(section):
                problems.extend(self.tasks(play[section], "%s %s" % (where, section), known))
        return problems

    def document(self, data, where):
        """A task list, or a list of plays; anything else (an inventory source, variables) is not checked here."""
        if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
            return []
        if all("hosts" in item or "import_playbook" in item for item in data):
            return [p for index, play in enumerate(data) for p in self.play(play, "%s play %d" % (where, index + 1))]
        return self.tasks(data, where, set(self.known))


@pytest.fixture(scope="module")
def renderer():
    started = Renderer()
    yield started
    started.close()


@pytest.fixture
def checker(monkeypatch, renderer):
    return Checker(monkeypatch, renderer)


# ---- the checker catches what it is for -------------------------------------------------------------------------

def test_checker_finds_each_kind_of_problem(checker):
    tasks = yaml.safe_load("""
- name: Node names from the inventory host names, with an undeclared collection
  gpufleet.gpu_operator.gpu_node_validate:
    nodes: "{{ groups['gpu_nodes'] | map('community.general.dict_kv', 'name') | list }}"
- name: Unknown option, bad choice, missing required suboption
  gpufleet.gpu_operator.gpu_node_validate:
    nodes: [{hardware: {}}]
    hardware_source: nvml
    colour: blue
- name: A variable nobody defines
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ inventory_hostname }}-{{ run_id }}"
- name: Required option missing, and a module of an undeclared collection
  gpufleet.gpu_operator.mig_rollout_lock: {}
- name: Not declared
  community.general.dict_kv: {}
- name: Broken template
  ansible.builtin.debug:
    msg: "{{ fleet.table "
- name: Short module name
  debug:
    msg: hi
- name: Builtin option unknown
  ansible.builtin.debug:
    message: hi
- name: Delegated to a host that does not exist
  gpufleet.gpu_operator.gpu_drain:
    name: gpu-node-01
  delegate_to: gpu-node-7
- name: Mutually exclusive options
  gpufleet.gpu_operator.mig_plan:
    gpu_model: NVIDIA A100-SXM4-40GB
    node_labels: {}
    config_name: all-balanced
- name: Wrong type
  gpufleet.gpu_operator.gpu_drain:
    name: gpu-node-01
    timeout: soon
- name: Inventory host names as node names
  gpufleet.gpu_operator.gpu_operator_status:
    nodes: "{{ groups['gpu_nodes'] }}"
- name: A node the inventory does not have
  gpufleet.gpu_operator.gpu_drain:
    name: gpu-node-1
- name: A template that fails on the example inventory
  gpufleet.gpu_operator.node_mig_config:
    name: "{{ hostvars['gpu-node-09.example.com'].gpu_node_name }}"
""")
    problems = "\n".join(checker.tasks(tasks, "planted", set(checker.known)))
    for expected in ("community.general.dict_kv is from collection community.general",
                     "unknown option colour", "'nvml' is not one of", "required option name missing",
                     "run_id not defined", "required option holder missing",
                     "task 5 (Not declared): community.general.dict_kv is from collection community.general",
                     "Jinja2 syntax error", "debug is not a fully qualified module name", "unknown option message",
                     "delegate_to gpu-node-7 is not a host", "mutually exclusive", "'soon' is not int",
                     "nodes[] gets 'gpu-node-01.example.com', not a Kubernetes node of the example inventory",
                     "name gets 'gpu-node-1', not a Kubernetes node", "fails on the example inventory"):
        assert expected in problems, "%r not found in:\n%s" % (expected, problems)


def test_checker_accepts_guarded_registered_and_special_variables(checker):
    tasks = yaml.safe_load("""
- name: Read
  gpufleet.gpu_operator.gpu_info:
  register: gpu
- name: Guarded and registered
  gpufleet.gpu_operator.mig_plan:
    gpu_info: "{{ gpu }}"
    config_name: "{{ profile | default('all-balanced') }}"
  when: extra is defined and inventory_hostname in groups['gpu_nodes']
  loop: "{{ ansible_play_hosts }}"
- name: The loop variable
  ansible.builtin.debug:
    msg: "{{ hostvars[item].gpu_node_name }} {{ gpu_operator_chart_version }}"
  loop: "{{ groups['gpu_nodes'] }}"
""")
    assert checker.tasks(tasks, "fine", set(checker.known)) == []


def test_checker_reads_plays_and_role_options(checker):
    plays = yaml.safe_load("""
- hosts: gpu_nodes
  roles:
    - role: gpufleet.gpu_operator.gpu_validate
      vars: {gpu_validate_no_such_option: 1}
    - role: gpufleet.gpu_operator.nope
- hosts: gpu_workers
  module_defaults:
    group/community.kubernetes.k8s: {}
  tasks: []
""")
    problems = "\n".join(checker.document(plays, "planted"))
    for expected in ("has no options ['gpu_validate_no_such_option']", "role gpufleet.gpu_operator.nope",
                     "hosts gpu_workers", "module_defaults group/community.kubernetes.k8s"):
        assert expected in problems, "%r not found in:\n%s" % (expected, problems)


# ---- the shipped examples ------------------------------------------------------------------------------------

@pytest.mark.parametrize("module_name", MODULES)
def test_module_examples_fit_the_collection_and_the_example_inventory(module_name, checker):
    tasks = examples_of("modules", module_name)
    assert tasks, "module %s has no EXAMPLES" % module_name
    assert any(isinstance(t, dict) and "%s.%s" % (COLLECTION, module_name) in t for t in tasks), \
        "the EXAMPLES of %s never call it" % module_name
    problems = checker.tasks(tasks, "%s EXAMPLES" % module_name, set(checker.known))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("filter_name", FILTERS)
def test_filter_examples_fit_the_collection_and_the_example_inventory(filter_name, checker):
    tasks = examples_of("filter", filter_name)
    assert tasks, "filter %s has no EXAMPLES" % filter_name
    problems = checker.tasks(tasks, "%s EXAMPLES" % filter_name, set(checker.known))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("relpath", MARKDOWN)
def test_markdown_examples_fit_the_collection_and_the_example_inventory(relpath, checker):
    problems = []
    for line, data in yaml_blocks(relpath):
        problems.extend(checker.document(data, "%s:%d" % (relpath, line)))
    assert not problems, "\n".join(problems)


def test_markdown_examples_are_found():
    """The YAML blocks the test above reads are there: every role README shows a play."""
    plays = [relpath for relpath in MARKDOWN if relpath.startswith("roles/")
             for _line, data in yaml_blocks(relpath) if isinstance(data, list) and data and "hosts" in data[0]]
    assert len(plays) == len(ROLES), plays
