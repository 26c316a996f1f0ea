#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_rollout_lock
short_description: Take or release the Kubernetes Lease that makes a MIG rollout exclusive
version_added: 0.1.0
description:
  - Holds a C(coordination.k8s.io/v1) Lease for the whole MIG rollout, so a second concurrent rollout is refused
    with the current holder named.
  - A lease whose holder stopped renewing it (a killed controller) expires after O(duration) seconds and is
    then taken over, so a re-run can resume the rollout. O(break_lock) takes a live lease explicitly.
  - The rollout modules renew the lease while they work (see M(gpufleet.gpu_operator.mig_rollout)).
extends_documentation_fragment:
  - gpufleet.gpu_operator.kube_auth
  - gpufleet.gpu_operator.attributes
options:
  state:
    description: V(present) takes (or renews) the lease; V(absent) releases it if this holder has it.
    type: str
    choices: [present, absent]
    default: present
  namespace:
    description: Namespace of the Lease.
    type: str
    default: gpu-operator
  name:
    description: Name of the Lease.
    type: str
    default: gpufleet-mig-rollout
  holder:
    description: Identity of this rollout (unique per run, e.g. controller host plus a run id).
    type: str
    required: true
  duration:
    description: Seconds the lease stays valid without renewal.
    type: int
    default: 120
  description:
    description: Free text stored on the lease (what is rolled out), shown to a refused rollout.
    type: str
    default: ''
  break_lock:
    description: Take the lease even from a live holder. Only when that holder is known to be gone.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports whether the lease would be taken or refused without writing it.
  diff_mode:
    support: none
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Refuse to start while another MIG rollout runs
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ inventory_hostname }}-{{ run_id }}"
    description: "all-balanced on 12 nodes"
  delegate_to: localhost
  run_once: true

- name: Release it
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ inventory_hostname }}-{{ run_id }}"
    state: absent
"""

RETURN = r"""
lease:
  description: The lease as held now (holder, acquired, renewed, duration_s, expires, rollout, previous_holder).
  returned: when state=present
  type: dict
outcome:
  description: For state=absent, V(released), V(absent) or V(held by <holder>).
  returned: when state=absent
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    ApiException,
    api_client_from_module,
    api_error_message,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import LockHeld, RolloutLock


def main():
    argument_spec = dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        namespace=dict(type="str", default="gpu-operator"),
        name=dict(type="str", default="gpufleet-mig-rollout"),
        holder=dict(type="str", required=True),
        duration=dict(type="int", default=120),
        description=dict(type="str", default=""),
        break_lock=dict(type="bool", default=False),
    )
    argument_spec.update(AUTH_ARG_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    if params["duration"] < 10:
        module.fail_json(msg="duration must be at least 10 seconds, got %s" % params["duration"])
    ops = KubeOps(api_client_from_module(module))
    lock = RolloutLock(ops.custom, params["namespace"], params["name"], params["holder"], params["duration"],
                       description=params["description"])
    try:
        if params["state"] == "absent":
            changed, outcome = lock.release(check_mode=module.check_mode)
            module.exit_json(changed=changed, outcome=outcome)
        changed, view = lock.acquire(break_lock=params["break_lock"], check_mode=module.check_mode)
        module.exit_json(changed=changed, lease=view)
    except LockHeld as exc:
        module.fail_json(msg=str(exc), lease=exc.lease)
    except ApiException as exc:
        module.fail_json(msg="lease %s/%s: %s" % (params["namespace"], params["name"], api_error_message(exc)))


if __name__ == "__main__":
    main()
