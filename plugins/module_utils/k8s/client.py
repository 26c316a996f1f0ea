# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes API adapter: one place that turns the collection's auth options into a client.

The option names and K8S_AUTH_* environment fallbacks are those of kubernetes.core, so
``module_defaults`` written for kubernetes.core carry over. We build on the official
``kubernetes`` client directly rather than importing kubernetes.core's private module_utils,
which are not a public API and would tie sanity/import tests to another collection's layout.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import threading
import traceback

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException  # noqa: F401  pylint: disable=unused-import

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised only where the library is missing
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # type: ignore[no-redef]
        """Placeholder so callers can name the exception without the library."""

        status = None

from ansible.module_utils.basic import missing_required_lib
from ansible.module_utils.errors import AnsibleFallbackNotFound


def env_fallback(*names):
    """Like Ansible's env_fallback, but an empty variable counts as unset.

    AWX renders every injector of a credential type, so a credential with an empty optional field still sets
    K8S_AUTH_CONTEXT="" (and kubernetes would then look for a context named "").
    """
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return value
    raise AnsibleFallbackNotFound


def unset_empty(params):
    """A copy of connection params where empty or blank strings are None (unset), as AWX leaves empty fields."""
    return dict((name, None if isinstance(value, str) and not value.strip() else value)
                for name, value in params.items())


AUTH_ARG_SPEC = dict(
    # no_log as kubernetes.core does: the value may be the kubeconfig itself, tokens and keys included.
    kubeconfig=dict(type="raw", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"]), no_log=True),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
    client_cert=dict(type="path", aliases=["cert_file"], fallback=(env_fallback, ["K8S_AUTH_CERT_FILE"])),
    client_key=dict(type="path", aliases=["key_file"], no_log=False, fallback=(env_fallback, ["K8S_AUTH_KEY_FILE"])),
    proxy=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_PROXY"])),
    impersonate_user=dict(type="str"),
)

AUTH_PARAM_NAMES = tuple(AUTH_ARG_SPEC)


class KubeAuthError(Exception):
    """The connection settings cannot produce a client (no kubeconfig, bad context...)."""


def require_kubernetes(module):
    """Fail the module with Ansible's standard message when the client library is absent."""
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)


def _load_configuration(params):
    params = unset_empty(params)
    configuration = k8s_client.Configuration()
    kubeconfig = params.get("kubeconfig")
    context = params.get("context")
    host = params.get("host")
    if kubeconfig is not None and not isinstance(kubeconfig, (dict, str)):
        raise KubeAuthError("kubeconfig must be a path or a mapping (a kubeconfig's content), got %s"
                            % type(kubeconfig).__name__)
    if isinstance(kubeconfig, dict):
        try:
            k8s_config.load_kube_config_from_dict(kubeconfig, context=context, client_configuration=configuration)
        except (k8s_config.ConfigException, TypeError, ValueError, KeyError, AttributeError) as exc:
            # The client's own check of the mapping (ConfigException) or its failure on a wrongly typed field.
            raise KubeAuthError("cannot load kubeconfig (the mapping given): %s" % (exc or type(exc).__name__))
    elif kubeconfig or not host:
        path = os.path.expanduser(kubeconfig) if kubeconfig else None
        default_path = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])
        if path or os.path.exists(default_path):
            try:
                k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
            except (k8s_config.ConfigException, OSError) as exc:
                raise KubeAuthError("cannot load kubeconfig %s: %s" % (path or default_path, exc))
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException:
                raise KubeAuthError(
                    "no Kubernetes connection: set kubeconfig (or K8S_AUTH_KUBECONFIG / KUBECONFIG), "
                    "or host and api_key, or run inside a cluster"
                )
    if host:
        configuration.host = host
    if params.get("api_key"):
        configuration.api_key = {"authorization": "Bearer %s" % params["api_key"]}
    if params.get("validate_certs") is not None:
        configuration.verify_ssl = params["validate_certs"]
    if params.get("ca_cert"):
        configuration.ssl_ca_cert = params["ca_cert"]
    if params.get("client_cert"):
        configuration.cert_file = params["client_cert"]
    if params.get("client_key"):
        configuration.key_file = params["client_key"]
    if params.get("proxy"):
        configuration.proxy = params["proxy"]
    return configuration


# The call each thread made last ("GET /api/v1/nodes"), and the last of any thread: an error is reported
# with the call it came from, also when it surfaces after the request returned (an error status, a
# watch stream broken while read).
_CALLS = threading.local()
_LAST_CALL = {"call": None}


def _call_name(method, url):
    path, _sep, query = str(url).partition("?")
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    watch = " (watch)" if "watch=true" in query else ""
    return "%s %s%s" % (str(method).upper(), path, watch)


def trace_calls(api_client):
    """Record every request of ``api_client`` as the current thread's last call, and name it on the
    exception a failed request raises (attribute ``gpufleet_call``)."""
    rest = api_client.rest_client
    send = rest.request

    def request(method, url, *args, **kwargs):
        call = _call_name(method, url)
        _CALLS.call = _LAST_CALL["call"] = call
        try:
            return send(method, url, *args, **kwargs)
        except Exception as exc:
            if getattr(exc, "gpufleet_call", None) is None:
                try:
                    exc.gpufleet_call = call
                except AttributeError:  # pragma: no cover - exceptions with __slots__
                    pass
            raise

    rest.request = request
    return api_client


def last_call():
    """The last API call this thread made (or, when it made none, any thread); None before any call."""
    return getattr(_CALLS, "call", None) or _LAST_CALL["call"]


def get_api_client(params):
    """Return a ``kubernetes.client.ApiClient`` for the module's auth params (a dict)."""
    params = unset_empty(params)
    configuration = _load_configuration(params)
    api_client = k8s_client.ApiClient(configuration)
    if params.get("impersonate_user"):
        api_client.set_default_header("Impersonate-User", params["impersonate_user"])
    return trace_calls(api_client)


def api_client_from_module(module):
    """Build a client for an AnsibleModule, failing it with a clear message on bad settings."""
    require_kubernetes(module)
    try:
        return get_api_client(module.params)
    except KubeAuthError as exc:
        module.fail_json(msg=str(exc))


def server_message(exc):
    """The API server's own message in an ApiException's body (a Status object), else the body as it is."""
    body = getattr(exc, "body", None) or ""
    try:
        import json

        return json.loads(body).get("message", body)
    except (ValueError, TypeError, AttributeError):
        return body


def api_error_message(exc):
    """A one-line reason from an ApiException (status, reason and the server's message)."""
    return "HTTP %s %s: %s" % (getattr(exc, "status", "?"), getattr(exc, "reason", ""), server_message(exc))
