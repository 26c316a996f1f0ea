# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What a playbook needs before it starts, checked on the controller (module gpu_preflight).

- executables on PATH (helm), Python packages importable by the Python that runs the modules (kubernetes);
- the Kubernetes connection: which kubeconfig and context (named, never masked: only the credentials inside a
  kubeconfig given as a mapping are secret), the API server's address and version (GET /version), the user it
  authenticates as (SelfSubjectReview, where the server has it);
- RBAC: a SelfSubjectAccessReview per (verb, resource, namespace) the playbook will use; every one denied is
  listed by name. A review creates nothing: the server answers it and keeps nothing, so check mode runs it too;
- the directories the playbook will write on the controller: each a directory this user can write, or one that can
  be created (its nearest existing parent a directory this user can write). Nothing is created here.

The pure parts (naming a rule, the review's body, the one-line summary) are separate from the calls.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil

try:
    from importlib import metadata as importlib_metadata
except ImportError:  # pragma: no cover - Python < 3.8
    importlib_metadata = None

try:
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:  # pragma: no cover - packaging comes with ansible-core
    Requirement = None

    class InvalidRequirement(Exception):  # type: ignore[no-redef]
        pass

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import _decode
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import ApiException

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSR_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
VERSION_PATH = "/version"


# -- naming ----------------------------------------------------------------------------------------------------

def rules_of(access):
    """The (verb, resource, subresource, group, namespace, name) rules of ``access`` (the module option: entries of
    ``verbs``, ``resource`` ...), one per verb, in order, without repeats."""
    rules = []
    for entry in access or []:
        resource, _sep, subresource = (entry.get("resource") or "").partition("/")
        for verb in entry.get("verbs") or []:
            rule = (verb, resource, subresource or None, entry.get("group") or "", entry.get("namespace") or None,
                    entry.get("name") or None)
            if rule not in rules:
                rules.append(rule)
    return rules


def rule_name(rule):
    """``create pods/eviction in namespace gpu-operator``, ``update leases.coordination.k8s.io/gpufleet-mig-rollout
    in namespace gpu-operator``, ``patch nodes`` (cluster-wide)."""
    verb, resource, subresource, group, namespace, name = rule
    what = resource + ("/" + subresource if subresource else "") + ("." + group if group else "")
    return "%s %s%s%s" % (verb, what, " " + name if name else "", " in namespace %s" % namespace if namespace else "")


def review_body(rule):
    """The SelfSubjectAccessReview (authorization.k8s.io/v1) that asks the server whether ``rule`` is allowed."""
    verb, resource, subresource, group, namespace, name = rule
    attributes = {"verb": verb, "resource": resource, "group": group}
    if subresource:
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    if name:
        attributes["name"] = name
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}


def connection_names(params, environ=None):
    """{"kubeconfig": what the client reads, "context": the context asked for (None: the kubeconfig's current one)}:
    a path as given (or KUBECONFIG, ~/.kube/config), ``(mapping)`` for a kubeconfig given as content, None when
    host/api_key or the in-cluster account are used."""
    environ = os.environ if environ is None else environ
    kubeconfig = params.get("kubeconfig")
    if isinstance(kubeconfig, dict):
        source = "(mapping)"
    elif isinstance(kubeconfig, str) and kubeconfig.strip():
        source = os.path.expanduser(kubeconfig)
    elif params.get("host"):
        source = None
    else:
        default = os.path.expanduser((environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)[0])
        source = default if os.path.exists(default) else None
    context = params.get("context")
    return {"kubeconfig": source, "context": context if isinstance(context, str) and context.strip() else None}


def connection_used(params, environ=None):
    """connection_names with the context the client uses: the one asked for, else the kubeconfig's current one."""
    names = connection_names(params, environ)
    if not names["context"] and names["kubeconfig"]:
        kubeconfig = params.get("kubeconfig")
        names["context"] = current_context(kubeconfig if isinstance(kubeconfig, dict) else names["kubeconfig"])
    return names


def current_context(kubeconfig):
    """The current-context of a kubeconfig (a path or a mapping), or None when it cannot be read."""
    try:
        from kubernetes import config as k8s_config

        if isinstance(kubeconfig, dict):
            loader = k8s_config.kube_config.KubeConfigLoader(config_dict=kubeconfig)
            return loader.current_context.get("name") if loader.current_context else None
        _contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
        return (active or {}).get("name")
    except Exception:  # pylint: disable=broad-except  # naming the context is a courtesy: the client reports errors
        return None


def describe_connection(names, server=None, user=None):
    """``kubeconfig /home/me/.kube/config, context prod, API server 10.0.0.1:6443, user alice``: what was used."""
    parts = []
    if names.get("kubeconfig"):
        parts.append("kubeconfig %s" % names["kubeconfig"])
    if names.get("context"):
        parts.append("context %s" % names["context"])
    if server:
        parts.append("API server %s" % server)
    if user:
        parts.append("user %s" % user)
    return ", ".join(parts)


def summary(missing_executables, missing_packages, denied, directory_problems=()):
    """The problems on one line, or "" when there are none."""
    problems = list(directory_problems)
    if missing_executables:
        problems.append("executables not found on PATH: %s" % ", ".join(missing_executables))
    if missing_packages:
        problems.append("Python packages missing: %s" % ", ".join(missing_packages))
    if denied:
        problems.append("not allowed: %s" % "; ".join(denied))
    return "; ".join(problems)


# -- the controller --------------------------------------------------------------------------------------------

def missing_executables(names, which=shutil.which):
    """The names of ``names`` that are not on PATH."""
    return [name for name in names or [] if not which(name)]


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def package_problem(requirement, version_of=None):
    """None, or why ``requirement`` (``kubernetes`` or ``kubernetes>=30.0.0``, PEP 508) is not met by the installed
    distributions: ``kubernetes (not installed)``, ``kubernetes>=30.0.0 (29.0.0 installed)``."""
    if version_of is None:
        version_of = installed_version
    spec = None
    name = requirement
    if Requirement is not None:
        try:
            parsed = Requirement(requirement)
            name, spec = parsed.name, parsed.specifier
        except InvalidRequirement:
            return "%s (not a package requirement)" % requirement
    else:  # pragma: no cover - packaging comes with ansible-core
        match = _NAME.match(requirement)
        name = match.group(1) if match else requirement
    version = version_of(name)
    if version is None:
        return "%s (not installed)" % requirement
    if spec is not None and spec and not spec.contains(version, prereleases=True):
        return "%s (%s installed)" % (requirement, version)
    return None


def installed_version(name):
    """The installed version of distribution ``name`` in the running Python, or None."""
    if importlib_metadata is None:  # pragma: no cover
        return None
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def missing_packages(requirements, version_of=None):
    return [problem for problem in (package_problem(r, version_of) for r in requirements or []) if problem]


def _user():
    try:
        import pwd

        return "user %s" % pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # pragma: no cover - a uid without a name, or no pwd
        return "this user"


def _writable(path, access=os.access):
    return access(path, os.W_OK | os.X_OK)


def directory_state(path, access=os.access):
    """(exists, problem) of a directory the playbook will write: ``problem`` is None, or why it cannot be written -
    ``is a file``, ``is a directory user alice cannot write``, ``cannot be created: /srv is a file``. A missing
    directory is fine when its nearest existing parent is a directory this user can write (it is created with the
    missing parents). ``access``: os.access, replaceable in tests."""
    if not path or not str(path).strip():
        return False, "is empty"
    path = os.path.abspath(os.path.expanduser(str(path)))
    if os.path.lexists(path) and not os.path.exists(path):
        return False, "is a broken symbolic link (to %s)" % os.readlink(path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            return True, "is a file, not a directory" if os.path.isfile(path) else "is not a directory"
        if not _writable(path, access):
            return True, "is a directory %s cannot write" % _user()
        return True, None
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        if os.path.lexists(parent):
            return False, "cannot be created: %s is a broken symbolic link" % parent
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return False, "cannot be created: %s is %s" % (parent, "a file" if os.path.isfile(parent) else "not a directory")
    if not _writable(parent, access):
        return False, "cannot be created: %s is a directory %s cannot write" % (parent, _user())
    return False, None


def check_directories(directories, access=os.access):
    """[{name, path, exists, problem}] of ``directories`` ([{path, name}]): each problem as a line naming the option
    or variable (``name``, else "directory") and the path."""
    checked = []
    for entry in directories or []:
        path, name = entry.get("path") or "", entry.get("name") or "directory"
        exists, problem = directory_state(path, access)
        line = None
        if problem:
            line = "%s %s%s" % (name, "%s " % path if path else "", problem)
        checked.append({"name": name, "path": path, "exists": exists, "problem": line})
    return checked


# -- the API server --------------------------------------------------------------------------------------------

def server_version(ops):
    """GET /version: the server's ``gitVersion`` (v1.31.2)."""
    ops.counter.add("get")
    resp = ops.request("GET", VERSION_PATH)
    return (_decode(resp) or {}).get("gitVersion")


def whoami(ops):
    """The user the credentials authenticate as (SelfSubjectReview, authentication.k8s.io/v1, Kubernetes >= 1.28),
    or None where the server has no such API."""
    ops.counter.add("create")
    try:
        answer = _decode(ops.request("POST", SSR_PATH, body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, content_type="application/json"))
    except ApiException as exc:
        if exc.status in (403, 404, 405):
            return None
        raise
    return (((answer.get("status") or {}).get("userInfo")) or {}).get("username")


def review(ops, rule):
    """Whether the server allows ``rule`` to the requester: (allowed, reason)."""
    ops.counter.add("create")
    answer = _decode(ops.request("POST", SSAR_PATH, body=review_body(rule), content_type="application/json"))
    status = answer.get("status") or {}
    return bool(status.get("allowed")), status.get("reason") or status.get("evaluationError") or ""


def denied_rules(ops, rules):
    """The names (rule_name) of the rules of ``rules`` the server does not allow, in order."""
    return [rule_name(rule) for rule in rules if not review(ops, rule)[0]]
