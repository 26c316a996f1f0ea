# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Cut the nodes to change into the canary and the batches of a rollout (pure).

``max_unavailable`` is a count (``2``) or a percentage of the targeted nodes (``"25%"``), rounded up and at
least one node, as Kubernetes rounds a Deployment's maxSurge.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

_COUNT = re.compile(r"^\s*([0-9]+)\s*$")
_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


class BatchError(ValueError):
    """An option that cannot size a batch; the message names the option."""


def batch_size(max_unavailable, total, option="max_unavailable"):
    """How many nodes may be in progress at once: a count as given, a percentage of ``total`` rounded up
    (never below one node). A count below 1, a percentage outside 1%-100% or anything else is a BatchError."""
    if isinstance(max_unavailable, bool):
        raise BatchError("%s must be a count (2) or a percentage from 1%% to 100%% (\"25%%\"), got %r"
                         % (option, max_unavailable))
    if isinstance(max_unavailable, int):
        text = str(max_unavailable)
    else:
        text = str(max_unavailable if max_unavailable is not None else "")
    count = _COUNT.match(text)
    if count:
        if int(count.group(1)) < 1:
            raise BatchError("%s must be at least 1, got %s" % (option, text.strip()))
        return int(count.group(1))
    percent = _PERCENT.match(text)
    if percent:
        value = float(percent.group(1))
        if not 0 < value <= 100:
            raise BatchError("%s as a percentage must be from 1%% to 100%%, got %s" % (option, text.strip()))
        return max(1, int(math.ceil(value * total / 100.0 - 1e-9)))
    raise BatchError("%s must be a count (2) or a percentage from 1%% to 100%% (\"25%%\"), got %r"
                     % (option, max_unavailable))


def cut(to_change, size, canary=True, hold=False):
    """The steps of a rollout over ``to_change`` (in order): the first node alone when ``canary``, then the rest
    - in batches of ``size`` when ``hold`` (each batch held cordoned until its hardware is read), else as one
    step that mig_rollout runs in a sliding window of ``size``. Returns a list of node lists."""
    to_change = list(to_change)
    head = to_change[:1] if canary and to_change else []
    rest = to_change[len(head):]
    if hold:
        steps = [rest[i:i + size] for i in range(0, len(rest), size)]
    else:
        steps = [rest] if rest else []
    return ([head] if head else []) + steps
