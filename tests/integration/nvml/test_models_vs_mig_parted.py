"""The collection against NVIDIA's mig-parted v0.15.0 on every simulated GPU model (one per PCI id of NVIDIA's
v26.7.0 default MIG config): the catalog recognises each GPU by its PCI id and NVML name, and the config the
collection generates for a node of that GPU (mig/resolve.py generate_config, from the GPU read through NVML
by gpu_info's reader, and from the catalog alone) is the config ``nvidia-mig-parted generate-config`` writes
for the same simulated host (NVIDIA/mig-parted pkg/mig/builder)."""

import os
import textwrap

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, plan, resolve
from tests.testbed.gpusim import hoststate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MIG_MODELS = sorted(k for k, m in hoststate.catalog()["models"].items() if m["mig_capable"])

READ = """
import sys
sys.path[:0] = [%r, %r]
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.nvml import session
emit(session.read_host(instances=False, processes=False)["gpus"])
""" % (ROOT, os.path.join(ROOT, ".collections"))


def _configs(config):
    """{name: [entries]} with each entry as a plain dict (key order does not matter to mig-parted). An entry without
    mig-devices reads as ``{}``: mig-parted's all-disabled has none, and its YAML writes the nil map as ``{}``
    (``mig-devices`` has no omitempty in NVIDIA/mig-parted api/spec/v1/spec.go)."""
    return {name: [dict({"mig-devices": {}}, **entry) for entry in entries] for name, entries in config["mig-configs"].items()}


@pytest.mark.parametrize("model", MIG_MODELS)
def test_generated_config_is_nvidias_for_every_simulated_model(model, sim_host, mig_parted):
    host = sim_host(model, 2)
    proc = host.run([mig_parted, "generate-config"])
    assert proc.returncode == 0, proc.stderr
    nvidia = _configs(yaml.safe_load(proc.stdout))
    (gpu, _second) = host.run_python(textwrap.dedent(READ)).result
    # The catalog knows the GPU by PCI id and by NVML name, and names it as NVML does.
    known = catalog.get_model(pci_device_id=gpu["pci_device_id"])
    assert known is not None, (model, gpu["pci_device_id"])
    assert catalog.get_model(name=gpu["name"])["name"] == known["name"], (model, gpu["name"])
    assert catalog.nvml_name(pci_device_id=gpu["pci_device_id"]) == gpu["name"], model
    live = resolve.generate_config([plan.model_for_gpu(gpu)])
    assert _configs(live) == nvidia, model
    from_catalog = resolve.generate_config([dict(known, pci_device_ids=[catalog.normalize_pci_device_id(gpu["pci_device_id"])])])
    assert _configs(from_catalog) == nvidia, model
