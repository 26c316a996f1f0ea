#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_rollout_progress
short_description: Follow an async mig_rollout, printing each node's step as it changes
version_added: 0.2.0
description:
  - Polls the async job of a M(gpufleet.gpu_operator.mig_rollout) started with C(async) and C(poll: 0), and the
    progress record it keeps (its O(gpufleet.gpu_operator.mig_rollout#module:progress_file)); every change of a
    node's step is printed as one line at once - wall-clock time of the step, node, step (C(draining),
    C(labelled), C(pending), C(rebooting), C(applied), C(verifying), C(done), C(failed)...), seconds since the
    node started, and the outcome's message - in the terminal and in an AWX job's output.
  - Returns the rollout's own result when its job ends (the same keys as M(gpufleet.gpu_operator.mig_rollout),
    C(failed) included), and cleans up the job's status file.
  - Runs on the controller as an action; the record is read directly when the rollout runs on the controller
    (C(delegate_to: localhost), as the C(gpufleet.gpu_operator.mig_reconfigure) role does), else through
    M(ansible.builtin.slurp).
author:
  - gpufleet maintainers (@gpufleet)
options:
  jid:
    description: The async job id (C(ansible_job_id)) of the mig_rollout task.
    type: str
    required: true
  path:
    description: The progress record, as given to mig_rollout's O(gpufleet.gpu_operator.mig_rollout#module:progress_file).
    type: str
    required: true
  interval:
    description: Seconds between polls.
    type: float
    default: 2.0
  prefix:
    description: Text at the start of every line printed.
    type: str
    default: MIG rollout
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: none
    details: A rollout does not run async in check mode; there is nothing to follow.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  action:
    description: Runs as an action plugin on the controller.
    support: full
notes:
  - Lines look like C(MIG rollout: 12:40:03  gpu-node-1  pending  +7s).
"""

EXAMPLES = r"""
- name: Reconfigure two nodes in the background
  gpufleet.gpu_operator.mig_rollout:
    nodes: [gpu-node-1, gpu-node-2]
    config: all-balanced
    progress_file: /tmp/mig-rollout-progress.json
  async: 7200
  poll: 0
  register: rollout_job

- name: Print each node's step until the rollout ends
  gpufleet.gpu_operator.mig_rollout_progress:
    jid: "{{ rollout_job.ansible_job_id }}"
    path: /tmp/mig-rollout-progress.json
  register: rollout
"""

RETURN = r"""
progress:
  description: The last progress record read (empty before the rollout wrote one) and how many lines were printed.
  returned: always
  type: dict
  contains:
    version:
      description: Record format version.
      returned: when a record was read
      type: int
    config:
      description: The MIG config rolled out.
      returned: when a record was read
      type: str
    started:
      description: When the rollout started (seconds since the epoch).
      returned: when a record was read
      type: float
    updated:
      description: When the record was last replaced (seconds since the epoch).
      returned: when a record was read
      type: float
    finished:
      description: Whether the rollout had ended when the record was written.
      returned: when a record was read
      type: bool
    nodes:
      description: One entry per node, in the order the nodes started.
      returned: when a record was read
      type: list
      elements: dict
      contains:
        node:
          description: Node name.
          returned: always
          type: str
        step:
          description: The node's step now.
          returned: always
          type: str
        message:
          description: What the step is about (the outcome's message for a final step).
          returned: always
          type: str
        started:
          description: When the node started (seconds since the epoch).
          returned: always
          type: float
        since:
          description: When the step began (seconds since the epoch).
          returned: always
          type: float
        elapsed_s:
          description: Seconds from the node's start to the step.
          returned: always
          type: float
        history:
          description: Every step seen, as [time, step] pairs.
          returned: always
          type: list
          elements: list
    lines_printed:
      description: Number of lines printed.
      returned: always
      type: int
rows:
  description: The rollout's rows (see M(gpufleet.gpu_operator.mig_rollout)); every other key of its result is returned too.
  returned: when the rollout ran
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      returned: always
      type: str
    result:
      description: C(reconfigured), C(verified), C(unchanged), C(failed), C(invalid) or C(not started).
      returned: always
      type: str
    message:
      description: What happened on the node.
      returned: always
      type: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        jid=dict(type="str", required=True),
        path=dict(type="str", required=True),
        interval=dict(type="float", default=2.0),
        prefix=dict(type="str", default="MIG rollout"),
    ), supports_check_mode=False)
    module.fail_json(msg="mig_rollout_progress runs as an action on the controller; this file only documents it")


if __name__ == "__main__":
    main()
