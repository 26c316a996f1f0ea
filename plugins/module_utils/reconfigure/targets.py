# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Each node's target MIG config: the entries of ``profiles`` (each an inventory ``group`` or a Kubernetes
``node_selector`` matched against the node's labels, with the ``profile`` to roll out there) and the default config
for nodes no entry matches. Pure: the node labels and the groups' members are given.

    entries = check_profiles(profiles, groups)          # TargetError naming profiles[i].field when bad
    targets, unmatched = assign(names, labels, entries, default)

A node two entries match is refused (TargetError naming the node and both entries); a node no entry matches takes
``default``, or is left out (``unmatched``) when there is none."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


# Bounds on the input, so that a mistaken variable (a whole inventory pasted in) is refused, not planned.
MAX_ENTRIES = 100
MAX_SELECTOR_TERMS = 32
MAX_SELECTOR_TEXT = 4096
ENTRY_KEYS = ("group", "node_selector", "profile")
# nvidia.com/mig.config is a label: its value is at most 63 characters of this shape.
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
TERM = re.compile(r"^\s*(?P<key>[^\s=!(),]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s=!(),]*)|\s(?P<set>in|notin)\s*"
                  r"\((?P<values>[^()]*)\))?\s*$")


class TargetError(ValueError):
    """The profiles cannot be used; the message names the entry (profiles[i]) and the field, or the node."""


def describe(index, entry):
    """How messages name an entry: profiles[1] (group h100)."""
    if "group" in entry:
        return "profiles[%d] (group %s)" % (index, entry["group"])
    return "profiles[%d] (node_selector %s)" % (index, entry["selector_text"])


def _split_terms(text):
    """The comma-separated terms of a selector string; commas inside ``in (a, b)`` stay in their term."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    return terms + [text[start:]]


def parse_selector(value, where):
    """A Kubernetes label selector as requirements (key, operator, values). ``value``: a string in kubectl's syntax
    (``a=b,c!=d,e in (x,y),f,!g``) or a dict of label -> value (all must be equal, as a Pod's nodeSelector)."""
    if isinstance(value, dict):
        if not value:
            raise TargetError("%s is empty: give at least one label" % where)
        if len(value) > MAX_SELECTOR_TERMS:
            raise TargetError("%s has %d labels, at most %d" % (where, len(value), MAX_SELECTOR_TERMS))
        requirements = []
        for key in sorted(value, key=str):
            if not isinstance(key, str) or not LABEL_KEY.match(key):
                raise TargetError("%s: %r is not a label name" % (where, key))
            label = value[key]
            if isinstance(label, bool) or not isinstance(label, (str, int, float)):
                raise TargetError("%s.%s must be a string label value, got %s" % (where, key, type(label).__name__))
            requirements.append((key, "=", (str(label),)))
        return requirements
    if not isinstance(value, str):
        raise TargetError("%s must be a label selector string (a=b,c in (x,y)) or a dict of labels, got %s"
                          % (where, type(value).__name__))
    if not value.strip():
        raise TargetError("%s is empty: give at least one label requirement" % where)
    if len(value) > MAX_SELECTOR_TEXT:
        raise TargetError("%s is %d characters long, at most %d" % (where, len(value), MAX_SELECTOR_TEXT))
    terms = _split_terms(value)
    if len(terms) > MAX_SELECTOR_TERMS:
        raise TargetError("%s has %d requirements, at most %d" % (where, len(terms), MAX_SELECTOR_TERMS))
    requirements = []
    for term in terms:
        negated = term.strip().startswith("!")
        match = TERM.match(term.strip()[1:] if negated else term)
        if not match or (negated and (match.group("op") or match.group("set"))) \
                or not LABEL_KEY.match(match.group("key")):
            raise TargetError("%s: cannot parse %r (Kubernetes label selector syntax: key=value, key!=value, "
                              "key in (a,b), key notin (a,b), key, !key)" % (where, term.strip()))
        key = match.group("key")
        if negated:
            requirements.append((key, "!", ()))
        elif match.group("set"):
            values = tuple(v.strip() for v in match.group("values").split(",") if v.strip())
            requirements.append((key, match.group("set"), values))
        elif match.group("op"):
            requirements.append((key, "!=" if match.group("op") == "!=" else "=", (match.group("value"),)))
        else:
            requirements.append((key, "exists", ()))
    return requirements


def selector_matches(requirements, labels):
    """Whether labels (a dict) satisfy every requirement, as Kubernetes matches a label selector."""
    for key, operator, values in requirements:
        present = key in labels
        if operator == "exists" and not present or operator == "!" and present:
            return False
        if operator in ("=", "in") and (not present or labels[key] not in values):
            return False
        if operator in ("!=", "notin") and present and labels[key] in values:
            return False
    return True


def check_profiles(profiles, groups=None):
    """The entries of ``profiles`` checked, each as a dict: index, profile, and group (with its ``members``) or
    selector_text and ``requirements``. ``groups``: inventory group name -> the node names of its GPU hosts.
    Refuses, naming profiles[i] and the field: a non-dict entry, unknown keys, neither or both of group and
    node_selector, an empty or malformed profile, a group not in ``groups``, a malformed selector, too many entries."""
    if profiles is None:
        return []
    if not isinstance(profiles, list):
        raise TargetError("profiles must be a list of entries, got %s" % type(profiles).__name__)
    if len(profiles) > MAX_ENTRIES:
        raise TargetError("profiles has %d entries, at most %d (one per node pool)" % (len(profiles), MAX_ENTRIES))
    groups = groups or {}
    entries = []
    for index, entry in enumerate(profiles):
        where = "profiles[%d]" % index
        if not isinstance(entry, dict):
            raise TargetError("%s must be a dict with profile and one of group or node_selector, got %s"
                              % (where, type(entry).__name__))
        unknown = sorted(str(k) for k in entry if k not in ENTRY_KEYS)
        if unknown:
            raise TargetError("%s has unknown field(s) %s (supported: %s)"
                              % (where, ", ".join(unknown), ", ".join(ENTRY_KEYS)))
        profile = entry.get("profile")
        if not isinstance(profile, str):
            raise TargetError("%s.profile must be a MIG config name (a string), got %s"
                              % (where, "nothing" if profile is None else type(profile).__name__))
        if not profile.strip():
            raise TargetError("%s.profile is empty: name the MIG config to roll out there (e.g. all-balanced)" % where)
        if not LABEL_VALUE.match(profile):
            raise TargetError("%s.profile %r is not a MIG config name (it becomes the value of the nvidia.com/mig.config "
                              "label: at most 63 letters, digits, '-', '_' or '.')" % (where, profile))
        given = [k for k in ("group", "node_selector") if k in entry]
        if len(given) != 1:
            raise TargetError("%s must have exactly one of group or node_selector, got %s"
                              % (where, " and ".join(given) or "neither"))
        checked = {"index": index, "profile": profile}
        if "group" in entry:
            group = entry["group"]
            if not isinstance(group, str) or not group.strip():
                raise TargetError("%s.group must be an inventory group name (a non-empty string), got %r"
                                  % (where, group))
            if group not in groups:
                raise TargetError("%s.group: no inventory group named %s" % (where, group))
            checked.update(group=group, members=set(groups[group] or []))
        else:
            selector = entry["node_selector"]
            checked.update(requirements=parse_selector(selector, where + ".node_selector"),
                           selector_text=selector if isinstance(selector, str) else ",".join(
                               "%s=%s" % (k, selector[k]) for k in sorted(selector)))
        entries.append(checked)
    return entries


def matches(entry, name, labels):
    if "group" in entry:
        return name in entry["members"]
    return selector_matches(entry["requirements"], labels or {})


def assign(names, labels_by_node, entries, default=None):
    """Each node's target: ((node, config) pairs in ``names`` order, the nodes left out). The entry that matches a
    node wins over ``default``; a node no entry matches takes ``default``, or is left out when it is empty.
    ``labels_by_node``: node name -> its labels as read from the cluster. Refuses a node two entries match."""
    targets, unmatched = [], []
    for name in names:
        found = [e for e in entries if matches(e, name, labels_by_node.get(name))]
        if len(found) > 1:
            raise TargetError("node %s is matched by %s and by %s: make the entries exclusive (nothing was changed)"
                              % (name, describe(found[0]["index"], found[0]), describe(found[1]["index"], found[1])))
        if found:
            targets.append((name, found[0]["profile"]))
        elif default:
            targets.append((name, default))
        else:
            unmatched.append(name)
    return targets, unmatched


def needs_labels(entries):
    """Whether matching the entries needs the nodes' labels (a node_selector entry)."""
    return any("requirements" in e for e in entries)


class Selection(object):
    """The checked entries and the default config, for the rollout engine: ``assign`` once the labels are read."""

    def __init__(self, entries, default=None):
        self.entries = entries
        self.default = default
        self.needs_labels = needs_labels(entries)

    def assign(self, names, labels_by_node):
        return assign(names, labels_by_node, self.entries, self.default)
