# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Input checks that AnsibleModule's argument spec cannot express, run before a module does anything.

- Kubernetes names: node names and object names are DNS-1123 subdomains, namespaces DNS-1123 labels
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/). A malformed name is refused
  here, not sent: an empty node name would address the whole node collection (``/api/v1/nodes/``).
- Numbers: timeouts, delays, counts and ports within their range.
- Options with suboptions whose value cannot be a mapping: ansible-core's own check then fails with a
  message that names no option ("dictionary requested, could not parse JSON or key=value") or with a
  traceback (an int where a list of mappings is expected); ``structure_problems`` names the option first,
  with ansible-core's own converters so that what Ansible accepts (``a=1`` strings, JSON) stays accepted.

Every function returns problem lines naming the option (``lock.name``, ``nodes[2]``); pure Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.common.validation import check_type_dict, check_type_list

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
KINDS = {
    "name": (_SUBDOMAIN, 253, "a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', at most 253 characters, "
                              "starting and ending with a letter or digit"),
    "namespace": (_LABEL, 63, "a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters, "
                              "starting and ending with a letter or digit"),
}


def values_at(params, path):
    """[(where, value)] for ``path`` in ``params``: ``name``, ``lock.name``, ``nodes[]``, ``targets[].node``.
    Absent (None) values are skipped: defaults and required options are the argument spec's business; so are
    empty strings in a list of names, which the modules drop."""
    head, _dot, rest = path.partition(".")
    is_list = head.endswith("[]")
    head = head[:-2] if is_list else head
    value = (params or {}).get(head)
    if value is None:
        return []
    if is_list:
        found = []
        for index, item in enumerate(value if isinstance(value, list) else [value]):
            where = "%s[%d]" % (head, index)
            if rest:
                found.extend(("%s.%s" % (where, w), v) for w, v in values_at({rest: (item or {}).get(rest)}, rest))
            elif item is not None and item != "":  # an empty entry is dropped, as from "a,,b" (mig_rollout)
                found.append((where, item))
        return found
    if rest:
        return [("%s.%s" % (head, w), v) for w, v in values_at(value if isinstance(value, dict) else {}, rest)]
    return [(head, value)]


def name_problem(where, value, kind="name"):
    """None, or why ``value`` is not a Kubernetes name of ``kind`` (``name`` or ``namespace``)."""
    pattern, longest, rule = KINDS[kind]
    if isinstance(value, str) and len(value) <= longest and pattern.match(value):
        return None
    shown = value if not isinstance(value, str) or len(value) <= 80 else value[:77] + "..."
    return "%s: %r is not a valid Kubernetes %s (%s)" % (where, shown, "namespace" if kind == "namespace" else "name",
                                                         rule)


def number_problem(where, value, minimum=None, maximum=None, above=None):
    """None, or why ``value`` is outside ``minimum`` <= value <= ``maximum`` (``above``: value > above)."""
    if value is None:
        return None
    if above is not None and not value > above:
        return "%s must be greater than %s, got %s" % (where, above, value)
    if minimum is not None and value < minimum:
        return "%s must be >= %s, got %s" % (where, minimum, value)
    if maximum is not None and value > maximum:
        return "%s must be <= %s, got %s" % (where, maximum, value)
    return None


def input_problems(params, names=None, numbers=None):
    """Problems of ``params``: ``names`` {path: "name"|"namespace"}, ``numbers`` {path: {minimum, maximum, above}}."""
    problems = []
    for path, kind in (names or {}).items():
        for where, value in values_at(params, path):
            problem = name_problem(where, value, kind)
            if problem:
                problems.append(problem)
    for path, bounds in (numbers or {}).items():
        for where, value in values_at(params, path):
            problem = number_problem(where, value, **bounds)
            if problem:
                problems.append(problem)
    return problems


def _raw_value(params, name, spec):
    for key in [name] + list(spec.get("aliases") or []):
        if params.get(key) is not None:
            return key, params[key]
    return name, None


def structure_problems(argument_spec, params):
    """Options with suboptions (a mapping, or a list of mappings) whose raw value cannot become one."""
    problems = []
    for name, spec in sorted(argument_spec.items()):
        if not spec.get("options"):
            continue
        key, value = _raw_value(params or {}, name, spec)
        if value is None:
            continue
        if spec.get("type", "str") == "dict":
            try:
                check_type_dict(value)
            except (TypeError, ValueError):
                problems.append("%s must be a mapping (suboptions %s), got %s"
                                % (key, ", ".join(sorted(spec["options"])), type(value).__name__))
            continue
        try:
            items = check_type_list(value)
        except (TypeError, ValueError):
            problems.append("%s must be a list of mappings, got %s" % (key, type(value).__name__))
            continue
        for index, item in enumerate(items):
            try:
                check_type_dict(item)
            except (TypeError, ValueError):
                problems.append("%s[%d] must be a mapping (suboptions %s), got %s %r"
                                % (key, index, ", ".join(sorted(spec["options"])), type(item).__name__, item))
    return problems


class CheckedModule(AnsibleModule):
    """AnsibleModule that refuses, naming the option, a value that cannot fill an option's suboptions, before
    ansible-core's own validation turns it into an unnamed message or a traceback."""

    def _load_params(self):
        super(CheckedModule, self)._load_params()
        problems = structure_problems(self.argument_spec, self.params)
        if problems:
            # The raw arguments are not echoed: their no_log values are not known yet.
            self.fail_json(msg="; ".join(problems), changed=False, invocation={"module_args": {}})


def refuse(module, problems):
    """Fail ``module`` with every problem on one line, changed=false, when there are any."""
    if problems:
        module.fail_json(msg="; ".join(problems), changed=False)
