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

import re

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import LABEL_MIG_CONFIG, LABEL_MIG_STATE
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.lock import is_expired, lease_view

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


# A Helm chart version is SemVer 2 (https://helm.sh/docs/topics/charts/#charts-and-versioning); NVIDIA's carry a
# leading "v" (v26.7.0). Helm's release status names the chart as <name>-<version>.
_SEMVER = re.compile(r"v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
                     r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?$")


def chart_version(text):
    """The SemVer precedence key of a chart version or of Helm's ``<name>-<version>``, or None if it has none."""
    text = str(text or "").strip()
    for start in [0] + [i + 1 for i, c in enumerate(text) if c == "-"]:
        match = _SEMVER.match(text[start:])
        if match:
            pre = match.group("pre")
            # SemVer 2 section 11: a pre-release sorts before its release; numeric identifiers before alphanumeric
            # ones, numerically; alphanumeric ones in ASCII order; a longer set after its prefix.
            ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else ()
            return (int(match.group("major")), int(match.group("minor")), int(match.group("patch")), 0 if pre else 1, ids)
    return None


def version_change(deployed, target):
    """'same', 'upgrade', 'downgrade' or 'unknown' (either version not SemVer) from the deployed chart to the target."""
    before, after = chart_version(deployed), chart_version(target)
    if before is None or after is None:
        return "unknown"
    if before == after:
        return "same"
    return "upgrade" if after > before else "downgrade"
