"""Renders templates as a play on the example inventory's gpu_nodes group would, for test_examples.py.

Run as a program (it installs Ansible's collection loader, which the unit tests' own process must not get):
one JSON string (a template) per line on stdin, one JSON object per line on stdout: {"value": ...},
{"omitted": true} when the template resolves to omit, or {"error": "..."}. Variables are those of the first host of
group gpu_nodes, with hostvars, groups and the play's magic variables (ansible_play_hosts_all, ...).
"""

import json
import os
import sys


def main():
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.template import Templar, trust_as_template
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[os.path.join(root, "inventories", "example")])
    variable_manager = VariableManager(loader=loader, inventory=inventory)
    HostVars(inventory=inventory, variable_manager=variable_manager, loader=loader)  # sets variable_manager's hostvars
    play = Play.load({"hosts": "gpu_nodes", "gather_facts": False}, variable_manager=variable_manager, loader=loader)
    host = inventory.get_hosts("gpu_nodes")[0]
    templar = Templar(loader=loader, variables=variable_manager.get_vars(play=play, host=host, include_hostvars=True))
    for line in sys.stdin:
        text = json.loads(line)
        try:
            answer = {"value": templar.template(trust_as_template(text))}
        except AnsibleError as exc:
            answer = {"omitted": True} if type(exc).__name__ == "AnsibleValueOmittedError" else {
                "error": "%s: %s" % (type(exc).__name__, exc)}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
