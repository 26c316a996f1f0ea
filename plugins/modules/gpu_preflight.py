#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_preflight
short_description: Check on the controller what a playbook needs before it starts
version_added: 0.1.0
description:
  - Checks, and fails on, everything that is missing at once, in one line.
  - The executables on E(PATH) (O(executables), e.g. C(helm)) and the Python packages of the Python that runs the
    modules (O(python_packages), e.g. C(kubernetes>=30.0.0)).
  - The Kubernetes connection (O(api)) with the given kubeconfig and context, both named in the result and in
    every error; the API server's address and version (C(GET /version)); the user the credentials authenticate as
    (C(SelfSubjectReview), where the server has it).
  - The permissions the playbook will use (O(access)), each asked with a C(SelfSubjectAccessReview); every one
    denied is listed by name (verb, resource, namespace).
  - The directories the playbook will write on the controller (O(directories)), first - a problem with one of them
    fails the module before the API server is contacted.
  - Reads only. An access review creates nothing (the server answers it and keeps nothing), so every check also
    runs in check mode.
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes.no_diff
options:
  executables:
    description: Programs that must be on E(PATH) of the controller.
    type: list
    elements: str
    default: []
  python_packages:
    description:
      - Python distributions that must be installed for the Python that runs the modules, as PEP 508
        requirements (C(kubernetes) or C(kubernetes>=30.0.0)).
    type: list
    elements: str
    default: []
  directories:
    description:
      - Directories the playbook will write on the controller. Each must be a directory this user can write, or one
        that can be created - its nearest existing parent a directory this user can write. A path that is a file,
        lies under a file, or is a directory this user cannot write is named in the failure.
      - Checked before anything else. A problem fails the module before the API server is contacted, with the
        missing executables and Python packages in the same line.
      - Nothing is created; RV(directories[].exists) tells the playbook whether it has to.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      name:
        description: What the directory is for, named in the failure - the variable that sets it, such as C(gpu_report_dir).
        type: str
        default: directory
  api:
    description:
      - Whether to check the Kubernetes connection and O(access). V(false) checks only the controller (O(access)
        must then be empty).
    type: bool
    default: true
  access:
    description:
      - The permissions to check, one entry per resource.
    type: list
    elements: dict
    default: []
    suboptions:
      verbs:
        description: Verbs (C(get), C(list), C(watch), C(create), C(update), C(patch), C(delete) ...).
        type: list
        elements: str
        required: true
      resource:
        description: The resource's plural name, with its subresource after a C(/) (C(pods/eviction)).
        type: str
        required: true
      group:
        description: The API group (empty for the core group).
        type: str
        default: ''
      namespace:
        description: The namespace; omitted for a cluster-scoped resource or for every namespace.
        type: str
      name:
        description: One object's name, where the permission may be limited to it.
        type: str
  inventory_source:
    description:
      - The path of an inventory source to read again with the P(gpufleet.gpu_operator.gpu_nodes#inventory) plugin
        on the controller, as the inventory read it (its options, aliases and environment variables), for why it gave
        no host - RV(inventory_source.error).
      - Read alone - refused with O(executables), O(python_packages), O(directories) or O(access) - and the task
        does not fail for the source's error, so a playbook can name every source in one message. The connection
        options are not used (the source names its own), so C(module_defaults) of the group may set them. A file
        another plugin reads is reported with RV(inventory_source.gpu_nodes=false).
    type: path
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Check what the MIG reconfiguration needs before any host is read
  gpufleet.gpu_operator.gpu_preflight:
    kubeconfig: "{{ gpufleet_kubeconfig | default(omit) }}"
    context: "{{ gpufleet_kube_context | default(omit) }}"
    python_packages: [kubernetes>=30.0.0]
    access:
      - {verbs: [get, list, watch, patch], resource: nodes}
      - {verbs: [create], resource: pods/eviction}
      - {verbs: [get, create, update], resource: leases, group: coordination.k8s.io, namespace: gpu-operator}

- name: Only the controller's programs
  gpufleet.gpu_operator.gpu_preflight:
    executables: [helm]
    api: false

- name: Why a gpu_nodes inventory source gave no host
  gpufleet.gpu_operator.gpu_preflight:
    inventory_source: inventories/prod/fleet.gpu_nodes.yml
  register: source

- name: The directory the report is written to, before the cluster is read
  gpufleet.gpu_operator.gpu_preflight:
    api: false
    directories:
      - path: "{{ gpu_report_dir }}"
        name: gpu_report_dir
  register: report_dir
"""

RETURN = r"""
inventory_source:
  description: What the gpu_nodes inventory plugin made of O(inventory_source); the only key returned with it.
  returned: when O(inventory_source) is given
  type: dict
  contains:
    path:
      description: O(inventory_source).
      returned: always
      type: str
      sample: inventories/prod/fleet.gpu_nodes.yml
    gpu_nodes:
      description: Whether the file is a gpu_nodes source (its name ends in C(gpu_nodes.yml) or C(gpu_nodes.yaml) and
        it names the plugin).
      returned: always
      type: bool
      sample: true
    hosts:
      description: How many hosts the source gives now.
      returned: always
      type: int
      sample: 0
    error:
      description: The plugin's error for the source, null when it parsed.
      returned: always
      type: str
      sample: >-
        inventory source inventories/prod/fleet.gpu_nodes.yml: cannot reach the Kubernetes API server 10.0.0.1:6443
        (GET /api/v1/nodes): connection refused (kubeconfig /home/me/.kube/prod, context prod, label_selector=None)
kubeconfig:
  description: The kubeconfig used; a path, C((mapping)) when given as content, null for host/api_key or in-cluster.
  returned: always
  type: str
  sample: /home/me/.kube/config
context:
  description: The kubeconfig context used (the one asked for, else the kubeconfig's current context).
  returned: always
  type: str
  sample: prod
server:
  description: The API server, C(host:port).
  returned: when O(api) is true and the connection settings could be read
  type: str
  sample: 10.0.0.1:6443
server_version:
  description: The API server's version (C(gitVersion) of C(GET /version)).
  returned: when the API server answered
  type: str
  sample: v1.31.2
user:
  description: The user the credentials authenticate as; null where the server has no SelfSubjectReview API.
  returned: when the API server answered
  type: str
  sample: system:serviceaccount:gpu-operator:gpufleet-automation
missing_executables:
  description: The O(executables) not found on E(PATH).
  returned: always
  type: list
  elements: str
missing_python_packages:
  description: The O(python_packages) not met, each with why (C(kubernetes (not installed))).
  returned: always
  type: list
  elements: str
denied:
  description: The permissions of O(access) the server does not allow (C(create pods/eviction), C(update
    leases.coordination.k8s.io in namespace gpu-operator)).
  returned: always
  type: list
  elements: str
permissions:
  description: The permissions of O(access), one per verb and resource, named as in RV(denied).
  returned: always
  type: list
  elements: str
  sample: [get nodes, create pods/eviction]
checked:
  description: How many permissions were asked (one per verb and resource).
  returned: always
  type: int
directories:
  description: The O(directories), in order, each with whether it exists and what keeps it from being written.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: O(directories[].name).
      returned: always
      type: str
      sample: gpu_report_dir
    path:
      description: O(directories[].path), as given.
      returned: always
      type: str
      sample: /srv/reports/gpu
    exists:
      description: Whether the directory exists (false - the playbook creates it with its missing parents).
      returned: always
      type: bool
    problem:
      description: Null, or why the directory cannot be written (a line naming O(directories[].name) and the path).
      returned: always
      type: str
      sample: "gpu_report_dir /srv/reports/gpu cannot be created: /srv is a file"
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import access as preflight
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import (
    KubeModule,
    describe_error,
    is_kube_error,
    last_call,
)


def check(module):
    params = module.params
    # The context the client uses is named only when the API server is checked (reading it reads the kubeconfig).
    names = preflight.connection_used(params) if params["api"] else preflight.connection_names(params)
    directories = preflight.check_directories(params["directories"])
    result = dict(changed=False, kubeconfig=names["kubeconfig"], context=names["context"],
                  missing_executables=preflight.missing_executables(params["executables"]),
                  missing_python_packages=preflight.missing_packages(params["python_packages"]),
                  denied=[], checked=0, directories=directories,
                  permissions=[preflight.rule_name(rule) for rule in preflight.rules_of(params["access"])])
    unusable = [entry["problem"] for entry in directories if entry["problem"]]
    if unusable:  # before any API call: nothing is read while the playbook could not write its result
        problems = preflight.summary(result["missing_executables"], result["missing_python_packages"], [], unusable)
        module.fail_json(msg="pre-flight: %s%s" % (problems, "; the API server was not contacted" if params["api"] else ""),
                         **result)
    if params["api"]:
        try:
            ops = module.ops()
            result["server"] = module.server
            result["server_version"] = preflight.server_version(ops)
            result["user"] = preflight.whoami(ops)
            rules = preflight.rules_of(params["access"])
            result["checked"] = len(rules)
            result["denied"] = preflight.denied_rules(ops, rules)
        except Exception as exc:  # pylint: disable=broad-except
            if not is_kube_error(exc):
                raise
            result["server"] = module.server
            where = preflight.describe_connection(result)
            line = describe_error(exc, module.server, last_call())
            local = preflight.summary(result["missing_executables"], result["missing_python_packages"], [])
            msg = "pre-flight: %s%s%s" % (line, " (%s)" % where if where else "", "; %s" % local if local else "")
            module.fail_json(msg=msg, **result)
    problems = preflight.summary(result["missing_executables"], result["missing_python_packages"], result["denied"])
    where = preflight.describe_connection(result, result.get("server"), result.get("user")) if params["api"] else ""
    if problems:
        module.fail_json(msg="pre-flight: %s%s" % (problems, " (%s)" % where if where else ""), **result)
    result["msg"] = "pre-flight: ok%s" % (" (%s, %s)" % (where, result.get("server_version")) if where else "")
    return result


def main():
    module = KubeModule(dict(
        executables=dict(type="list", elements="str", default=[]),
        python_packages=dict(type="list", elements="str", default=[]),
        directories=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True),
            name=dict(type="str", default="directory"),
        )),
        api=dict(type="bool", default=True),
        access=dict(type="list", elements="dict", default=[], options=dict(
            verbs=dict(type="list", elements="str", required=True),
            resource=dict(type="str", required=True),
            group=dict(type="str", default=""),
            namespace=dict(type="str"),
            name=dict(type="str"),
        )),
        inventory_source=dict(type="path"),
    ), names={"access[].namespace": "namespace"}, supports_check_mode=True)
    if module.params["inventory_source"]:  # reached only without the collection's action plugin
        module.fail_json(msg="inventory_source is read on the controller by the gpu_preflight action plugin; run the "
                             "module by its name gpufleet.gpu_operator.gpu_preflight", changed=False)
    if module.params["access"] and not module.params["api"]:
        module.fail_json(msg="access needs api=true (the permissions are asked of the API server)", changed=False)
    module.run(check)


if __name__ == "__main__":
    main()
