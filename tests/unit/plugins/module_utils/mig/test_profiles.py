"""Profile name grammar and name normalisation."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import profiles
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import ProfileNameError


@pytest.mark.parametrize("name, expected", [
    ("1g.10gb", (1, 1, 10, (), ())),
    ("1c.3g.20gb", (1, 3, 20, (), ())),
    ("1g.5gb+me", (1, 1, 5, ("me",), ())),
    ("1g.24gb+me.all", (1, 1, 24, ("me.all",), ())),
    ("2g.48gb+gfx", (2, 2, 48, ("gfx",), ())),
    ("1g.24gb-me", (1, 1, 24, (), ("me",))),
    ("7g.141gb", (7, 7, 141, (), ())),
])
def test_parse_and_format_round_trip(name, expected):
    parsed = profiles.parse_profile(name)
    assert tuple(parsed) == expected
    assert profiles.format_profile(parsed) == name


@pytest.mark.parametrize("bad", ["1g.10", "g.10gb", "1g.10gb+foo", "4c.3g.20gb", "1G.10GB", "", "0g.5gb", 7])
def test_bad_names_are_quoted(bad):
    with pytest.raises(ProfileNameError) as err:
        profiles.parse_profile(bad)
    assert repr(bad).strip("'") in str(err.value) or str(bad) in str(err.value)


@pytest.mark.parametrize("text, canonical", [
    ("1g.5gb.me", "1g.5gb+me"),
    ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me"),
    ("MIG 1g.18gb+me", "1g.18gb+me"),
    ("all-1g.24gb.me.all", "1g.24gb+me.all"),
    ("all-1g.24gb-me", "1g.24gb-me"),
    (" 3g.71gb ", "3g.71gb"),
])
def test_canonical_names(text, canonical):
    assert profiles.canonical_profile_name(text) == canonical


def test_config_and_resource_names():
    assert profiles.profile_to_config_suffix("1g.5gb+me") == "1g.5gb.me"
    assert profiles.config_name_for("1g.24gb-me") == "all-1g.24gb-me"
    assert profiles.resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert profiles.resource_name("3g.40gb") == "nvidia.com/mig-3g.40gb"
    assert profiles.is_base_profile("2g.35gb") and not profiles.is_base_profile("1g.18gb+me")
    assert not profiles.is_base_profile("1c.2g.35gb")


@pytest.mark.parametrize("memory_mb, slices, name", [
    # H200 (143771 MiB) memory sizes as NVML reports them (h200-nvml-reading.json) -> nvidia-smi names
    (16384, 1, "1g.18gb"), (33280, 1, "1g.35gb"), (33280, 2, "2g.35gb"), (71424, 3, "3g.71gb"),
    (71424, 4, "4g.71gb"), (143360, 7, "7g.141gb"),
])
def test_name_from_nvml_matches_real_h200(memory_mb, slices, name):
    assert profiles.name_from_nvml(memory_mb, slices, 143771) == name
