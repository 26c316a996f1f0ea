# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Same option names and environment fallbacks as kubernetes.core's k8s_auth_options.
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig content as a dictionary.
      - Defaults to C(KUBECONFIG) or C(~/.kube/config); inside a pod the service account is used.
      - Can also be set with E(K8S_AUTH_KUBECONFIG).
      - A path is named in error messages. Given as a dictionary, the credentials in it (every value under
        C(users[].user)) are kept out of module output and logs.
    type: raw
  context:
    description:
      - The kubeconfig context to use. Can also be set with E(K8S_AUTH_CONTEXT).
      - Named in error messages with the kubeconfig path.
    type: str
  host:
    description:
      - URL of the Kubernetes API server. Can also be set with E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token for the API server. Can also be set with E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Can also be set with E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate for the API server. Can also be set with E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate. Can also be set with E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to a client key. Can also be set with E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description:
      - HTTP proxy URL for API calls. Can also be set with E(K8S_AUTH_PROXY).
      - Never logged or shown in results, since the URL may carry credentials (C(http://user:password@host:port)).
    type: str
  impersonate_user:
    description:
      - User name to impersonate for the API calls.
    type: str
  request_timeout:
    description:
      - Seconds to wait for the API server's answer to one request (every request but a watch). The connection
        itself, TLS handshake included, is given at most 10 seconds (never more than O(request_timeout)).
      - A request whose answer did not come in time is not sent again; the task fails naming the API server and
        the call.
      - Watches have their own limits, see the reliability documentation.
      - Can also be set with E(GPUFLEET_API_REQUEST_TIMEOUT) in the controller's environment.
    type: float
    default: 60
  api_retry_seconds:
    description:
      - Seconds during which transient API errors (connection refused or reset, HTTP 429, 500, 502, 503, 504)
        are retried with exponential backoff before the task fails. Covers an API server restart.
      - Each call that was retried is listed in a warning (the call, the error, how many times, for how long).
      - C(0) turns retries off. Can also be set with E(GPUFLEET_API_RETRY_SECONDS).
    type: float
    default: 40
requirements:
  - kubernetes >= 30.0.0 (Python client)
"""
