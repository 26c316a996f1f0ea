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
import re
import threading
import time
import traceback

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised only where the library is missing
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # type: ignore[no-redef]
        """Placeholder so callers can name the exception without the library."""

        status = None

try:
    from urllib3.exceptions import HTTPError as Urllib3HTTPError
    from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError, ResponseError
    from urllib3.util.retry import Retry
except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes client
    Retry = None

    class Urllib3HTTPError(Exception):  # type: ignore[no-redef]
        pass

    MaxRetryError = ProtocolError = ReadTimeoutError = ResponseError = Urllib3HTTPError

# Broken, refused, reset or timed-out connections (urllib3's ProtocolError, MaxRetryError, ReadTimeoutError
# and socket errors): what a caller retries, re-lists after, or reports as the API server being unreachable.
CONNECTION_ERRORS = (Urllib3HTTPError, OSError)

try:
    from ansible.module_utils.basic import missing_required_lib
    from ansible.module_utils.errors import AnsibleFallbackNotFound
except ImportError:  # k8s/api.py imports this module where only the kubernetes client is installed (client-version tests)
    missing_required_lib = None

    class AnsibleFallbackNotFound(Exception):  # type: ignore[no-redef]  # pylint: disable=function-redefined
        pass


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
    # A path is named in errors, so the option is not no_log; a kubeconfig given as a mapping has its credentials
    # (every string under users[].user) kept out of output and logs by KubeModule (secret_values).
    kubeconfig=dict(type="raw", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"]), no_log=False),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
    client_cert=dict(type="path", aliases=["cert_file"], fallback=(env_fallback, ["K8S_AUTH_CERT_FILE"])),
    client_key=dict(type="path", aliases=["key_file"], no_log=False, fallback=(env_fallback, ["K8S_AUTH_KEY_FILE"])),
    proxy=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_PROXY"])),  # may hold user:password@
    impersonate_user=dict(type="str"),
)

AUTH_PARAM_NAMES = tuple(AUTH_ARG_SPEC)

# -- time limits -------------------------------------------------------------------------------------------
# Every request that is not a watch waits at most CONNECT_TIMEOUT seconds for the connection (TLS handshake
# included) and REQUEST_TIMEOUT seconds for each read of the answer (option request_timeout, or
# GPUFLEET_API_REQUEST_TIMEOUT in the controller's environment); a read that timed out is not sent again.
# Transient errors are retried for up to RETRY_SECONDS (option api_retry_seconds, or GPUFLEET_API_RETRY_SECONDS
# in the controller's environment): long enough to ride out an API server restart.
CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 60.0
RETRY_SECONDS = 40.0
RETRY_SECONDS_ENV = "GPUFLEET_API_RETRY_SECONDS"
REQUEST_TIMEOUT_ENV = "GPUFLEET_API_REQUEST_TIMEOUT"
LIMIT_MAX = 3600.0

# Options of every module that talks to the API, beside the connection (documented by the kube_auth fragment).
REQUEST_ARG_SPEC = dict(
    request_timeout=dict(type="float", default=REQUEST_TIMEOUT, fallback=(env_fallback, [REQUEST_TIMEOUT_ENV])),
    api_retry_seconds=dict(type="float", default=RETRY_SECONDS, fallback=(env_fallback, [RETRY_SECONDS_ENV])),
)
REQUEST_LIMITS = dict(
    request_timeout=dict(above=0, maximum=LIMIT_MAX),
    api_retry_seconds=dict(minimum=0, maximum=LIMIT_MAX),
)


def secret_values(kubeconfig):
    """The credentials of a kubeconfig given as a mapping: every string under ``users[].user`` (tokens,
    passwords, client keys, auth-provider and exec settings). A path has none: it is named in errors."""
    found = set()
    if not isinstance(kubeconfig, dict):
        return found

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, str) and value.strip():
            found.add(value)

    users = kubeconfig.get("users")
    for entry in users if isinstance(users, (list, tuple)) else []:
        if isinstance(entry, dict):
            walk(entry.get("user"))
    return found


def request_timeouts(read_timeout=None):
    """(connect, read) seconds for a request that is not a watch: the connection is given at most
    CONNECT_TIMEOUT and never more than the read timeout."""
    read = REQUEST_TIMEOUT if read_timeout is None else float(read_timeout)
    return (min(CONNECT_TIMEOUT, read), read)


class KubeAuthError(Exception):
    """The connection settings cannot produce a client (no kubeconfig, bad context...)."""


def require_kubernetes(module):
    """Fail the module with Ansible's standard message when the client library is absent."""
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)


def _context_note(context):
    return " (context %s)" % context if context else ""


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
            raise KubeAuthError("cannot load kubeconfig (the mapping given)%s: %s"
                                % (_context_note(context), exc or type(exc).__name__))
    elif kubeconfig or not host:
        path = os.path.expanduser(kubeconfig) if kubeconfig else None
        default_path = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])
        if path and not os.path.isfile(path):
            raise KubeAuthError("kubeconfig %s %s" % (path, "is not a file" if os.path.exists(path) else "does not exist"))
        if path or os.path.exists(default_path):
            try:
                k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
            except (k8s_config.ConfigException, OSError) as exc:
                raise KubeAuthError("cannot load kubeconfig %s%s: %s" % (path or default_path, _context_note(context), exc))
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


def trace_calls(api_client, window=None, timeout=None):
    """Record every request of ``api_client`` as the current thread's last call, and name it on the
    exception a failed request raises (attribute ``gpufleet_call``). A request sent without a timeout of its
    own (every one but a watch) gets ``timeout`` ((connect, read) seconds; request_timeouts() when None);
    transient errors are retried for ``window`` seconds (retry_seconds() when None)."""
    rest = api_client.rest_client
    send = rest.request
    timeout = timeout or request_timeouts()

    def request(method, url, *args, **kwargs):
        call = _call_name(method, url)
        _CALLS.call = _LAST_CALL["call"] = call
        headers = kwargs.get("headers") or next((a for a in args if isinstance(a, dict)), None)
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = timeout
        try:
            return retry_while_not_ready(send, lambda: server_not_ready(rest.pool_manager, url, headers),
                                         method, url, *args, window=window, **kwargs)
        except Exception as exc:
            if getattr(exc, "gpufleet_call", None) is None:
                try:
                    exc.gpufleet_call = call
                except AttributeError:  # pragma: no cover - exceptions with __slots__
                    pass
            raise

    rest.request = request
    return api_client


# -- transient errors ------------------------------------------------------------------------------------
# Answers that say "try again": throttled (429) or the API server / its etcd briefly unavailable (5xx).
RETRY_STATUSES = (429, 500, 502, 503, 504)
# Reads are retried by urllib3 itself (the pool's Retry); writes by retry_write below.
IDEMPOTENT_METHODS = frozenset(["GET", "HEAD", "OPTIONS"])
WRITE_METHODS = frozenset(["POST", "PUT", "PATCH", "DELETE"])
BACKOFF_FACTOR = 0.5
BACKOFF_MAX = 8.0
# A server's Retry-After is honoured up to this many seconds per wait.
RETRY_AFTER_MAX = 30


def retry_seconds():
    """The retry window where no api_retry_seconds is given (the inventory plugin, tests of the pure parts):
    RETRY_SECONDS unless GPUFLEET_API_RETRY_SECONDS says otherwise."""
    try:
        value = float(os.environ.get(RETRY_SECONDS_ENV, RETRY_SECONDS))
    except ValueError:
        value = RETRY_SECONDS
    return max(0.0, value)


def backoff(attempt):
    """Seconds to wait before retry number ``attempt`` (1, 2, ...): urllib3's exponential backoff, capped."""
    return min(BACKOFF_MAX, BACKOFF_FACTOR * (2 ** (attempt - 1)))


def retry_attempts(window=None):
    """How many retries fit in ``window`` seconds of backoff (at least one when the window is not 0)."""
    window = retry_seconds() if window is None else window
    attempts, waited = 0, 0.0
    while window > 0 and (attempts == 0 or waited + backoff(attempts + 1) <= window):
        attempts += 1
        waited += backoff(attempts)
    return attempts


class RetryLog(object):
    """The retries of this process, for the module's warning: {(call, reason): [count, first, last]} with
    monotonic times. Shared by every thread and client of a module run."""

    def __init__(self):
        self._lock = threading.Lock()
        self.entries = {}

    def add(self, call, reason):
        now = time.monotonic()
        with self._lock:
            entry = self.entries.setdefault((call, reason), [0, now, now])
            entry[0] += 1
            entry[2] = now

    def lines(self, window=None):
        """One line per call and reason, oldest first: ``GET /api/v1/nodes (HTTP 503): retried 4 times over 7 s``."""
        with self._lock:
            items = sorted(self.entries.items(), key=lambda item: item[1][1])
        limit = "" if window is None else " (api_retry_seconds=%g)" % window
        return ["%s (%s): retried %d time%s over %.0f s%s" % (call, reason, count, "" if count == 1 else "s",
                                                              last - first, limit)
                for (call, reason), (count, first, last) in items]

    def clear(self):
        with self._lock:
            self.entries = {}


RETRIES = RetryLog()


def _error_reason(error):
    """A short name for a transient error (the module names the last one in full when it gives up)."""
    reason = getattr(error, "reason", None) or error
    errno = getattr(reason, "errno", None)
    text = str(reason).rsplit(": ", 1)[-1] if reason is not None else ""
    return ("%s [Errno %s]" % (type(reason).__name__, errno)) if errno else (text.strip() or type(reason).__name__)


if Retry is not None:
    class WindowRetry(Retry):
        """urllib3's Retry that gives up once ``window`` seconds have passed since the request's first failure
        (whatever the attempts left), never sends a request again after a read timed out (the server took the
        request and did not answer within request_timeout: another wait would double it), and logs each retry
        in RETRIES."""

        def __init__(self, *args, **kwargs):
            self.window = kwargs.pop("window", None)
            self.started = kwargs.pop("started", None)
            super(WindowRetry, self).__init__(*args, **kwargs)

        def new(self, **kwargs):
            kwargs.setdefault("window", self.window)
            kwargs.setdefault("started", self.started)
            return super(WindowRetry, self).new(**kwargs)

        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
            if isinstance(error, ReadTimeoutError):
                raise MaxRetryError(_pool, url, error)
            now = time.monotonic()
            started = now if self.started is None else self.started
            if self.window is not None and now - started >= self.window:
                raise MaxRetryError(_pool, url, error or ResponseError("too many error responses"))
            retry = super(WindowRetry, self).increment(method, url, response, error, _pool, _stacktrace)
            retry.started = started
            status = getattr(response, "status", None)
            RETRIES.add(_call_name(method, url), "HTTP %s" % status if status else _error_reason(error))
            return retry


def retry_policy(window=None):
    """urllib3 ``Retry`` (WindowRetry) for the client's connection pool (``Configuration.retries``).

    Connection errors before a request is sent (refused, reset while connecting) are retried for every method,
    which is safe: nothing reached the server. Read errors (but a read timeout) and the statuses of
    RETRY_STATUSES (Retry-After respected) only for IDEMPOTENT_METHODS; writes go through ``retry_write``. After
    the last retry, or ``window`` seconds after the first failure, the last answer is returned
    (raise_on_status=False), so the caller sees the server's own error status."""
    window = retry_seconds() if window is None else window
    attempts = retry_attempts(window)
    return WindowRetry(total=attempts, connect=attempts, read=attempts, status=attempts, other=0, redirect=0,
                       backoff_factor=BACKOFF_FACTOR, backoff_max=BACKOFF_MAX, status_forcelist=RETRY_STATUSES,
                       allowed_methods=IDEMPOTENT_METHODS, respect_retry_after_header=True,
                       retry_after_max=RETRY_AFTER_MAX, raise_on_status=False, raise_on_redirect=False,
                       window=window)


def _retry_after(response):
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
        return min(float(RETRY_AFTER_MAX), max(0.0, float(value))) if value is not None else None
    except (TypeError, ValueError):
        return None


def write_retryable(method, url, status):
    """Whether a write answered with ``status`` is tried again. An eviction's 429 is not: it is the
    PodDisruptionBudget's refusal, which the drain waits out itself."""
    if status not in RETRY_STATUSES:
        return False
    return not (status == 429 and str(method).upper() == "POST" and str(url).partition("?")[0].endswith("/eviction"))


def retry_write(send, method, url, *args, window=None, **kwargs):
    """Send a write, retrying transient failures within the retry window.

    Hand-written because urllib3 retries only idempotent methods after the request was sent; every write this
    collection makes is safe to repeat: merge patches and deletes give the same result twice, evictions and
    creates of a pod or Lease answer 404/409 on a repeat, which their callers resolve by reading the object
    (a Lease replace carries its resourceVersion, so a repeat cannot overwrite another holder).
    ``window``: seconds (retry_seconds() when None)."""
    window = retry_seconds() if window is None else window
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            response = send(method, url, *args, **kwargs)
        except ProtocolError as exc:  # connection broken after the request was sent: the outcome is unknown
            delay = backoff(attempt)
            if time.monotonic() - started + delay > window:
                raise
            RETRIES.add(_call_name(method, url), _error_reason(exc))
        else:
            status = getattr(response, "status", None)
            if not write_retryable(method, url, status):
                return response
            delay = _retry_after(response)
            delay = backoff(attempt) if delay is None else delay
            if time.monotonic() - started + delay > window:
                return response
            RETRIES.add(_call_name(method, url), "HTTP %s" % status)
            try:
                response.read()  # free the connection for the next attempt
            except Exception:  # pylint: disable=broad-except
                pass
        time.sleep(delay)


# A kube-apiserver serves requests before it is ready: just after a (re)start, until its RBAC informers have synced
# (readiness check poststarthook/rbac/bootstrap-roles), it answers 403 "cannot list resource ..." to a
# ServiceAccount that may; system:masters is not subject to RBAC. Measured in the testbed (docs/reliability.md):
# 403s from the first answer until 14 s (idle machine) or 38 s (load 40) later, all while /readyz answered 500,
# ending before /readyz answered ok. So a 401/403 is retried (backoff) only while the server itself says it is not
# ready: /readyz answers a 5xx; for up to the retry window, or STARTING_SECONDS when that is longer (a server's
# start-up is an outage in progress). On a ready server, or when /readyz cannot tell (404, 401/403 where an
# administrator restricted it, no answer), the 401/403 is the answer at once: a missing permission fails fast.
# /readyz is readable by anyone by default (kube-apiserver's --authorization-always-allow-paths).
AUTH_STATUSES = (401, 403)
READYZ_TIMEOUT = 5.0
STARTING_SECONDS = 120.0


def readyz_url(url):
    """``https://host:port/readyz`` of the server that ``url`` (a request's full URL) goes to."""
    scheme, _sep, rest = str(url).partition("://")
    return "%s://%s/readyz" % (scheme, rest.partition("/")[0])


def server_not_ready(pool_manager, url, headers=None):
    """Whether the API server of ``url`` says it is not ready: GET /readyz (once, no retries, same credentials)
    answered a 5xx. False when it answered ok or anything else, or did not answer: no evidence."""
    auth = dict((k, v) for k, v in (headers or {}).items() if str(k).lower() == "authorization")
    try:
        resp = pool_manager.request("GET", readyz_url(url), headers=auth, retries=False, timeout=READYZ_TIMEOUT)
    except Exception:  # pylint: disable=broad-except  # any failure to ask is no evidence
        return False
    return 500 <= (getattr(resp, "status", None) or 0) <= 599


def _auth_status(response_or_exc):
    status = getattr(response_or_exc, "status", None)
    return status if status in AUTH_STATUSES else None


def retry_while_not_ready(send, not_ready, method, url, *args, window=None, **kwargs):
    """One request (writes through retry_write). A 401/403 answer, returned (kubernetes >= 37) or raised as
    ApiException (older clients), is tried again while ``not_ready()`` (server_not_ready for this request's
    server) says the server is still starting, for up to max(retry window, STARTING_SECONDS); otherwise it is
    the answer at once. ``window``: the retry window (retry_seconds() when None)."""
    write_window = retry_seconds() if window is None else window
    window = max(write_window, STARTING_SECONDS)
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            if str(method).upper() in WRITE_METHODS:
                response = retry_write(send, method, url, *args, window=write_window, **kwargs)
            else:
                response = send(method, url, *args, **kwargs)
        except ApiException as exc:
            if _auth_status(exc) is None:
                raise
            attempt += 1
            delay = backoff(attempt)
            if time.monotonic() - started + delay > window or not not_ready():
                raise
        else:
            if _auth_status(response) is None:
                return response
            attempt += 1
            delay = backoff(attempt)
            if time.monotonic() - started + delay > window or not not_ready():
                return response
            try:
                response.read()
            except Exception:  # pylint: disable=broad-except
                pass
        time.sleep(delay)


def last_call():
    """The last API call this thread made (or, when it made none, any thread); None before any call."""
    return getattr(_CALLS, "call", None) or _LAST_CALL["call"]


def get_api_client(params):
    """Return a ``kubernetes.client.ApiClient`` for the module's auth params (a dict), with the time limits of
    ``request_timeout`` and ``api_retry_seconds`` when the params hold them (else the defaults)."""
    params = unset_empty(params)
    configuration = _load_configuration(params)
    window = params.get("api_retry_seconds")
    window = retry_seconds() if window is None else max(0.0, float(window))
    if Retry is not None:
        configuration.retries = retry_policy(window)
    api_client = k8s_client.ApiClient(configuration)
    if params.get("impersonate_user"):
        api_client.set_default_header("Impersonate-User", params["impersonate_user"])
    return trace_calls(api_client, window=window, timeout=request_timeouts(params.get("request_timeout")))


def server_message(exc):
    """The API server's own message in an ApiException's body (a Status object), else the body as it is."""
    body = getattr(exc, "body", None) or ""
    try:
        import json

        return json.loads(body).get("message", body)
    except (ValueError, TypeError, AttributeError):
        return body


def one_line(text):
    return re.sub(r"\s+", " ", str(text or "")).strip()


def api_reason(exc, with_call=False):
    """``HTTP 403 Forbidden: <the server's message>`` from an ApiException, on one line; ``with_call``: followed by
    the request that got it, `` (PATCH /api/v1/nodes/n)``, when the client recorded it."""
    message = server_message(exc)
    status = getattr(exc, "status", None)
    reason = one_line(getattr(exc, "reason", "") or "")
    if not status:  # status 0: the client could not send the request (TLS, bad arguments)
        return reason or one_line(str(exc))
    call = getattr(exc, "gpufleet_call", None) if with_call else None
    return one_line("HTTP %s %s%s%s" % (status, reason, (": %s" % message) if message else "",
                                        (" (%s)" % call) if call else ""))
