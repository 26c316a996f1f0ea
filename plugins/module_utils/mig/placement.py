# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Placement solver for one GPU: does a multiset of GPU-instance profiles fit, where, and in which
order can it be created when the driver picks placements itself?

Model: a GPU has ``memory_slices`` memory slices (8 on A100/H100/H200/B200, 4 on A30). Each profile
lists its possible placements ``{start, size}`` in memory slices (NVML
nvmlDeviceGetGpuInstancePossiblePlacements / ``nvidia-smi mig -lgipp``, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/concepts.html). Instances
may not share a memory slice, their compute slices may not exceed ``compute_slices``, and a profile
may not exceed its ``instance_count``.

Creation order: mig-parted calls CreateGpuInstance without a placement (NVIDIA/mig-parted pkg/mig/config/config.go), so the
driver chooses. NVIDIA documents that on A100 ``-cgi 19,19,14,9`` fails while ``9,19,14,19``
succeeds (MIG guide, getting started). A driver that takes the free placement with the highest
start explains both outcomes; a lowest-start driver would make the first succeed. We therefore
model the driver as highest-start-first (inference from that example, not documented) and return an
order that succeeds under that model, largest profiles first when several do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import itertools

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.profiles import count_problem, gpu_instance_profile

Solution = collections.namedtuple("Solution", ["feasible", "placements", "creation_order", "reason"])


class PlacementInputError(PlanningError):
    """The request names a profile the table lacks or a bad count (callers validate names first)."""


def _table(profile_table):
    """Accept a model dict (with ``profiles``) or a bare list of profile dicts."""
    if isinstance(profile_table, dict):
        profiles = profile_table.get("profiles", [])
        compute = profile_table.get("compute_slices")
        memory = profile_table.get("memory_slices")
    else:
        profiles, compute, memory = list(profile_table), None, None
    by_name = _Profiles()
    for profile in profiles:
        by_name[profile["name"]] = profile
    if memory is None:
        memory = max([p["start"] + p["size"] for prof in profiles for p in prof.get("placements", [])] or [0])
    if compute is None:
        compute = max([prof.get("slices", 0) for prof in profiles] or [0])
    return by_name, compute, memory


def _mask(start, size):
    return ((1 << size) - 1) << start


def _size_key(profile):
    return (-profile["memory_slices"] if "memory_slices" in profile else -max(
        [p["size"] for p in profile.get("placements", [])] or [0]), -profile.get("slices", 0))


class _Profiles(dict):
    """Profiles by name; a compute-instance profile (``1c.3g.40gb``) takes the place of its GPU instance
    (``3g.40gb``): one GPU instance with one compute instance of fewer slices, as mig-parted creates it."""

    @staticmethod
    def _gi_name(name):
        try:
            return gpu_instance_profile(name)
        except PlanningError:
            return None

    def __contains__(self, name):
        return dict.__contains__(self, name) or dict.__contains__(self, self._gi_name(name))

    def __missing__(self, name):
        gi_name = self._gi_name(name)
        if not dict.__contains__(self, gi_name):
            raise KeyError(name)
        self[name] = dict(self[gi_name], name=name)
        return self[name]


def _clean_request(by_name, requested):
    request = collections.OrderedDict()
    for name in sorted(requested or {}):
        count = requested[name]
        problem = count_problem(count)
        if problem:
            raise PlacementInputError("MIG profile '%s': %s" % (name, problem))
        if name not in by_name:
            raise PlacementInputError(
                "'%s' is not a profile of this GPU (profiles: %s)" % (name, ", ".join(sorted(by_name)))
            )
        if count:
            request[name] = count
    return request


def _occupied(fixed):
    mask = 0
    for item in fixed or []:
        mask |= _mask(item["start"], item["size"])
    return mask


def _fits(by_name, request, compute_slices, memory_slices, fixed):
    """Budget checks with a reason naming the first violated limit, or None."""
    for name, count in request.items():
        limit = by_name[name].get("instance_count")
        if limit is not None and count > limit:
            return "%d x %s exceeds its maximum of %d per GPU" % (count, name, limit)
    used_compute = sum(by_name[item["profile"]].get("slices", 0) for item in fixed or [] if item["profile"] in by_name)
    need_compute = sum(by_name[name].get("slices", 0) * count for name, count in request.items()) + used_compute
    if need_compute > compute_slices:
        return "%s needs %d compute slices, the GPU has %d" % (describe(request), need_compute, compute_slices)
    need_memory = sum(min(p["size"] for p in by_name[name]["placements"]) * count
                      for name, count in request.items() if by_name[name].get("placements"))
    need_memory += sum(item["size"] for item in fixed or [])
    if need_memory > memory_slices:
        return "%s needs %d memory slices, the GPU has %d" % (describe(request), need_memory, memory_slices)
    return None


def _search(by_name, items, occupied):
    """Depth-first assignment of a placement to each instance; identical profiles take increasing
    starts so symmetric assignments are not revisited."""
    result = []

    def place(position, mask, last_start):
        if position == len(items):
            return True
        name = items[position]
        lower = last_start if position > 0 and items[position - 1] == name else -1
        for placement in by_name[name]["placements"]:
            start, size = placement["start"], placement["size"]
            bits = _mask(start, size)
            if start <= lower or mask & bits:
                continue
            result.append({"profile": name, "start": start, "size": size})
            if place(position + 1, mask | bits, start):
                return True
            result.pop()
        return False

    return result if place(0, occupied, -1) else None


def simulate_driver(profile_table, order, fixed=None):
    """Placements the modelled driver (highest free start) picks when creating ``order`` in turn;
    None when one creation would fail with Insufficient Resources."""
    by_name, _compute, _memory = _table(profile_table)
    mask = _occupied(fixed)
    placements = []
    for name in order:
        candidates = sorted(by_name[name]["placements"], key=lambda p: -p["start"])
        for placement in candidates:
            bits = _mask(placement["start"], placement["size"])
            if not mask & bits:
                mask |= bits
                placements.append({"profile": name, "start": placement["start"], "size": placement["size"]})
                break
        else:
            return None
    return placements


def _unique_permutations(items):
    """Distinct orderings of a multiset, in lexicographic order of ``items``' positions."""
    seen = set()
    for perm in itertools.permutations(items):
        if perm not in seen:
            seen.add(perm)
            yield list(perm)


def creation_order(profile_table, requested, fixed=None):
    """(order, placements) under the driver model, largest first when that works; (None, None) if
    no order works. ``requested`` is {profile: count}."""
    by_name, _compute, _memory = _table(profile_table)
    items = []
    for name in sorted(requested, key=lambda n: (_size_key(by_name[n]), n)):
        items.extend([name] * requested[name])
    # GPUs hold at most 8 instances, so trying every distinct ordering stays small (<= 8! / repeats).
    for order in _unique_permutations(items):
        placements = simulate_driver(profile_table, order, fixed)
        if placements is not None:
            return order, placements
    return None, None


def solve(profile_table, requested, fixed=None):
    """Find placements for ``requested`` ({profile: count}) on one GPU.

    ``profile_table``: a model dict (catalog or live, with ``profiles``, ``compute_slices``,
    ``memory_slices``) or a list of profile dicts. ``fixed``: instances that stay where they are
    ([{profile, start, size}]). Returns Solution(feasible, placements, creation_order, reason);
    placements are sorted by start, creation_order lists profile names.
    """
    by_name, compute_slices, memory_slices = _table(profile_table)
    request = _clean_request(by_name, requested)
    if not request:
        return Solution(True, [], [], None)
    reason = _fits(by_name, request, compute_slices, memory_slices, fixed)
    if reason:
        return Solution(False, [], [], reason)
    items = []
    for name in sorted(request, key=lambda n: (len(by_name[n]["placements"]), _size_key(by_name[n]), n)):
        items.extend([name] * request[name])
    placements = _search(by_name, items, _occupied(fixed))
    if placements is None:
        return Solution(False, [], [], "no placement of %s fits the GPU's %d memory slices%s" % (
            describe(request), memory_slices, " beside the instances kept" if fixed else ""))
    order, driver_placements = creation_order(profile_table, request, fixed)
    if order is not None:
        placements = driver_placements
    else:
        # Feasible with explicit placements only (CreateGpuInstanceWithPlacement); say so.
        order = [p["profile"] for p in placements]
    return Solution(True, sorted(placements, key=lambda p: (p["start"], p["profile"])), order, None)


def describe(request):
    """``2 x 1g.5gb + 1 x 3g.20gb`` for messages."""
    return " + ".join("%d x %s" % (count, name) for name, count in sorted(request.items()) if count) or "nothing"


def alternatives(profile_table, requested, limit=3, fixed=None):
    """Feasible layouts nearest to an infeasible ``requested``: fewest instances removed first,
    then each profile's own maximum. Returns a list of {profile: count} dicts."""
    by_name, _compute, _memory = _table(profile_table)
    request = _clean_request(by_name, requested)
    names = sorted(request)
    found = []
    frontier = [tuple(request[n] for n in names)]
    seen = set(frontier)
    while frontier and len(found) < limit:
        next_frontier = []
        for counts in frontier:
            candidate = dict((n, c) for n, c in zip(names, counts) if c)
            if candidate and solve(profile_table, candidate, fixed).feasible:
                found.append(candidate)
                continue
            for i, count in enumerate(counts):
                if count:
                    reduced = counts[:i] + (count - 1,) + counts[i + 1:]
                    if reduced not in seen:
                        seen.add(reduced)
                        next_frontier.append(reduced)
        frontier = next_frontier
    return found[:limit]
