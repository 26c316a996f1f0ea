"""Each node's target MIG config from mig_reconfigure_profiles: the checks of the entries, the label selector
matching, the refusal of a node two entries match and the nodes no entry matches."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import targets
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.targets import TargetError

GROUPS = {"h100": ["h1", "h2"], "a100": ["a1"]}
LABELS = {"h1": {"pool": "h100"}, "h2": {"pool": "h100", "zone": "b"}, "a1": {"pool": "a100", "zone": "a"},
          "x1": {"pool": "other"}}


def refusal(profiles):
    with pytest.raises(TargetError) as exc:
        targets.check_profiles(profiles, GROUPS)
    return str(exc.value)


@pytest.mark.parametrize("profiles, message", [
    ("h100", "profiles must be a list of entries, got str"),
    (["h100"], "profiles[0] must be a dict with profile and one of group or node_selector, got str"),
    ([{"group": "h100", "profile": "all-1g.10gb", "pool": "x"}], "profiles[0] has unknown field(s) pool"),
    ([{"group": "h100"}], "profiles[0].profile must be a MIG config name (a string), got nothing"),
    ([{"group": "h100", "profile": 7}], "profiles[0].profile must be a MIG config name (a string), got int"),
    ([{"group": "a100", "profile": "all-balanced"}, {"group": "h100", "profile": " "}], "profiles[1].profile is empty"),
    ([{"group": "h100", "profile": "all 1g"}], "profiles[0].profile 'all 1g' is not a MIG config name"),
    ([{"profile": "all-balanced"}], "profiles[0] must have exactly one of group or node_selector, got neither"),
    ([{"group": "h100", "node_selector": "pool=h100", "profile": "all-balanced"}],
     "profiles[0] must have exactly one of group or node_selector, got group and node_selector"),
    ([{"group": ["h100"], "profile": "all-balanced"}], "profiles[0].group must be an inventory group name"),
    ([{"group": "h200", "profile": "all-balanced"}], "profiles[0].group: no inventory group named h200"),
    ([{"node_selector": 3, "profile": "all-balanced"}], "profiles[0].node_selector must be a label selector string"),
    ([{"node_selector": "", "profile": "all-balanced"}], "profiles[0].node_selector is empty"),
    ([{"node_selector": {}, "profile": "all-balanced"}], "profiles[0].node_selector is empty"),
    ([{"node_selector": {"pool": ["a"]}, "profile": "all-balanced"}],
     "profiles[0].node_selector.pool must be a string label value, got list"),
    ([{"node_selector": "pool==", "profile": "all-balanced"}, {"node_selector": "pool in (a", "profile": "x"}],
     "profiles[1].node_selector: cannot parse 'pool in (a'"),
    ([{"node_selector": "!pool=a", "profile": "all-balanced"}], "profiles[0].node_selector: cannot parse '!pool=a'"),
    ([{"group": "h100", "profile": "all-balanced"}] * 101, "profiles has 101 entries, at most 100"),
    ([{"node_selector": ",".join("k%d=v" % i for i in range(33)), "profile": "all-balanced"}],
     "profiles[0].node_selector has 33 requirements, at most 32"),
    ([{"node_selector": "pool=" + "a" * 5000, "profile": "all-balanced"}],
     "profiles[0].node_selector is 5005 characters long, at most 4096"),
])
def test_bad_entries_are_refused_naming_the_entry_and_the_field(profiles, message):
    assert message in refusal(profiles)


@pytest.mark.parametrize("selector, matched", [
    ("pool=h100", ["h1", "h2"]),
    ("pool==h100,zone=b", ["h2"]),
    ("pool!=h100", ["a1", "x1"]),
    ("pool in (h100, a100)", ["h1", "h2", "a1"]),
    ("pool notin (h100,a100)", ["x1"]),
    ("zone", ["h2", "a1"]),
    ("!zone", ["h1", "x1"]),
    ("pool in (a100),zone notin (b)", ["a1"]),
    ({"pool": "h100", "zone": "b"}, ["h2"]),
])
def test_node_selector_matches_as_kubernetes_does(selector, matched):
    entries = targets.check_profiles([{"node_selector": selector, "profile": "all-balanced"}], {})
    chosen, left = targets.assign(sorted(LABELS), LABELS, entries)
    assert sorted(n for n, _config in chosen) == sorted(matched)
    assert sorted(left) == sorted(set(LABELS) - set(matched))


def test_entries_win_over_the_default_and_unmatched_nodes_take_it():
    entries = targets.check_profiles([{"group": "h100", "profile": "all-1g.10gb"},
                                      {"node_selector": "pool=a100", "profile": "all-balanced"}], GROUPS)
    names = ["x1", "h1", "a1", "h2"]
    assert targets.assign(names, LABELS, entries, "all-disabled") == (
        [("x1", "all-disabled"), ("h1", "all-1g.10gb"), ("a1", "all-balanced"), ("h2", "all-1g.10gb")], [])
    # Without a default, a node no entry matches is left out, in the order given.
    assert targets.assign(names, LABELS, entries) == (
        [("h1", "all-1g.10gb"), ("a1", "all-balanced"), ("h2", "all-1g.10gb")], ["x1"])


def test_a_node_two_entries_match_is_refused_naming_the_node_and_both_entries():
    entries = targets.check_profiles([{"node_selector": "pool=a100", "profile": "all-balanced"},
                                      {"group": "h100", "profile": "all-1g.10gb"},
                                      {"node_selector": {"zone": "b"}, "profile": "all-disabled"}], GROUPS)
    with pytest.raises(TargetError) as exc:
        targets.assign(["h1", "h2"], LABELS, entries, "all-disabled")
    assert str(exc.value).startswith(
        "node h2 is matched by profiles[1] (group h100) and by profiles[2] (node_selector zone=b)")


def test_a_node_without_labels_matches_no_selector_and_groups_need_none():
    entries = targets.check_profiles([{"group": "a100", "profile": "all-balanced"},
                                      {"node_selector": "pool", "profile": "all-1g.10gb"}], GROUPS)
    assert targets.Selection(entries).needs_labels
    assert targets.Selection(entries[:1]).assign(["a1", "gone"], {}) == ([("a1", "all-balanced")], ["gone"])
    assert not targets.Selection(entries[:1]).needs_labels
    assert targets.check_profiles(None) == []
