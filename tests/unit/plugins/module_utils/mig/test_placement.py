"""Placement solver against brute force on the 7-slice (8 memory slices) and 4-slice geometries."""

import collections
import itertools

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, placement

GEOMETRIES = ["NVIDIA A100-SXM4-40GB", "NVIDIA H200", "NVIDIA A30"]


def _bits(start, size):
    return ((1 << size) - 1) << start


def brute_force_feasible(model):
    """Every multiset of profiles that some set of pairwise disjoint (profile, placement) choices
    realises within the compute budget and per-profile instance caps. Independent of the solver:
    it walks all subsets of candidate placements."""
    candidates = [(p["name"], pl["start"], pl["size"], p["slices"]) for p in model["profiles"] for pl in p["placements"]]
    caps = dict((p["name"], p["instance_count"]) for p in model["profiles"])
    feasible = set()

    def walk(i, mask, compute, counts):
        key = tuple(sorted(counts.items()))
        if all(counts[n] <= caps[n] for n in counts) and compute <= model["compute_slices"]:
            feasible.add(key)
        for j in range(i, len(candidates)):
            name, start, size, slices = candidates[j]
            bits = _bits(start, size)
            if mask & bits or compute + slices > model["compute_slices"] or counts[name] + 1 > caps[name]:
                continue
            counts[name] += 1
            walk(j + 1, mask | bits, compute + slices, counts)
            counts[name] -= 1
            if not counts[name]:
                del counts[name]

    walk(0, 0, 0, collections.Counter())
    return feasible


def _all_requests(model):
    names = [p["name"] for p in model["profiles"]]
    ranges = [range(p["instance_count"] + 2) for p in model["profiles"]]  # one past each cap too
    for counts in itertools.product(*ranges):
        yield dict((n, c) for n, c in zip(names, counts) if c)


@pytest.mark.parametrize("model_name", GEOMETRIES)
def test_solver_matches_brute_force(model_name):
    model = catalog.get_model(model_name)
    truth = brute_force_feasible(model)
    allowed = dict((p["name"], set((pl["start"], pl["size"]) for pl in p["placements"])) for p in model["profiles"])
    checked = feasible_seen = 0
    for request in _all_requests(model):
        solution = placement.solve(model, request)
        expected = tuple(sorted(request.items())) in truth
        assert solution.feasible == expected, (request, solution)
        checked += 1
        if not solution.feasible:
            assert solution.reason
            continue
        feasible_seen += 1
        # placements realise exactly the request, on allowed, disjoint slots
        assert collections.Counter(p["profile"] for p in solution.placements) == collections.Counter(request)
        mask = 0
        for item in solution.placements:
            assert (item["start"], item["size"]) in allowed[item["profile"]]
            assert not mask & _bits(item["start"], item["size"])
            mask |= _bits(item["start"], item["size"])
        # the creation order works when the (modelled) driver chooses placements itself
        driven = placement.simulate_driver(model, solution.creation_order)
        assert driven is not None, (request, solution.creation_order)
        assert sorted((p["profile"], p["start"]) for p in driven) == sorted(
            (p["profile"], p["start"]) for p in solution.placements)
    assert feasible_seen == len(truth)
    assert checked > feasible_seen > 10


def test_a100_documented_order():
    """NVIDIA's MIG guide: on A100 -cgi 19,19,14,9 fails, 9,19,14,19 succeeds."""
    model = catalog.get_model("NVIDIA A100-SXM4-40GB")
    assert placement.simulate_driver(model, ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]) is None
    assert placement.simulate_driver(model, ["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"]) is not None
    solution = placement.solve(model, {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})
    assert solution.feasible
    assert solution.creation_order[0] == "3g.20gb"


def test_budget_reasons_name_the_limit():
    model = catalog.get_model("NVIDIA H200")
    assert "maximum of 1" in placement.solve(model, {"1g.18gb+me": 2}).reason
    assert "compute slices" in placement.solve(model, {"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1}).reason
    reason = placement.solve(model, {"3g.71gb": 1, "1g.35gb": 3}).reason
    assert "1g.35gb" in reason and "3g.71gb" in reason


def test_fixed_instances_are_respected():
    model = catalog.get_model("NVIDIA H200")
    fixed = [{"profile": "3g.71gb", "start": 0, "size": 4}]
    solution = placement.solve(model, {"3g.71gb": 1}, fixed=fixed)
    assert solution.feasible and solution.placements == [{"profile": "3g.71gb", "start": 4, "size": 4}]
    assert not placement.solve(model, {"4g.71gb": 1}, fixed=fixed).feasible


def test_alternatives_are_feasible_and_nearest():
    model = catalog.get_model("NVIDIA A100-SXM4-40GB")
    alts = placement.alternatives(model, {"3g.20gb": 2, "2g.10gb": 1})
    assert alts == [{"3g.20gb": 2}, {"2g.10gb": 1, "3g.20gb": 1}]
    for alt in alts:
        assert placement.solve(model, alt).feasible


def test_unknown_profile_and_bad_count_raise():
    model = catalog.get_model("NVIDIA H200")
    with pytest.raises(placement.PlacementInputError, match="1g.10gb"):
        placement.solve(model, {"1g.10gb": 1})
    with pytest.raises(placement.PlacementInputError, match="whole number"):
        placement.solve(model, {"1g.18gb": -1})


def test_empty_request_is_feasible():
    assert placement.solve(catalog.get_model("NVIDIA A30"), {}).feasible
