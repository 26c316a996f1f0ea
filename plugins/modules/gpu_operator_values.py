#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_operator_values
short_description: Validate GPU Operator settings and render Helm values, ConfigMaps and a ClusterPolicy patch
version_added: 0.1.0
description:
  - Pure computation on the controller; talks to nothing and changes nothing.
  - Rejects unknown or contradictory settings with one message listing every problem, so that a play fails
    before anything is installed. Examples are a MIG strategy outside C(none|single|mixed), MPS sharing
    with the C(mixed) strategy, device-plugin configs NVIDIA's device plugin would refuse (the same parser rules and
    start-up checks, under the operator's MIG strategy), a custom MIG config that does not parse or names profiles that no GPU model
    of the inventory has, and O(extra_values) that contradict a dedicated setting.
  - Renders the Helm values of the NVIDIA GPU Operator chart (v26.7.0 value keys), the ConfigMaps the role
    manages (custom MIG config under key C(config.yaml), device-plugin sharing configs), the
    ClusterPolicy merge patch that switches strategy and config names without a reinstall, and one NVIDIADriver
    per driver pool of O(nvidia_drivers).
extends_documentation_fragment:
  - gpufleet.gpu_operator.attributes.no_diff
options:
  namespace:
    description: Namespace of the operator; the rendered ConfigMaps go there.
    type: str
    default: gpu-operator
  driver_enabled:
    description: Let the operator install the driver (C(driver.enabled)); false when hosts have one.
    type: bool
    default: true
  toolkit_enabled:
    description: Let the operator install the container toolkit (C(toolkit.enabled)).
    type: bool
    default: true
  dcgm_exporter_enabled:
    description: Deploy dcgm-exporter (C(dcgmExporter.enabled)).
    type: bool
    default: true
  mig_strategy:
    description: How MIG devices are advertised (C(mig.strategy)).
    type: str
    default: single
  mig_manager_enabled:
    description: Deploy MIG Manager (C(migManager.enabled)).
    type: bool
    default: true
  mig_with_reboot:
    description: Set C(WITH_REBOOT=true) in MIG Manager's environment, for clouds where a GPU reset needs a reboot.
    type: bool
    default: false
  mig_default_config:
    description: MIG config applied to nodes without a C(nvidia.com/mig.config) label (C(all-disabled) or empty).
    type: str
    default: all-disabled
  mig_config:
    description:
      - A custom mig-parted config (C(version), C(mig-configs)); rendered into a ConfigMap under key C(config.yaml).
      - Validated with the collection's planning logic against O(gpu_models).
    type: dict
  mig_config_name:
    description: Name of the ConfigMap holding O(mig_config).
    type: str
    default: gpufleet-mig-parted-config
  device_plugin_config:
    description: Named device-plugin configs (time-slicing or MPS), one ConfigMap key each.
    type: dict
  device_plugin_config_name:
    description: Name of the ConfigMap holding O(device_plugin_config).
    type: str
    default: gpufleet-device-plugin-config
  device_plugin_config_default:
    description: Key of O(device_plugin_config) used on nodes without a C(nvidia.com/device-plugin.config) label.
    type: str
  values_files:
    description:
      - Helm values files on the controller, merged in order over the role's own values and before O(extra_values),
        as C(helm -f) merges them (a later file wins; maps merge, anything else is replaced).
      - The same checks as for O(extra_values) apply to each file, and a problem names the file. A file must be a
        YAML mapping of at most 1 MiB.
    type: list
    elements: path
    default: []
  image_registry:
    description:
      - A registry that mirrors the chart's images (air-gapped sites), as C(host[:port][/path]). Every image repository
        of the chart (NVIDIA's C(nvcr.io/nvidia/...) and NFD's C(registry.k8s.io/nfd/...)) keeps its path below the new
        host, for example C(nvcr.io/nvidia/k8s) becomes C(registry.example.com/mirror/nvidia/k8s).
    type: str
  image_pull_secrets:
    description:
      - Names of image pull Secrets (type C(kubernetes.io/dockerconfigjson), in the operator's namespace) set on
        the operator and on every operand the ClusterPolicy deploys, and on NFD.
    type: list
    elements: str
    default: []
  extra_values:
    description:
      - Further chart values, merged last. Keys the dedicated options own must not disagree with them.
      - Top-level keys must be those of the chart's C(values.yaml) (v26.7.0, for example C(draDriver) and
        C(extraObjects)); C(operator.defaultRuntime) is accepted with a warning, as the chart ignores it.
    type: dict
    default: {}
  gpu_models:
    description:
      - GPU product names present in the inventory (for example C(NVIDIA H100 80GB HBM3)).
      - A custom MIG config must name only profiles that at least one of these models has.
    type: list
    elements: str
    default: []
  nvidia_drivers:
    description:
      - Driver node pools, each managed by an NVIDIADriver custom resource of its own (GPU Operator v26.7.0
        C(nvidia.com/v1alpha1)). Non-empty, the chart values set C(driver.nvidiaDriverCRD.enabled=true) and
        C(driver.nvidiaDriverCRD.deployDefaultCR=false), and RV(nvidia_drivers) holds one NVIDIADriver per pool.
      - Each pool is a mapping with C(name) (the NVIDIADriver's name, a DNS-1123 label), C(version) (the driver
        version as a string, such as C('580.105.08'), or an image digest C(sha256:...)), exactly one of C(nodes_group)
        (an inventory group; its nodes are listed in O(driver_group_nodes)) or C(node_selector) (a non-empty mapping of
        node label to value), and optionally C(repository), C(image) (default the chart's C(driver.repository) and
        C(driver.image)), C(driver_type) (C(gpu), C(vgpu) or C(vgpu-host-manager)) and C(kernel_module_type) (C(auto),
        C(open) or C(proprietary)).
      - Refused, each problem naming the pool and field - unknown keys, a missing or malformed version (a YAML number
        too), a bad or duplicate name, neither or both of C(nodes_group) and C(node_selector), a group missing from the
        inventory or without hosts, an empty C(node_selector) or one using NVIDIA's routing label
        C(nvidia.com/gpu-operator.driver.owner) or the role's C(gpufleet.io/driver-pool), a node in two groups, and
        pools with O(driver_enabled=false). What needs the cluster (selectors that overlap on a node) is checked by
        M(gpufleet.gpu_operator.gpu_operator_driver_pools).
    type: list
    elements: raw
    default: []
  driver_group_nodes:
    description:
      - The Kubernetes node names of each inventory group that a pool of O(nvidia_drivers) names in C(nodes_group),
        as a mapping of group name to a list of node names. A group missing here is not in the inventory.
    type: dict
    default: {}
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Validate settings and render values before installing anything
  gpufleet.gpu_operator.gpu_operator_values:
    mig_strategy: "{{ gpu_operator_mig_strategy }}"
    driver_enabled: "{{ gpu_operator_driver_enabled }}"
    mig_config: "{{ gpu_operator_mig_config | default(omit) }}"
    gpu_models: "{{ groups['gpu_nodes'] | map('extract', hostvars, 'gpu_model') | unique | list }}"
  register: gpu_operator_rendered
"""

RETURN = r"""
chart_values:
  description:
    - Helm values for NVIDIA's C(gpu-operator) chart, laid out as the chart's C(values.yaml)
      (U(https://github.com/NVIDIA/gpu-operator/blob/main/deployments/gpu-operator/values.yaml)).
    - Also returned as C(values), deprecated (a key Jinja cannot reach with dot notation); it will be removed in 1.0.0.
  returned: success
  type: dict
  sample: {"mig": {"strategy": "mixed"}, "driver": {"enabled": false}}
configmaps:
  description: ConfigMap manifests the role applies before the chart (the custom MIG config, the device-plugin configs).
  returned: success
  type: list
  elements: dict
  contains:
    apiVersion:
      description: Always V(v1).
      returned: always
      type: str
    kind:
      description: Always V(ConfigMap).
      returned: always
      type: str
    metadata:
      description: The ConfigMap's metadata.
      returned: always
      type: dict
      contains:
        name:
          description: O(mig_config_name) or O(device_plugin_config_name).
          returned: always
          type: str
        namespace:
          description: O(namespace).
          returned: always
          type: str
        labels:
          description: C(app.kubernetes.io/managed-by=gpufleet.gpu_operator), a map of label name to value.
          returned: always
          type: dict
    data:
      description:
        - A map of file name to YAML text, C(config.yaml) for the MIG config, one entry per O(device_plugin_config)
          key for the device-plugin configs.
      returned: always
      type: dict
cluster_policy_patch:
  description:
    - Merge patch for ClusterPolicy C(cluster-policy) (strategy, MIG and device-plugin config names), laid out as
      NVIDIA's ClusterPolicy C(spec).
  returned: success
  type: dict
  sample: {"spec": {"mig": {"strategy": "mixed"}, "migManager": {"config": {"name": "", "default": "all-disabled"}}}}
device_plugin_config_selection:
  description:
    - Which nodes get which device-plugin config, as the GPU Operator's config manager decides
      (NVIDIA/k8s-device-plugin C(cmd/config-manager), run with C(FALLBACK_STRATEGIES=empty)) - the config the node's
      C(nvidia.com/device-plugin.config) label names, else O(device_plugin_config_default), else no config (no sharing;
      a key named C(default) or a single key is not picked by itself). Null without O(device_plugin_config).
  returned: success
  type: str
  sample: "nodes labelled nvidia.com/device-plugin.config=<name> get that config (a, b); every other node gets config 'a'"
nvidia_drivers:
  description: One entry per pool of O(nvidia_drivers), in the given order (empty without pools).
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The pool's and its NVIDIADriver's name.
      returned: always
      type: str
    nodes_group:
      description: The pool's inventory group, or null for a pool given by C(node_selector).
      returned: always
      type: str
    nodes:
      description: The node names of C(nodes_group), sorted; null for a pool given by C(node_selector).
      returned: always
      type: list
      elements: str
    node_selector:
      description:
        - The NVIDIADriver's C(spec.nodeSelector) - the pool's C(node_selector), or C(gpufleet.io/driver-pool=<name>)
          for a C(nodes_group) pool (the role sets that label on the group's nodes).
      returned: always
      type: dict
    manifest:
      description:
        - The NVIDIADriver (C(nvidia.com/v1alpha1)), labelled C(app.kubernetes.io/managed-by=gpufleet.gpu_operator),
          with C(spec.driverType), C(repository), C(image), C(version), C(nodeSelector) and, when set,
          C(kernelModuleType) and C(imagePullSecrets).
      returned: always
      type: dict
  sample: [{"name": "hopper", "nodes_group": "gpu_hopper", "nodes": ["gpu-1", "gpu-2"],
            "node_selector": {"gpufleet.io/driver-pool": "hopper"},
            "manifest": {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
                         "metadata": {"name": "hopper", "labels": {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"}},
                         "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver",
                                  "version": "580.105.08", "nodeSelector": {"gpufleet.io/driver-pool": "hopper"}}}}]
mig_config_names:
  description: Names of the configs in O(mig_config) (empty without one).
  returned: success
  type: list
  elements: str
problems:
  description: Every reason the settings were rejected.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.values import (
    build_values,
    cluster_policy_patch,
    configmaps,
    device_plugin_config_selection,
    nvidia_drivers,
    settings_problems,
    settings_warnings,
    single_strategy_warnings,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.config_check import mig_config_findings

try:
    import yaml

    HAS_YAML = True
except ImportError:  # pragma: no cover
    HAS_YAML = False


def dump_yaml(data):
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)


MAX_VALUES_FILE = 1024 * 1024
MAX_VALUES_NODES = 100000  # a chart's values.yaml has about 1000; YAML aliases can make a small file expand without end


def _too_big(tree, limit=MAX_VALUES_NODES):
    """Whether ``tree`` expands to more than ``limit`` nodes, counted without expanding it past the limit."""
    stack, seen = [tree], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def read_values_files(paths):
    """([{path, values}], problems): each file read as YAML; a missing, huge, unreadable or non-mapping file is a
    problem naming it (the whole list is checked before anything changes)."""
    loaded, problems = [], []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_VALUES_FILE + 1)
        except (IOError, OSError) as exc:
            problems.append("values file %s cannot be read: %s" % (path, exc.strerror or exc))
            continue
        if len(text) > MAX_VALUES_FILE:
            problems.append("values file %s is larger than %d bytes" % (path, MAX_VALUES_FILE))
            continue
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problems.append("values file %s is not valid YAML%s: %s" % (
                path, " (line %d)" % (mark.line + 1) if mark else "", getattr(exc, "problem", None) or exc))
            continue
        if values is None:
            values = {}
        if _too_big(values):
            problems.append("values file %s expands to more than %d values (YAML aliases?)" % (path, MAX_VALUES_NODES))
            continue
        if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
            problems.append("values file %s must be a mapping of chart values, got %s" % (path, type(values).__name__))
            continue
        loaded.append({"path": path, "values": values})
    return loaded, problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            namespace=dict(type="str", default="gpu-operator"),
            driver_enabled=dict(type="bool", default=True),
            toolkit_enabled=dict(type="bool", default=True),
            dcgm_exporter_enabled=dict(type="bool", default=True),
            # Free string, not choices: a wrong value is reported with every other problem at once.
            mig_strategy=dict(type="str", default="single"),
            mig_manager_enabled=dict(type="bool", default=True),
            mig_with_reboot=dict(type="bool", default=False),
            mig_default_config=dict(type="str", default="all-disabled"),
            mig_config=dict(type="dict"),
            mig_config_name=dict(type="str", default="gpufleet-mig-parted-config"),
            device_plugin_config=dict(type="dict"),
            device_plugin_config_name=dict(type="str", default="gpufleet-device-plugin-config"),
            device_plugin_config_default=dict(type="str"),
            values_files=dict(type="list", elements="path", default=[]),
            image_registry=dict(type="str"),
            # Names of Secrets, not their content.
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),
            extra_values=dict(type="dict", default={}),
            gpu_models=dict(type="list", elements="str", default=[]),
            # Checked entry by entry by the module itself, so that each problem names its pool and field.
            nvidia_drivers=dict(type="list", elements="raw", default=[]),
            driver_group_nodes=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    if not HAS_YAML:
        module.fail_json(msg="PyYAML is required")
    settings = dict(module.params)
    settings["values_files"], file_problems = read_values_files(settings["values_files"])
    mig_problems, config_names, mixed_configs = [], [], []
    if settings["mig_config"] is not None:
        mig_problems, config_names, mixed_configs = mig_config_findings(settings["mig_config"], settings["gpu_models"])
    problems = file_problems + settings_problems(settings, mig_problems)
    if problems:
        module.fail_json(msg="GPU Operator settings rejected before any change: " + "; ".join(problems), problems=problems)
    if settings["mig_config"] is not None and not settings["gpu_models"]:
        module.warn("no GPU models known (set gpu_model per GPU host or gpu_operator_gpu_models): "
                    "mig_config was checked for syntax only, not against the fleet's GPUs")
    for warning in settings_warnings(settings) + single_strategy_warnings(settings, mixed_configs):
        module.warn(warning)
    chart_values = build_values(settings)
    module.exit_json(
        changed=False,
        chart_values=chart_values,
        values=chart_values,
        configmaps=configmaps(settings, settings["namespace"], dump_yaml),
        cluster_policy_patch=cluster_policy_patch(settings),
        nvidia_drivers=nvidia_drivers(settings, chart_values),
        mig_config_names=config_names,
        device_plugin_config_selection=device_plugin_config_selection(settings),
    )


if __name__ == "__main__":
    main()
