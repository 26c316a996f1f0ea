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
- name: Name this run (a holder unique per run)
  ansible.builtin.set_fact:
    rollout_holder: "mig-rollout-{{ now(utc=true, fmt='%Y%m%dT%H%M%S') }}-{{ 999999999 | random }}"
  run_once: true

- name: Refuse to start while another MIG rollout runs
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ rollout_holder }}"
    description: "all-balanced on 2 nodes"
  delegate_to: localhost
  run_once: true

- name: Release it
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ rollout_holder }}"
    state: absent
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
lease:
  description: The lease as held now; on a failure because another rollout holds it, that holder's Lease.
  returned: when state=present
  type: dict
  contains:
    holder:
      description: The Lease's C(spec.holderIdentity).
      returned: always
      type: str
    acquired:
      description: The Lease's C(spec.acquireTime) (RFC 3339 MicroTime).
      returned: always
      type: str
    renewed:
      description: The Lease's C(spec.renewTime).
      returned: always
      type: str
    duration_s:
      description: The Lease's C(spec.leaseDurationSeconds).
      returned: always
      type: int
    expires:
      description: When the Lease expires unless renewed (renewed or acquired time plus the duration); null when unknown.
      returned: always
      type: str
    rollout:
      description: The rollout's description (annotation C(gpufleet.io/rollout)), or null.
      returned: always
      type: str
    previous_holder:
      description: The holder of the expired or broken Lease this run took over; null when there was none or it was ours.
      returned: when the Lease existed before this run
      type: str
outcome:
  description: For state=absent, V(released), V(absent) or V(held by <holder>).
  returned: when state=absent
  type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import LockHeld, RolloutLock


def take_or_release(module):
    params = module.params
    lock = RolloutLock(module.ops().custom, params["namespace"], params["name"], params["holder"], params["duration"],
                       description=params["description"])
    try:
        if params["state"] == "absent":
            changed, outcome = lock.release(check_mode=module.check_mode)
            return dict(changed=changed, outcome=outcome)
        changed, view = lock.acquire(break_lock=params["break_lock"], check_mode=module.check_mode)
        return dict(changed=changed, lease=view)
    except LockHeld as exc:
        module.fail_json(msg=str(exc), lease=exc.lease)


def main():
    module = KubeModule(dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        namespace=dict(type="str", default="gpu-operator"),
        name=dict(type="str", default="gpufleet-mig-rollout"),
        holder=dict(type="str", required=True),
        duration=dict(type="int", default=120),
        description=dict(type="str", default=""),
        break_lock=dict(type="bool", default=False),
    ), names={"name": "name", "namespace": "namespace"},
        supports_check_mode=True)
    if module.params["duration"] < 10:
        module.fail_json(msg="duration must be at least 10 seconds, got %s" % module.params["duration"])
    module.run(take_or_release)


if __name__ == "__main__":
    main()
