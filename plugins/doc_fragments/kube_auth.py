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
      - Its value (path or content) is kept out of module output and logs (C(no_log)), as in kubernetes.core.
    type: raw
  context:
    description:
      - The kubeconfig context to use. Can also be set with E(K8S_AUTH_CONTEXT).
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
requirements:
  - kubernetes >= 30.0.0 (Python client)
"""
