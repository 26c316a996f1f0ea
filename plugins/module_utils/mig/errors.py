# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Errors of the planning library; catch PlanningError to catch them all."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class PlanningError(ValueError):
    """Base: bad input to the planner. Messages name the node/GPU, profile, config or field."""


class ProfileNameError(PlanningError):
    """A string that is not a MIG profile name; the message quotes it."""


class UnknownModelError(PlanningError):
    """No catalog entry for a GPU name / PCI id and no live table."""


class MigConfigError(PlanningError):
    """Invalid mig-parted config; names the source, config, entry index and field."""


class UnknownConfigError(PlanningError):
    """A config name the config source does not define; names both."""

    def __init__(self, message, config_name=None, source=None, known=None):
        super(UnknownConfigError, self).__init__(message)
        self.config_name = config_name
        self.source = source
        self.known = list(known or [])


class UnknownProfileError(PlanningError):
    """A profile the GPU model does not have; carries the nearest valid alternatives."""

    def __init__(self, message, profile=None, model=None, gpu_index=None, alternatives=None):
        super(UnknownProfileError, self).__init__(message)
        self.profile = profile
        self.model = model
        self.gpu_index = gpu_index
        self.alternatives = list(alternatives or [])
