# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Whether an installed GPU Operator may be upgraded now (pure logic; the module reads the cluster).

An upgrade replaces the operator and restarts its operands, MIG Manager included. It is refused while
MIG Manager is in the middle of a change on a node (``nvidia.com/mig.config.state`` ``pending`` or
``rebooting``), while a MIG rollout holds its Lease (``reconfigure/lock.py``), and while the ClusterPolicy
is not ready (``operator/status.py`` ``assess``): NVIDIA's upgrade guide expects a healthy operator
(https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/upgrade.html).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import is_expired, lease_view

LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_STATE = "nvidia.com/mig.config.state"
BLOCKING_MIG_STATES = ("pending", "rebooting")


def mig_blockers(nodes):
    """One line per node whose MIG Manager is mid-change."""
    found = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        labels = node["metadata"].get("labels") or {}
        state = labels.get(LABEL_MIG_STATE)
        if state in BLOCKING_MIG_STATES:
            found.append("node %s: %s=%s (applying %s=%s)" % (
                node["metadata"]["name"], LABEL_MIG_STATE, state, LABEL_MIG_CONFIG, labels.get(LABEL_MIG_CONFIG, "?")))
    return found


def lease_blocker(lease, namespace, name, now=None):
    """A line naming the holder when a live rollout Lease exists, else None (absent or expired)."""
    if lease is None or is_expired(lease, now):
        return None
    view = lease_view(lease)
    return "MIG rollout lock %s/%s held by %s (%s), renewed %s, expires %s" % (
        namespace, name, view["holder"], view["rollout"] or "no description", view["renewed"], view["expires"])


def policy_blockers(assessment):
    """The not-ready lines of operator/status.py ``assess``, prefixed so they read as upgrade blockers."""
    if assessment["ready"]:
        return []
    return ["operator not ready: %s" % line for line in assessment["not_ready"]]


def upgrade_blockers(nodes, lease, assessment, lease_namespace, lease_name, now=None):
    """Everything that forbids an upgrade now, MIG-changing nodes first; empty when it may proceed."""
    blockers = mig_blockers(nodes)
    held = lease_blocker(lease, lease_namespace, lease_name, now)
    if held:
        blockers.append(held)
    return blockers + policy_blockers(assessment)
