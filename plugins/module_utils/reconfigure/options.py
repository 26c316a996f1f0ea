# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's options and their defaults: the one place the mig_rollout argument spec and the engine read them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Options of each node's procedure (drain, MIG step, verification, rollback), with their defaults.
DEFAULTS = {
    "operator_namespace": "gpu-operator",
    "strategy": None,
    "pod_scope": "gpu",
    "force": False,
    "delete_emptydir_data": False,
    "grace_period": None,
    "drain_timeout": 600,
    "eviction_retry_delay": 5.0,
    "apply_timeout": 900,
    "verify_timeout": 180,
    "unwedge_on_timeout": False,
    "rollback_on_failure": False,
}

# Lines of MIG Manager's log kept in a failed node's diagnostics.
LOG_LINES = 100
FOLLOW_TIMEOUT = 60
PROGRESS_INTERVAL = 2.0

LOCK_DEFAULTS = {"namespace": "gpu-operator", "name": "gpufleet-mig-rollout", "duration": 120}


def node_options(given):
    """DEFAULTS updated with the options of ``given`` that are set (None keeps the default)."""
    options = dict(DEFAULTS)
    options.update(dict((k, v) for k, v in (given or {}).items() if k in DEFAULTS and v is not None))
    options["log_lines"] = LOG_LINES if (given or {}).get("log_lines") is None else given["log_lines"]
    return options
