# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The base of every module that talks to the Kubernetes API.

``KubeModule`` wraps ``AnsibleModule`` the way kubernetes.core's ``AnsibleK8SModule`` does (proxying
``params``, ``check_mode``, ``warn``, ``exit_json``, ``fail_json`` ...) and adds what every one of our
modules needs:

- the kube_auth options (``k8s.client.AUTH_ARG_SPEC`` and ``REQUEST_ARG_SPEC``: request_timeout,
  api_retry_seconds; documented by the ``kube_auth`` doc fragment) are merged into the module's own argument
  spec; a kubeconfig given as a mapping has its credentials kept out of output and logs (``secret_values``);
- the retries of transient errors are listed as warnings (``RETRIES``), one line per call and reason;
- the API client is built on first use from those options (one per caller for threaded work);
- ``run(handler)`` calls the module's work and turns every error of the API or of this collection into one
  ``fail_json`` line: the API server (host:port), the call that failed (``GET /api/v1/nodes``) and the node
  when one is involved - never a traceback.

Errors handled (``describe_error`` writes the line, the inventory plugin uses it too):

- ``KubeAuthError``: the connection settings cannot produce a client;
- ``ApiException``: the server answered with an error status (status 0: TLS or request preparation);
- connection errors: urllib3's ``MaxRetryError`` (connection refused, name not resolved, connect timeout),
  ``ProtocolError`` (connection reset or broken mid-response, e.g. a dropped watch), read timeouts, and
  ``OSError`` (sockets);
- the collection's own errors (``PlanningError``, ``DrainError``, ``MigStepError``, ``LockHeld``,
  ``DeadlineExceeded``, ``MetricsError`` ...): any exception class defined under ``plugins/module_utils``.
  A ``result`` dict on the error (``DrainError``, ``MigStepError``) is returned with the failure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.module_utils.six.moves.urllib.parse import urlsplit

# AnsibleModule that names the option when a value cannot fill its suboptions (checks.CheckedModule).
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.checks import CheckedModule as AnsibleModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.checks import input_problems, refuse

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    CONNECTION_ERRORS,
    REQUEST_ARG_SPEC,
    REQUEST_LIMITS,
    RETRIES,
    ApiException,
    KubeAuthError,
    MaxRetryError,
    ProtocolError,
    api_reason,
    get_api_client,
    last_call,
    one_line,
    require_kubernetes,
    secret_values,
)

# Exceptions of this collection are recognised by the package that defines them.
PACKAGE_PREFIX = "ansible_collections.gpufleet.gpu_operator.plugins.module_utils."


def is_package_error(exc):
    return type(exc).__module__.startswith(PACKAGE_PREFIX)


def is_kube_error(exc):
    """Whether ``describe_error`` knows ``exc`` (the errors ``KubeModule.run`` turns into a failure)."""
    return isinstance(exc, (KubeAuthError, ApiException) + CONNECTION_ERRORS) or is_package_error(exc)


def server_of(host_url):
    """``host:port`` of an API server URL (``https://10.0.0.1`` -> ``10.0.0.1:443``); None when unknown."""
    if not host_url:
        return None
    parts = urlsplit(host_url if "://" in host_url else "https://" + host_url)
    host = parts.hostname or ""
    if not host:
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 80 if parts.scheme == "http" else 443
    if ":" in host:
        host = "[%s]" % host
    return "%s:%s" % (host, port)


def _strip_noise(text):
    """urllib3's messages start with the pool or connection object; the server is named elsewhere."""
    text = re.sub(r"<[\w.]+ object at 0x[0-9a-fA-F]+>:\s*", "", text)
    text = re.sub(r"\w*(ConnectionPool|Connection)\(host='[^']*', port=\d+\):\s*", "", text)
    return text.replace("Failed to establish a new connection: ", "").strip()


def connection_reason(exc):
    """A short reason for a connection error: ``[Errno 111] Connection refused``, ``read timed out``..."""
    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        return connection_reason(exc.reason)
    if isinstance(exc, ProtocolError):
        causes = [arg for arg in exc.args if isinstance(arg, BaseException)]
        if causes:
            return "connection broken: %s" % connection_reason(causes[0])
        return "connection broken: %s" % one_line(_strip_noise(" ".join(str(a) for a in exc.args)))
    if isinstance(exc, OSError) and exc.strerror:
        return one_line("[Errno %s] %s" % (exc.errno, exc.strerror) if exc.errno else exc.strerror)
    text = one_line(_strip_noise(str(exc)))
    return text or type(exc).__name__


def _subject(node):
    if not node:
        return ""
    if isinstance(node, (list, tuple)):
        return "%s %s" % ("node" if len(node) == 1 else "nodes", ", ".join(node))
    return "node %s" % node


def describe_error(exc, server=None, call=None, node=None):
    """One line for a failure: what failed (node), where (API server host:port) and which call."""
    call = getattr(exc, "gpufleet_call", None) or call
    where = "the Kubernetes API server %s" % server if server else "the Kubernetes API server"
    at = " (%s)" % call if call else ""
    if isinstance(exc, KubeAuthError):
        line = "no usable Kubernetes connection%s: %s" % (" to %s" % server if server else "", one_line(exc))
    elif isinstance(exc, ApiException) and getattr(exc, "status", None):
        line = "%s failed on %s: %s" % (call or "API call", where, api_reason(exc))
    elif isinstance(exc, ApiException):
        line = "cannot reach %s%s: %s" % (where, at, api_reason(exc))
    elif isinstance(exc, CONNECTION_ERRORS):
        line = "cannot reach %s%s: %s" % (where, at, connection_reason(exc))
    else:
        line = one_line(exc) or type(exc).__name__
    subject = _subject(node)
    names = node if isinstance(node, (list, tuple)) else [node] if node else []
    if subject and subject not in line and not all("node %s" % name in line for name in names):
        line = "%s: %s" % (subject, line)
    return line


class KubeAnsibleModule(AnsibleModule):
    """The AnsibleModule of KubeModule: the credentials in a kubeconfig given as a mapping are no_log values
    from the start (before the invocation is logged), while a kubeconfig path stays readable in messages."""

    def _load_params(self):
        super(KubeAnsibleModule, self)._load_params()
        self.no_log_values.update(secret_values(self.params.get("kubeconfig")))


class KubeModule(object):
    """An AnsibleModule with the kube_auth options, a lazily built API client and one-line failures.

    ``argument_spec`` is the module's own options; the kube_auth options are added (a module may not
    redefine them). ``names`` ({option path: "name"|"namespace"}) and ``numbers`` ({option path: bounds}) are
    checked right after the argument spec (``checks.input_problems``), before any API call; a bad value fails
    the module naming the option, changed=false. Every other keyword goes to ``AnsibleModule``.
    """

    def __init__(self, argument_spec, names=None, numbers=None, **kwargs):
        overlap = sorted(set(argument_spec) & (set(AUTH_ARG_SPEC) | set(REQUEST_ARG_SPEC)))
        if overlap:
            raise ValueError("options %s are kube_auth options, defined once in k8s.client" % ", ".join(overlap))
        spec = dict(argument_spec)
        spec.update(AUTH_ARG_SPEC)
        spec.update(REQUEST_ARG_SPEC)
        self.module = KubeAnsibleModule(argument_spec=spec, **kwargs)
        self._api_client = None
        self.server = server_of(self.params.get("host"))
        refuse(self.module, input_problems(self.params, names, dict(numbers or {}, **REQUEST_LIMITS)))

    def __getattr__(self, name):
        # params, check_mode, warn, exit_json, fail_json, _diff ...: as the wrapped AnsibleModule has them.
        if name == "module":
            raise AttributeError(name)
        return getattr(self.module, name)

    # -- the client ---------------------------------------------------------------------------------------
    def new_api_client(self):
        """A fresh ApiClient from the auth options (one per worker thread: each has its connection pool).
        Raises KubeAuthError; ``run`` reports it."""
        require_kubernetes(self.module)
        api_client = get_api_client(self.params)
        self.server = server_of(api_client.configuration.host) or self.server
        return api_client

    @property
    def api_client(self):
        if self._api_client is None:
            self._api_client = self.new_api_client()
        return self._api_client

    def ops(self, counter=None):
        """``k8s.api.KubeOps`` on this module's client (``counter``: a shared RequestCounter)."""
        from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps

        return KubeOps(self.api_client, counter)

    # -- running and failing ------------------------------------------------------------------------------
    def fail_on(self, exc, node=None, result=None):
        """fail_json for ``exc`` (one line: server, call, node), with ``result`` updated by ``exc.result``;
        ``changed`` is false unless one of them says otherwise."""
        fields = dict(result or {})
        fields.update(getattr(exc, "result", None) or {})
        fields.setdefault("changed", False)
        self.fail_json(msg=describe_error(exc, self.server, last_call(), node), **fields)

    def warn_retries(self):
        """One warning per call the client tried again (transient errors), naming the API server; each is
        given once."""
        for line in RETRIES.lines(self.params.get("api_retry_seconds")):
            self.module.warn("the Kubernetes API server%s did not answer at once: %s"
                             % (" %s" % self.server if self.server else "", line))
        RETRIES.clear()

    def exit_json(self, **kwargs):
        self.warn_retries()
        self.module.exit_json(**kwargs)

    def fail_json(self, msg, **kwargs):
        self.warn_retries()
        self.module.fail_json(msg=msg, **kwargs)

    def run(self, handler, node=None, result=None):
        """``handler(self)`` returns the result dict to exit with (or calls exit_json/fail_json itself).
        An API, connection or collection error ends in ``fail_on``; ``node`` (a name or a list) is named
        in its message, ``result`` (a dict) is returned with it."""
        try:
            outcome = handler(self)
        except Exception as exc:  # pylint: disable=broad-except
            if not is_kube_error(exc):
                raise  # a defect: Ansible shows its traceback
            self.fail_on(exc, node=node, result=result)
        self.exit_json(**(outcome or {}))
