"""gpu_preflight's inventory_source, run by ansible-playbook on the controller with no cluster: the gpu_nodes plugin's
own error for a source whose kubeconfig is missing, the connection options of module_defaults let through unused,
and the other checks refused beside it."""

import json

from tests.support import playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  module_defaults:
    group/gpufleet.gpu_operator.k8s:
      kubeconfig: /nonexistent/module-defaults-kubeconfig
  tasks:
    - name: Read the source again
      gpufleet.gpu_operator.gpu_preflight:
        inventory_source: "{{ source }}"
      register: reread

    - name: Read the source again beside another check
      gpufleet.gpu_operator.gpu_preflight:
        inventory_source: "{{ source }}"
        executables: [helm]
      register: refused
      ignore_errors: true

    - name: Hand the answers over
      ansible.builtin.copy:
        content: "{{ {'reread': reread, 'refused': refused} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def test_a_source_is_read_again_by_its_plugin_and_alone(tmp_path):
    kubeconfig = tmp_path / "missing-kubeconfig"
    source = tmp_path / "fleet.gpu_nodes.yml"
    source.write_text("plugin: gpufleet.gpu_operator.gpu_nodes\nkubeconfig: %s\n" % kubeconfig)
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "answers.json"
    proc = playbook.run(play, inventory="localhost,", extra_vars={"source": str(source), "out": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answers = json.loads(out.read_text())
    answer = answers["reread"]["inventory_source"]
    assert answer["path"] == str(source) and answer["gpu_nodes"] is True and answer["hosts"] == 0, answer
    # The source's own kubeconfig, not the one module_defaults gave the task.
    assert str(kubeconfig) in answer["error"] and "module-defaults-kubeconfig" not in answer["error"], answer
    assert answers["reread"]["changed"] is False and not answers["reread"].get("failed")
    assert answers["refused"]["failed"] is True
    assert answers["refused"]["msg"] == "inventory_source is read alone, not with executables"
