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
  - The rollout modules renew the lease while they work (see M(gpufleet.gpu_operator.mig_rollout)). With
    O(keep=true) a keeper process started by this call renews it between module calls too, every O(duration)/3
    seconds, until V(absent) of the same holder stops it, the lease is lost, the run's C(ansible-playbook) process
    ends, or O(keep_max_run) seconds pass. A lease lost meanwhile (taken, deleted, or no longer renewed past
    O(keep_max_run)) is recorded, and the run's next M(gpufleet.gpu_operator.mig_rollout) call and V(absent)
    fail naming the lease.
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
  keep:
    description:
      - With V(present), start a keeper process on the host running the module (the controller, with
        C(delegate_to=localhost)) that renews the lease every O(duration)/3 seconds until V(absent) of the same
        holder stops it.
      - The keeper stops by itself within a second of the run's C(ansible-playbook) process ending (found among
        the module's ancestors through C(/proc); without it, only the lease and O(keep_max_run) end it), when the
        lease is taken or deleted, or after O(keep_max_run) seconds. After the run's process ended the lease
        expires O(duration) seconds after its last renewal.
      - V(absent) asks the keeper to stop and waits for it (up to 10 seconds) before deleting the lease, and fails
        naming the lease when the keeper lost it.
      - Not in check mode (no keeper is started).
    type: bool
    default: false
  keep_max_run:
    description: Seconds after which the keeper stops renewing the lease and records it as lost (the longest run).
    type: int
    default: 86400
attributes:
  check_mode:
    support: full
    details: Reports whether the lease would be taken or refused without writing it; no keeper is started or stopped.
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

- name: Take it and keep it renewed between module calls until released
  gpufleet.gpu_operator.mig_rollout_lock:
    holder: "{{ rollout_holder }}"
    duration: 60
    keep: true
  delegate_to: localhost
  run_once: true

- name: Release it (stops the keeper first; fails naming the lease when the keeper lost it)
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
keeper:
  description:
    - With O(keep=true) and V(present), the keeper as started; with V(absent), the last state of the keeper it stopped.
  returned: when a keeper was started or stopped
  type: dict
  contains:
    pid:
      description: The keeper's process id on the host running the module.
      returned: always
      type: int
    run_pid:
      description: The run's C(ansible-playbook) process the keeper watches; null when none was found.
      returned: always
      type: int
    renewed:
      description: When the keeper last renewed the lease (the controller's clock); null before its first renewal.
      returned: always
      type: str
    lapses:
      description: Each time the lease went unrenewed past its duration (API server unreachable) and was renewed again.
      returned: always
      type: list
      elements: str
    lost:
      description: Why the keeper gave the lease up (taken, deleted, past O(keep_max_run)); null while it held it.
      returned: always
      type: str
    ended:
      description: Why the keeper ended; null while it runs.
      returned: always
      type: str
outcome:
  description: For state=absent, V(released), V(absent) or V(held by <holder>).
  returned: when state=absent
  type: str
"""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.module import KubeModule
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import KubeOps
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import (
    LockHeld,
    RolloutLock,
    run_process,
    start_keeper,
    stop_keeper,
)

KEEPER_FIELDS = ("pid", "run_pid", "renewed", "lapses", "lost", "ended")


def keeper_view(state):
    return dict((field, (state or {}).get(field)) for field in KEEPER_FIELDS)


def release(module, lock):
    # The keeper first, so that no renewal of it races the delete.
    kept = None if module.check_mode else stop_keeper(lock)
    changed, outcome = lock.release(check_mode=module.check_mode)
    result = dict(changed=changed, outcome=outcome)
    if kept is not None:
        result["keeper"] = keeper_view(kept)
        if kept.get("lost"):
            module.fail_json(msg="the run lost its rollout lock %s/%s between module calls: %s" % (
                lock.namespace, lock.name, kept["lost"]), **result)
    return result


def keep(module, lock):
    """Start the keeper with a client of its own (the module's connections stay the module's), after one renewal
    through it: the keeper runs only code this process has loaded."""
    params = module.params
    keeper_lock = RolloutLock(KubeOps(module.new_api_client()).custom, lock.namespace, lock.name, lock.holder,
                              lock.duration_s, description=lock.description)
    keeper_lock.renew()
    state = start_keeper(keeper_lock, run_process(), params["keep_max_run"])
    if state is None:
        module.fail_json(msg="the keeper of rollout lock %s/%s did not start; the lock is held, release it with "
                         "state=absent" % (lock.namespace, lock.name), changed=True)
    return keeper_view(state)


def take_or_release(module):
    params = module.params
    lock = RolloutLock(module.ops().custom, params["namespace"], params["name"], params["holder"], params["duration"],
                       description=params["description"])
    try:
        if params["state"] == "absent":
            return release(module, lock)
        changed, view = lock.acquire(break_lock=params["break_lock"], check_mode=module.check_mode)
        result = dict(changed=changed, lease=view)
        if params["keep"] and not module.check_mode:
            result["keeper"] = keep(module, lock)
        return result
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
        keep=dict(type="bool", default=False),
        keep_max_run=dict(type="int", default=86400),
    ), names={"name": "name", "namespace": "namespace"}, numbers={"keep_max_run": {"minimum": 1}},
        supports_check_mode=True)
    if module.params["duration"] < 10:
        module.fail_json(msg="duration must be at least 10 seconds, got %s" % module.params["duration"])
    module.run(take_or_release)


if __name__ == "__main__":
    main()
