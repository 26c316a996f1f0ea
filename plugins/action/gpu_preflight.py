# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""gpu_preflight's controller side: with ``inventory_source``, read a gpu_nodes inventory source again, through the
inventory plugin itself, and return its own error instead of running the module.

Why: Ansible hands a play no parse error of an inventory source (only a warning, or a stop before any play), so a
playbook that finds no host cannot say why. Parsing the source again with the gpu_nodes plugin gives the answer the
inventory got - the API server's error, a bad option - with the plugin's own option names, aliases and environment
variables rather than a copy of them. The answer is a result, not a failure: the pre-flight play names every
source in one message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import inventory_loader
from ansible.utils.vars import merge_hash

PLUGIN = "gpufleet.gpu_operator.gpu_nodes"
# The module's other checks, refused beside inventory_source when given a value. The connection options are let
# through unused (the source names its own), so module_defaults of the k8s group do not refuse the re-read.
OTHER_CHECKS = ("executables", "python_packages", "directories", "access")


class ActionModule(ActionBase):
    _supports_check_mode = True  # it only reads

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        source = self._task.args.get("inventory_source")
        if source is None:
            return merge_hash(result, self._execute_module(task_vars=task_vars))
        given = [name for name in OTHER_CHECKS if self._task.args.get(name)]
        if given or not isinstance(source, str) or not source:
            result.update(failed=True, changed=False, msg=(
                "inventory_source must be the path of an inventory source, got %r" % (source,) if not given else
                "inventory_source is read alone, not with %s" % ", ".join(given)))
            return result
        result.update(changed=False, inventory_source=self.read_source(source))
        return result

    def read_source(self, path):
        """{path, gpu_nodes (whether the plugin takes the file), hosts, error}: the plugin's parse of ``path``."""
        answer = {"path": path, "gpu_nodes": False, "hosts": 0, "error": None}
        plugin = inventory_loader.get(PLUGIN)
        try:
            config = self._loader.load_from_file(path, cache="none") if plugin.verify_file(path) else None
        except AnsibleError as exc:
            answer["error"] = "inventory source %s: %s" % (path, to_text(exc.message))
            return answer
        if not isinstance(config, dict) or config.get("plugin") not in (PLUGIN, "gpu_nodes"):
            return answer  # another plugin's source (or not an inventory file): not this module's to explain
        answer["gpu_nodes"] = True
        inventory = InventoryData()
        try:
            # cache=False reads the API server, not a cached answer; what the plugin stores stays in its own memory
            # (only Ansible's inventory manager writes a cache plugin out).
            plugin.parse(inventory, self._loader, path, cache=False)
        except AnsibleError as exc:
            answer["error"] = to_text(exc.message)
            return answer
        answer["hosts"] = len(inventory.hosts)
        return answer
