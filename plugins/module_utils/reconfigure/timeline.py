# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Observers of a rollout.Rollout: the engine tells its observer each named step and each node's start, fresh
plan and end. ``Observer`` hears nothing; ``Timeline`` (attached by mig_rollout) records where a rollout's wall
time went: the result's ``timeline`` and each row's ``started_s``, ``finished_s`` and ``overhead_s``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

# The engine's steps whose seconds the timeline reports, under these names; ``prepare_s`` is from the start to the
# first of them.
STEP_FIGURES = (("list pods", "pods_listed_s"), ("run nodes", "nodes_s"), ("follow pods", "follow_s"),
                ("finish", "finish_s"))


class Observer(object):
    """What a rollout tells its observer. This one keeps nothing."""

    def step_started(self, name):
        pass

    def step_finished(self, name):
        pass

    def node_started(self, name):
        pass

    def node_planned(self, name):
        pass

    def node_finished(self, row):
        pass

    def add_to(self, result):
        pass


class Timeline(Observer):
    """Seconds since ``t0`` (time.monotonic() when the module started): of the steps in STEP_FIGURES, of each
    node's slot in the window (``started_s`` / ``finished_s``), and per node the time in its slot outside drain +
    apply + verify (``overhead_s``: ``plan``, the fresh read and plan; ``around_steps``, the rest)."""

    def __init__(self, t0=None, clock=time.monotonic):
        self.clock = clock
        self.t0 = clock() if t0 is None else t0
        self.steps = {}
        self.started = {}
        self.planned = {}
        self.lock = threading.Lock()

    def step_started(self, name):
        self.steps[name] = [self.clock(), None]

    def step_finished(self, name):
        self.steps[name][1] = self.clock()

    def node_started(self, name):
        with self.lock:
            self.started[name] = self.clock()

    def node_planned(self, name):
        with self.lock:
            self.planned[name] = self.clock() - self.started[name]

    def node_finished(self, row):
        now = self.clock()
        with self.lock:
            started = self.started.get(row["node"], now)
            planned = self.planned.get(row["node"])
        row.update(started_s=round(started - self.t0, 3), finished_s=round(now - self.t0, 3))
        if planned is not None:
            row["overhead_s"] = {"plan": round(planned, 3), "around_steps": round(
                row.get("duration_s", 0.0) - sum(row.get("timings", {}).values()), 3)}

    def figures(self):
        out = {}
        starts = [self.steps[name][0] for name, _key in STEP_FIGURES if name in self.steps]
        out["prepare_s"] = round((min(starts) if starts else self.clock()) - self.t0, 3)
        for name, key in STEP_FIGURES:  # 0 for a step that did not run (no progress record: nothing to finish)
            start, end = self.steps.get(name, (None, None))
            out[key] = round(end - start, 3) if start is not None and end is not None else 0.0
        return out

    def add_to(self, result):
        result["timeline"] = self.figures()
