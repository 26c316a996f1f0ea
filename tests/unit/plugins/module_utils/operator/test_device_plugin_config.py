"""Device-plugin config checks that follow k8s-device-plugin v0.20.0 (the oracle corpus proves agreement with
NVIDIA's parser: tests/integration/oracle/test_device_plugin_config_corpus.py); these pin the messages."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.device_plugin_config import check_config


def mps(**block):
    return {"version": "v1", "sharing": {"mps": dict({"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}, **block)}}


def test_allocation_policy_outside_distributed_and_packed_is_refused_naming_the_field():
    problems, _warnings, effect = check_config("c", {"flags": {"plugin": {"sharedDevicesAllocationPolicy": "bogus"}}}, "none")
    assert effect is None
    assert problems == ["c.flags.plugin.sharedDevicesAllocationPolicy 'bogus' is not one of distributed|packed (the device "
                        "plugin exits: \"invalid --shared-devices-allocation-policy option\")"]
    for policy in ("distributed", "packed"):
        assert check_config("c", {"flags": {"plugin": {"sharedDevicesAllocationPolicy": policy}}}, "mixed")[0] == []


@pytest.mark.parametrize("interval, accepted", [("infinite", True), ("60s", True), ("infinity", False), ("forever", False)])
def test_gfd_sleep_interval_may_be_infinite(interval, accepted):
    problems, _warnings, _effect = check_config("c", {"flags": {"gfd": {"sleepInterval": interval}}}, "none")
    assert (problems == []) is accepted, problems


@pytest.mark.parametrize("block, refused", [({}, True), ({"failRequestsGreaterThanOne": True}, True),
                                            ({"failRequestsGreaterThanOne": False}, False)])
def test_mps_refuses_requests_above_one_replica_unless_the_config_relaxes_it(block, refused):
    problems, _warnings, effect = check_config("c", mps(**block), "single")
    assert problems == [] and effect["sharing"] == "mps"
    assert effect["fail_requests_greater_than_one"] is refused


def test_time_slicing_refuses_requests_above_one_replica_only_when_asked():
    config = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    assert check_config("c", config, "none")[2]["fail_requests_greater_than_one"] is False
    config["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] = True
    assert check_config("c", config, "none")[2]["fail_requests_greater_than_one"] is True
    assert check_config("c", {"version": "v1"}, "none")[2]["fail_requests_greater_than_one"] is None
