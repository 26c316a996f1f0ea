# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Applying a MIG plan to one host's GPUs through an open NVML session (mig_apply's act step).

The hardware verbs (mode, create, destroy) live on ``session.NvmlSession``; this module orders them per
GPU, rolls a GPU back when a step fails, and says which GPUs ended in which layout.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml.session import NvmlError


class ApplyError(NvmlError):
    """Applying failed on one GPU. ``states`` maps every GPU index to ``old`` (untouched or rolled
    back), ``new`` (target applied), ``pending-reset`` or ``partial`` (rollback failed too)."""

    def __init__(self, message, states):
        super(ApplyError, self).__init__(message)
        self.states = states


def holders(plan, hardware):
    """Processes that the plan would disturb: any process on a GPU whose MIG mode changes, else
    processes on GPU instances that would be destroyed. [{gpu, pid, name, gpu_instance_id}]"""
    by_index = dict((g["index"], g) for g in hardware["gpus"])
    found = []
    for entry in plan["gpus"]:
        if not entry["changed"]:
            continue
        gpu = by_index[entry["index"]]
        whole = entry.get("mode_write_required") or entry.get("mode_change_required") or not entry["mig_enabled"]
        doomed = set(i.get("id") for i in entry["destroy"])
        for proc in gpu.get("processes") or []:
            if whole or proc.get("gpu_instance_id") is None or proc.get("gpu_instance_id") in doomed:
                found.append({"gpu": entry["index"], "pid": proc["pid"], "name": proc.get("name"),
                              "gpu_instance_id": proc.get("gpu_instance_id")})
    return found


# The action lines, shared by the real run (apply_plan) and check mode (planned_actions).
def _destroyed(index, item):
    return "GPU %d: destroyed %s at %d:%d" % (index, item["profile"], item["start"], item["size"])


def _created(index, item):
    return "GPU %d: created %s at %d:%d" % (index, item["profile"], item["start"], item["size"])


def _mode_requested(index, enabled):
    return "GPU %d: MIG mode %s requested" % (index, "on" if enabled else "off")


def _waits_for_reset(index, enabled):
    return "GPU %d: MIG mode %s waits for a GPU reset or reboot" % (index, "on" if enabled else "off")


def planned_actions(plan):
    """The actions apply_plan takes for ``plan``, in its order, assuming a MIG mode write takes effect at once
    (when it waits for a reset, the real run stops that GPU after the mode line). Check mode's answer."""
    actions = []
    for entry in plan["gpus"]:
        if not entry["changed"]:
            continue
        index = entry["index"]
        if not entry["mig_enabled"]:
            actions.extend(_destroyed(index, item) for item in entry["destroy"])
            if entry.get("mode_write_required"):
                actions.append(_mode_requested(index, False))
            elif entry.get("reset_pending"):
                actions.append(_waits_for_reset(index, False))
            continue
        if entry.get("mode_write_required"):
            actions.append(_mode_requested(index, True))
        elif entry.get("reset_pending"):
            actions.append(_waits_for_reset(index, True))
            continue
        actions.extend(_destroyed(index, item) for item in entry["destroy"])
        actions.extend(_created(index, item) for item in entry["create"])
    return actions


def _profile(gpu, name):
    for profile in gpu.get("profiles") or []:
        if profile["name"] == name:
            return profile
    raise NvmlError("GPU %d (%s): profile %s is not in the hardware's profile table" % (gpu["index"], gpu["name"], name))


def _rollback(session, index, gpu, created, destroyed):
    """Undo one GPU's layout steps; True when the old layout is back."""
    ok = True
    for gi_id in reversed(created):
        try:
            session.destroy_instance(index, gi_id)
        except NvmlError:
            ok = False
    for instance in destroyed:
        try:
            session.create_instance(index, _profile(gpu, instance["profile"]), instance["start"], instance["size"])
        except NvmlError:
            ok = False
    return ok


def _apply_layout(session, entry, gpu, actions):
    """Destroy then create GPU instances as planned; on failure roll back and raise (ok, error)."""
    index = entry["index"]
    created, destroyed = [], []
    try:
        for instance in entry["destroy"]:
            session.destroy_instance(index, instance["id"])
            destroyed.append(instance)
            actions.append(_destroyed(index, instance))
        for item in entry["create"]:
            created.append(session.create_instance(index, _profile(gpu, item["profile"]), item["start"], item["size"]))
            actions.append(_created(index, item))
    except NvmlError as exc:
        return _rollback(session, index, gpu, created, destroyed), exc
    return True, None


def apply_plan(session, plan, hardware):
    """Apply a feasible plan GPU by GPU through ``session`` (an NvmlSession).

    Order per GPU: disabling MIG destroys instances first, then switches the mode; enabling switches
    the mode first (a mode that stays pending needs a GPU reset or reboot: that GPU is reported
    ``pending-reset`` and its instances wait for the next run); then instances are destroyed and
    created with explicit placements. A failure rolls that GPU back and stops; ApplyError says which
    GPUs are in their old and which in their new layout.
    Returns {"states": {index: state}, "actions": [...], "reset_required": [indices]}.
    """
    by_index = dict((g["index"], g) for g in hardware["gpus"])
    states = dict((e["index"], "old" if e["changed"] else "unchanged") for e in plan["gpus"])
    actions, reset_required = [], []
    for entry in plan["gpus"]:
        if not entry["changed"]:
            continue
        index, gpu = entry["index"], by_index[entry["index"]]
        if not entry["mig_enabled"]:
            ok, error = _apply_layout(session, dict(entry, create=[]), gpu, actions)
            current = entry["current_mig_enabled"]
            if error is None and entry.get("mode_write_required"):
                try:
                    current, _pending = session.set_mig_mode(index, False)
                    actions.append(_mode_requested(index, False))
                except NvmlError as exc:
                    ok, error = _rollback(session, index, gpu, [], entry["destroy"]), exc
            if error is not None:
                states[index] = "old" if ok else "partial"
                raise ApplyError(str(error), states)
            states[index] = "pending-reset" if current else "new"
            if current:
                reset_required.append(index)
                if not entry.get("mode_write_required"):
                    actions.append(_waits_for_reset(index, False))
            continue
        if entry.get("mode_write_required") or entry.get("mode_change_required"):
            current = entry["current_mig_enabled"]
            if entry.get("mode_write_required"):
                try:
                    current, _pending = session.set_mig_mode(index, True)
                except NvmlError as exc:
                    raise ApplyError(str(exc), states)
                actions.append(_mode_requested(index, True))
            if not current:
                states[index] = "pending-reset"
                reset_required.append(index)
                if not entry.get("mode_write_required"):
                    actions.append(_waits_for_reset(index, True))
                continue
        ok, error = _apply_layout(session, entry, gpu, actions)
        if error is not None:
            states[index] = "old" if ok else "partial"
            raise ApplyError(str(error), states)
        states[index] = "new"
    return {"states": states, "actions": actions, "reset_required": reset_required}
