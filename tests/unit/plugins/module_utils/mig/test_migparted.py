"""mig-parted v1 config validation, rendering and GPU selection."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import migparted
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import MigConfigError

GOOD = """
version: v1
mig-configs:
  custom:
    - device-filter: ["0x233510DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
    - devices: all
      mig-enabled: false
  enabled-none:
    - devices: all
      mig-enabled: true
      mig-devices: {}
"""


def test_parse_render_round_trip():
    config = migparted.parse_config(GOOD, "good.yaml")
    again = migparted.parse_config(migparted.render_config(config), "rendered")
    assert again == config
    assert migparted.render_config(config).startswith("version: v1\n")


@pytest.mark.parametrize("mutate, where", [
    (lambda c: c.update(version="v2"), "version"),
    (lambda c: c.update(extra=1), "unknown field(s) extra"),
    (lambda c: c["mig-configs"].update(empty=[]), "mig-configs.empty: expected a non-empty list"),
    (lambda c: c["mig-configs"]["custom"][0].pop("devices"), "mig-configs.custom[0].devices: required"),
    (lambda c: c["mig-configs"]["custom"][0].update(devices="some"), "mig-configs.custom[0].devices"),
    (lambda c: c["mig-configs"]["custom"][0].update(devices=[-1]), "mig-configs.custom[0].devices"),
    (lambda c: c["mig-configs"]["custom"][0].update({"device-filter": "0x2335"}), "custom[0].device-filter"),
    (lambda c: c["mig-configs"]["custom"][0].update({"mig-enabled": "yes"}), "custom[0].mig-enabled"),
    (lambda c: c["mig-configs"]["custom"][0].pop("mig-devices"), "custom[0].mig-devices: required"),
    (lambda c: c["mig-configs"]["custom"][1].update({"mig-devices": {"1g.18gb": 1}}), "custom[1].mig-devices: must be empty"),
    (lambda c: c["mig-configs"]["custom"][0].update({"mig-devices": {"1g.10": 1}}), "custom[0].mig-devices: '1g.10'"),
    (lambda c: c["mig-configs"]["custom"][0].update({"mig-devices": {"1g.18gb": -2}}), "custom[0].mig-devices.1g.18gb"),
    (lambda c: c["mig-configs"]["custom"][0].update({"mig-devices": {"1g.18gb": 0}}), "every count is 0"),
    (lambda c: c["mig-configs"]["custom"][0].update(gpus=1), "custom[0]: unknown field(s) gpus"),
])
def test_errors_name_source_config_entry_and_field(mutate, where):
    config = migparted.parse_config(GOOD, "good.yaml")
    mutate(config)
    with pytest.raises(MigConfigError) as err:
        migparted.parse_config(config, "my.yaml")
    assert "my.yaml" in str(err.value)
    assert where in str(err.value)


def test_yaml_errors_and_non_mappings():
    with pytest.raises(MigConfigError, match="x.yaml is not valid YAML"):
        migparted.parse_config("version: [", "x.yaml")
    with pytest.raises(MigConfigError, match="expected a mapping"):
        migparted.parse_config("- a", "x.yaml")


def test_select_for_gpu_follows_filter_devices_and_last_match():
    config = migparted.parse_config(GOOD, "good.yaml")
    # GPU 0 of an H200: the first entry selects it, then `devices: all` (no filter) wins as the last match
    assert migparted.select_for_gpu(config, "custom", 0, "0x233510DE") == {"mig_enabled": False, "mig_devices": {}}
    config["mig-configs"]["custom"].pop()
    expected = {"mig_enabled": True, "mig_devices": {"1g.18gb": 7}}
    assert migparted.select_for_gpu(config, "custom", 1, "0x233510de") == expected
    assert migparted.select_for_gpu(config, "custom", 2, "0x233510DE") is None
    assert migparted.select_for_gpu(config, "custom", 0, "0x20B010DE") is None


def test_filter_with_subsystem_id():
    assert migparted.filter_matches("0x233510DE:0x16C110DE", "0x233510DE")
    assert migparted.filter_matches("0x233510DE:0x16C110DE", "0x233510DE", "0x16C110DE")
    assert not migparted.filter_matches("0x233510DE:0x16C110DE", "0x233510DE", "0x000010DE")
    assert migparted.filter_matches(None, None)
