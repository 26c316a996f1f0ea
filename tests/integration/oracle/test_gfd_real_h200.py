"""NVIDIA's GFD on the simulated H200 writes what it wrote on a real H200.

tests/fixtures/gfd-real-h200/ holds the labels NVIDIA's gpu-feature-discovery v0.18.0 wrote on the project's lent
H200 (MIG off, driver 580.159.04; read-only --oneshot runs, see that folder's README). NVIDIA's GFD v0.20.0 (the
version GPU Operator v26.7.0 ships; built by tests/testbed/build-nvidia.sh), run here on a simulated one-GPU H200
host through the simulated libnvidia-ml.so.1, must write the same labels: this checks the simulator against the real
hardware, where the GFD matrix checks the agents and the collection against the binary.

Excluded: ``nvidia.com/gpu.mode``, which GFD reads from the PCI class in sysfs, not from NVML. The simulated host has
no sysfs, so GFD writes ``unknown`` here, while the real host gave ``compute``.
"""

from pathlib import Path

import pytest

from tests.testbed import oracle
from tests.testbed.gpusim import hoststate, simhost

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gfd-real-h200"
EXCLUDED = {"nvidia.com/gpu.mode"}
CASES = {  # fixture file -> (MIG strategy, device-plugin config file)
    "gfd-none.labels": ("none", None),
    "gfd-single.labels": ("single", None),
    "gfd-mixed.labels": ("mixed", None),
    "gfd-none-ts4.labels": ("none", "time-slicing-4.yaml"),
    "gfd-none-ts4rename.labels": ("none", "time-slicing-4-rename.yaml"),
}


@pytest.fixture(scope="module")
def simulated_h200(tmp_path_factory):
    lib = simhost.library_dir()
    state = tmp_path_factory.mktemp("h200") / "host.state"
    hoststate.create_host(state, "H200", 1, seed=7)
    return state, lib


@pytest.mark.parametrize("fixture", sorted(CASES))
def test_simulated_h200_gets_the_labels_a_real_h200_got(fixture, simulated_h200):
    state, lib = simulated_h200
    strategy, config = CASES[fixture]
    real = oracle.parse_labels((FIXTURES / fixture).read_text())
    assert len(real) > 20, "fixture %s looks truncated" % fixture
    simulated = oracle.run_gfd(state, lib, strategy, (FIXTURES / config).read_text() if config else None)
    differences = ["%s: real H200 %r, simulated H200 %r" % (key, real.get(key), simulated.get(key))
                   for key in sorted((set(real) | set(simulated)) - EXCLUDED) if real.get(key) != simulated.get(key)]
    assert not differences, "\n".join(differences)
