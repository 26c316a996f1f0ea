"""chart_version_change: SemVer 2 precedence between the deployed chart and the target."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.filter.chart_version_change import FilterModule


@pytest.mark.parametrize("deployed, target, change", [
    ("gpu-operator-v25.3.4", "v26.7.0", "upgrade"),
    ("gpu-operator-v26.7.0", "v25.3.4", "downgrade"),
    ("gpu-operator-v26.7.0", "v26.7.0", "same"),
    ("gpu-operator-v25.10.0", "v25.9.1", "downgrade"),       # numeric, not string, order
    ("gpu-operator-v26.7.0-rc.1", "v26.7.0", "upgrade"),     # a pre-release sorts before its release
    ("gpu-operator-v26.7.0", "v26.7.0-rc.2", "downgrade"),
    ("gpu-operator-v26.7.0-rc.2", "v26.7.0-rc.10", "upgrade"),
    ("gpu-operator-v26.7.0-rc.1", "v26.7.0-rc.1.1", "upgrade"),
    ("gpu-operator-v26.7.0-alpha", "v26.7.0-1", "downgrade"),  # numeric identifiers sort before alphanumeric ones
    ("gpu-operator-v26.7.0+build.1", "26.7.0", "same"),      # build metadata has no precedence
    ("my-fork-1.2.3", "1.2.4", "upgrade"),
    ("gpu-operator-latest", "v26.7.0", "unknown"),
    ("gpu-operator-v26.7.0", "", "unknown"),
    ("gpu-operator-v26.07.0", "v26.7.0", "unknown"),         # a leading zero is not SemVer
])
def test_semver_precedence(deployed, target, change):
    assert FilterModule().filters()["chart_version_change"](deployed, target) == change
