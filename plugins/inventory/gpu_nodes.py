# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gpu_nodes
short_description: Kubernetes GPU nodes as an inventory, grouped by GPU model and MIG state
version_added: 0.1.0
description:
  - Lists the nodes of a Kubernetes cluster and adds one host per GPU node (a node labelled
    C(nvidia.com/gpu.present=true) by the GPU Operator, labelled by GPU Feature Discovery, or advertising
    C(nvidia.com/gpu) / C(nvidia.com/mig-*) capacity).
  - Every host joins the group named by O(group) and the groups C(gpu_model_<product>),
    C(mig_strategy_<none|single|mixed>), C(mig_config_<config>) and C(mig_state_<state>) (C(unset) when the
    label is absent). Names are lower case with non-alphanumerics replaced by C(_).
  - Host variables (prefix C(gpu_)) come from the GFD labels and the node status, see the EXAMPLES.
  - The connection options have the names and environment variables of kubernetes.core.
  - The inventory source is a YAML file whose name ends in C(gpu_nodes.yml) or C(gpu_nodes.yaml).
extends_documentation_fragment:
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
options:
  plugin:
    description: Token that marks the file as a source for this plugin.
    required: true
    type: str
    choices: [gpufleet.gpu_operator.gpu_nodes]
  kubeconfig:
    description:
      - Path to a kubeconfig file, or its content as a dictionary. Defaults to C(KUBECONFIG) or C(~/.kube/config).
    type: raw
    env:
      - name: K8S_AUTH_KUBECONFIG
  context:
    description: The kubeconfig context to use.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
  host:
    description: URL of the Kubernetes API server.
    type: str
    env:
      - name: K8S_AUTH_HOST
  api_key:
    description: Bearer token for the API server.
    type: str
    env:
      - name: K8S_AUTH_API_KEY
  validate_certs:
    description: Whether to verify the API server's certificate.
    type: bool
    aliases: [verify_ssl]
    env:
      - name: K8S_AUTH_VERIFY_SSL
  ca_cert:
    description: Path to a CA certificate for the API server.
    type: path
    aliases: [ssl_ca_cert]
    env:
      - name: K8S_AUTH_SSL_CA_CERT
  client_cert:
    description: Path to a client certificate.
    type: path
    aliases: [cert_file]
    env:
      - name: K8S_AUTH_CERT_FILE
  client_key:
    description: Path to a client key.
    type: path
    aliases: [key_file]
    env:
      - name: K8S_AUTH_KEY_FILE
  proxy:
    description: HTTP proxy URL for API calls.
    type: str
    env:
      - name: K8S_AUTH_PROXY
  impersonate_user:
    description: User name to impersonate for the API calls.
    type: str
  impersonate_groups:
    description: Groups to impersonate for the API calls.
    type: list
    elements: str
  label_selector:
    description:
      - Kubernetes label selector the API applies when listing nodes, for example
        C(nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3) or C(pool=training,!excluded).
    type: str
  group:
    description: Group that holds every GPU node (the playbooks of this collection target C(gpu_nodes)).
    type: str
    default: gpu_nodes
  include_cpu_nodes:
    description:
      - Also add nodes without GPUs, in the group C(cpu_nodes) only.
    type: bool
    default: false
  host_labels:
    description:
      - Which C(nvidia.com/*) node labels the host variable C(gpu_labels) holds.
      - C(compact) leaves out what other host variables or the MIG profile already say - the per-profile geometry GFD
        writes (C(nvidia.com/mig-<profile>.memory), C(.multiprocessors), C(.slices.*), C(.engines.*), and the
        C(nvidia.com/gpu.*) forms of those under the single strategy) and C(nvidia.com/gpu.deploy.*) (in
        C(gpu_deploy_labels)). Counts, products, replicas, sharing strategies and versions stay. On a mixed-strategy
        node with three MIG profiles this is about half the labels, and half of C(ansible-inventory --list)'s time
        at 1000 nodes.
      - C(all) keeps every C(nvidia.com/*) label; C(none) leaves C(gpu_labels) out.
    type: str
    choices: [compact, all, none]
    default: compact
    version_added: 0.1.0
requirements:
  - kubernetes >= 30.0.0 (Python client)
"""

EXAMPLES = r"""
# inventories/prod/cluster.gpu_nodes.yml
plugin: gpufleet.gpu_operator.gpu_nodes
kubeconfig: ~/.kube/prod
label_selector: pool=training
# The nodes are reached through the API: tasks run on the controller.
compose:
  ansible_connection: "'local'"
keyed_groups:
  - key: gpu_labels['nvidia.com/gpu.family'] | default('unknown')
    prefix: family
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/gpufleet-inventory
cache_timeout: 300

# Host variables of each node:
#   gpu_node_name, gpu_model (GFD product without -MIG-*/-SHARED), gpu_product_label, gpu_count,
#   gpu_memory_mb, gpu_family, gpu_driver_version, gpu_mig_capable, gpu_mig_strategy, gpu_mig_config,
#   gpu_mig_config_state, gpu_mig_invalid, gpu_mig_devices ({profile: count}), gpu_replicas (time-slicing/MPS
#   shares per device, 1 = not shared), gpu_sharing_strategy, gpu_product_shared (-SHARED), gpu_deploy_labels,
#   gpu_deploy_paused (operands MIG Manager left paused), gpu_capacity, gpu_allocatable
#   ({nvidia.com/gpu|mig-*: n}), gpu_ready, gpu_unschedulable, gpu_labels (nvidia.com/* labels, see host_labels).
"""

import os
import re

from ansible import constants as C
from ansible.errors import AnsibleError, AnsibleParserError
from ansible.module_utils.parsing.convert_bool import BOOLEANS
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import (
    AUTH_PARAM_NAMES,
    HAS_KUBERNETES,
    KubeAuthError,
    get_api_client,
    last_call,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.access import (
    connection_used,
    describe_connection,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import is_gpu_node
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import (
    describe_error,
    is_kube_error,
    server_of,
)

HOSTVAR_PREFIX = "gpu_"
# Labels GFD derives from the MIG profile alone (the same on every node with that profile) or that gpu_deploy_labels
# holds: what host_labels=compact leaves out. GFD's MIG labels per strategy: NVIDIA/k8s-device-plugin
# docs/gpu-feature-discovery (mixed: mig-<profile>.<field>; single: gpu.<field>).
# gpu.memory stays: it is the GPU's (or the single strategy's MIG device's) memory, the raw form of gpu_memory_mb.
GEOMETRY_LABEL = re.compile(r"^nvidia\.com/(?:mig-[^/]+?\.(?:memory|multiprocessors|slices\.[a-z]+|engines\.[a-z]+)$"
                            r"|gpu\.(?:multiprocessors|slices\.[a-z]+|engines\.[a-z]+)$|gpu\.deploy\.)")


def host_labels(labels, mode):
    """The gpu_labels host variable for ``mode`` (the host_labels option); None leaves the variable out."""
    if mode == "none":
        return None
    if mode == "all":
        return labels
    return dict((k, v) for k, v in (labels or {}).items() if not GEOMETRY_LABEL.match(k))


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "gpufleet.gpu_operator.gpu_nodes"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(
            ("gpu_nodes.yml", "gpu_nodes.yaml")
        )

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._check_source(self._read_config_data(path), path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        nodes = None
        if use_cache:
            try:
                nodes = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if nodes is None:
            nodes = self._fetch_nodes(path)
        if update_cache:
            self._cache[cache_key] = nodes
        self._populate(nodes)

    def _check_source(self, config, path):
        """Refuse, naming the option, what Ansible's option handling lets through: unknown options (a typo is
        otherwise ignored), booleans that are not booleans (read as false), a negative cache_timeout, a main group
        name Ansible cannot target, keyed_groups entries that are not mappings."""
        definitions = C.config.get_configuration_definitions("inventory", self._load_name) or {}
        known = set(definitions)
        for definition in definitions.values():
            known.update(definition.get("aliases") or [])
        problems = []
        unknown = sorted(set(config) - known)
        if unknown:
            problems.append("unknown option(s) %s (this plugin's options: %s)"
                            % (", ".join(map(str, unknown)), ", ".join(sorted(definitions))))
        for name, definition in sorted(definitions.items()):
            if definition.get("type") not in ("bool", "boolean"):
                continue
            for key in [name] + list(definition.get("aliases") or []):
                value = config.get(key)
                if value is None or isinstance(value, bool):
                    continue
                if not isinstance(value, (str, int, float)) or (value.lower() if isinstance(value, str) else value) not in BOOLEANS:
                    problems.append("%s must be true or false, got %r" % (key, value))
        timeout = self.get_option("cache_timeout")
        if isinstance(timeout, int) and timeout < 0:
            problems.append("cache_timeout must be >= 0 seconds (0: never expires), got %s" % timeout)
        group = self.get_option("group")
        if not isinstance(group, str) or not group or C.INVALID_VARIABLE_NAMES.search(group):
            problems.append("group %r is not a valid Ansible group name (letters, digits and _, not starting with a digit)"
                            % (group,))
        for index, entry in enumerate(self.get_option("keyed_groups") or []):
            if not isinstance(entry, dict):
                problems.append("keyed_groups[%d] must be a mapping (key, prefix, separator...), got %r" % (index, entry))
        if problems:
            raise AnsibleParserError("inventory source %s: %s" % (path, "; ".join(problems)))

    def _auth_option(self, name):
        """An auth option, None when it comes from an empty environment variable (AWX injects K8S_AUTH_CONTEXT=""
        for an empty credential field; as a bool, an empty K8S_AUTH_VERIFY_SSL would otherwise turn TLS checks off)."""
        value, origin = self.get_option_and_origin(name)
        if isinstance(origin, str) and origin.startswith("env:"):
            variable = origin.split(":", 1)[1].strip()
            if not os.environ.get(variable, "").strip():
                return None
        return value

    def _fetch_nodes(self, path):
        """Node summaries from the API (what is cached: plain JSON-able dicts)."""
        if not HAS_KUBERNETES:
            raise AnsibleError("%s needs the kubernetes Python client (pip install kubernetes)" % self.NAME)
        params = dict((name, self._auth_option(name)) for name in AUTH_PARAM_NAMES)
        selector = self.get_option("label_selector")
        server = server_of(params.get("host"))
        try:
            api_client = get_api_client(params)
            server = server_of(api_client.configuration.host) or server
            listing = KubeOps(api_client).list_nodes(label_selector=selector or None, managed_fields=False)
        except KubeAuthError as exc:
            raise AnsibleParserError("%s (inventory source %s)" % (exc, path))
        except Exception as exc:  # pylint: disable=broad-except
            if not is_kube_error(exc):
                raise
            # One line naming the server, the call, the kubeconfig and context used, never a traceback.
            where = describe_connection(connection_used(params))
            raise AnsibleParserError("inventory source %s: %s (%slabel_selector=%r)" % (
                path, describe_error(exc, server, last_call()), where + ", " if where else "", selector))
        include_cpu = self.get_option("include_cpu_nodes")
        nodes = []
        for node in listing.get("items") or []:
            if is_gpu_node(node):
                nodes.append(cluster_facts.node_summary(node))
            elif include_cpu:
                nodes.append({"node_name": node["metadata"]["name"], "cpu_only": True})
        return sorted(nodes, key=lambda n: n["node_name"])

    def _populate(self, nodes):
        main_group = self.inventory.add_group(self.get_option("group"))
        strict = self.get_option("strict")
        labels_mode = self.get_option("host_labels")
        for summary in nodes:
            name = summary["node_name"]
            if summary.get("cpu_only"):
                self.inventory.add_host(name, group=self.inventory.add_group("cpu_nodes"))
                continue
            self.inventory.add_host(name, group=main_group)
            hostvars = dict((HOSTVAR_PREFIX + key, value) for key, value in summary.items() if key != "labels")
            labels = host_labels(summary.get("labels"), labels_mode)
            if labels is not None:
                hostvars[HOSTVAR_PREFIX + "labels"] = labels
            for key, value in hostvars.items():
                # Cluster data is never a template, whatever a label holds: ansible-core 2.19 (meta/runtime.yml) trusts
                # no string as a template unless tagged so, and json.loads tags nothing (wrap_var only copied it).
                self.inventory.set_variable(name, key, value)
            for group in self._builtin_groups(summary):
                self.inventory.add_child(self.inventory.add_group(group), name)
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)

    @staticmethod
    def _builtin_groups(summary):
        safe = cluster_facts.group_safe
        return [
            "gpu_model_" + safe(summary["model"] or "unknown"),
            "mig_strategy_" + safe(summary["mig_strategy"]),
            "mig_config_" + safe(summary["mig_config"] or "unset"),
            "mig_state_" + safe(summary["mig_config_state"] or "unset"),
        ]
