# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Modules that query Prometheus: plugins/module_utils/report/metrics.py PROMETHEUS_AUTH_SPEC.
    DOCUMENTATION = r"""
options:
  prometheus_validate_certs:
    description: Verify the TLS certificate of O(prometheus_url).
    type: bool
    default: true
  prometheus_ca_path:
    description:
      - PEM file of the CA that signed the Prometheus server's certificate (a private CA), used instead of the
        system's trust store.
    type: path
  prometheus_token:
    description:
      - Bearer token sent as C(Authorization) to O(prometheus_url) - a Prometheus behind kube-rbac-proxy or an
        OAuth proxy, such as OpenShift's monitoring stack, which accepts a ServiceAccount token.
      - Mutually exclusive with O(prometheus_username).
    type: str
  prometheus_username:
    description:
      - User for HTTP basic authentication (Prometheus' own C(basic_auth_users) web config, or a proxy's).
      - Requires O(prometheus_password).
    type: str
  prometheus_password:
    description: Password for O(prometheus_username).
    type: str
"""
