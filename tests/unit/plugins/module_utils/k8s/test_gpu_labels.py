"""The GPU vocabulary: label and resource names, GFD product parsing, pod and node GPU counts."""

import pytest

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels as gl
from tests.support import kube


def node(labels=None, allocatable=None, capacity=None, ready="True", unschedulable=None):
    return kube.node("n", labels=labels or {}, allocatable=allocatable or {}, capacity=capacity, unschedulable=unschedulable,
                     conditions=[{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}])


def pod(containers=(), init=(), runtime_class=None, name="p"):
    """A pod whose containers have the given ``resources`` ({limits, requests}) and the given init containers."""
    spec = {"containers": [{"resources": r} for r in containers]}
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    return kube.pod(name, runtime_class=runtime_class, spec=spec)


# -- names ---------------------------------------------------------------------------------------------------

def test_label_and_resource_names():
    assert gl.LABEL_PRODUCT == "nvidia.com/gpu.product" and gl.LABEL_COUNT == "nvidia.com/gpu.count"
    assert gl.LABEL_REPLICAS == "nvidia.com/gpu.replicas" and gl.LABEL_SHARING_STRATEGY == "nvidia.com/gpu.sharing-strategy"
    assert (gl.LABEL_MIG_CONFIG, gl.LABEL_MIG_STATE) == ("nvidia.com/mig.config", "nvidia.com/mig.config.state")
    assert gl.deploy_label("mig-manager") == "nvidia.com/gpu.deploy.mig-manager"
    assert gl.PAUSED_VALUE == "paused-for-mig-change"
    assert gl.mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert gl.mig_resource("1g.10gb", shared=True) == "nvidia.com/mig-1g.10gb.shared"
    assert gl.mig_count_label("1g.18gb+me") == "nvidia.com/mig-1g.18gb.me.count"
    assert gl.RESOURCE_GPU_SHARED == "nvidia.com/gpu.shared"


@pytest.mark.parametrize("name, parsed", [
    ("nvidia.com/gpu", {"kind": "gpu", "profile": None, "shared": False, "base": "nvidia.com/gpu"}),
    ("nvidia.com/gpu.shared", {"kind": "gpu", "profile": None, "shared": True, "base": "nvidia.com/gpu"}),
    ("nvidia.com/mig-1g.10gb", {"kind": "mig", "profile": "1g.10gb", "shared": False, "base": "nvidia.com/mig-1g.10gb"}),
    ("nvidia.com/mig-1g.10gb.me", {"kind": "mig", "profile": "1g.10gb.me", "shared": False,
                                   "base": "nvidia.com/mig-1g.10gb.me"}),
    ("nvidia.com/mig-3g.40gb.shared", {"kind": "mig", "profile": "3g.40gb", "shared": True,
                                       "base": "nvidia.com/mig-3g.40gb"}),
    ("cpu", None), ("amd.com/gpu", None), ("nvidia.com/vgpu", None), (None, None), (7, None),
])
def test_parse_resource(name, parsed):
    assert gl.parse_resource(name) == parsed
    assert gl.is_gpu_resource(name) is (parsed is not None)


def test_resource_mig_profile():
    assert gl.resource_mig_profile("nvidia.com/mig-1g.10gb.shared") == "1g.10gb"
    assert gl.resource_mig_profile("nvidia.com/gpu.shared") is None
    assert gl.resource_mig_profile("memory") is None


# -- product labels ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("product, model, profile, invalid, shared", [
    ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3", None, False, False),
    ("NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA-H100-80GB-HBM3", None, False, True),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB", "1g.5gb", False, False),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "NVIDIA-A100-SXM4-40GB", "1g.5gb", False, True),
    ("NVIDIA-H100-80GB-HBM3-MIG-INVALID", "NVIDIA-H100-80GB-HBM3", None, True, False),
    # malformed: parsing never raises
    ("", None, None, False, False), (None, None, None, False, False), (42, None, None, False, False),
    ("-MIG-", None, None, False, False), ("-SHARED", None, None, False, True),
    ("X-MIG-", "X", None, False, False),
])
def test_parse_product(product, model, profile, invalid, shared):
    assert gl.parse_product(product) == {"model": model, "mig_profile": profile, "mig_invalid": invalid, "shared": shared}
    assert gl.model_from_product(product) == model
    assert gl.single_mig_profile(product) == profile


def test_product_label_from_nvml_name():
    assert gl.product_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gl.product_label("  NVIDIA  A100-SXM4-40GB (x) ") == "NVIDIA-A100-SXM4-40GB-x"
    assert gl.product_label(None) == ""


def test_mixed_counts_and_malformed_values():
    labels = {"nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.me.count": "1",
              "nvidia.com/mig-3g.40gb.count": "lots", "nvidia.com/mig-1g.10gb.memory": "9984", "other": "1", 5: "x"}
    assert gl.mixed_mig_counts(labels) == {"1g.10gb": 2, "1g.10gb.me": 1, "3g.40gb": 0}
    assert gl.mixed_mig_counts(None) == {}


def test_replicas_and_devices_behind_shared_resources():
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/mig-1g.10gb.replicas": "2"}
    assert gl.replicas(labels) == 4 and gl.replicas(labels, "nvidia.com/gpu.shared") == 4
    assert gl.replicas({"nvidia.com/gpu.replicas": "0"}) == 1  # GFD writes 0 for MIG-enabled GPUs
    assert gl.replicas({"nvidia.com/gpu.replicas": "many"}) == 1 and gl.replicas({}) == 1
    alloc = {"nvidia.com/gpu.shared": "8", "nvidia.com/mig-1g.10gb.shared": "6", "nvidia.com/mig-3g.40gb": "1"}
    assert gl.devices_advertised(alloc, labels) == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 3,
                                                    "nvidia.com/mig-3g.40gb": 1}
    # not renamed: nvidia.com/gpu itself carries replicas x devices
    assert gl.devices_advertised({"nvidia.com/gpu": "32"}, {"nvidia.com/gpu.replicas": "4"}) == {"nvidia.com/gpu": 8}


# -- quantities and pods ---------------------------------------------------------------------------------------

def test_gpu_resources_filters_and_converts():
    raw = {"cpu": "4", "nvidia.com/gpu": "2", "nvidia.com/gpu.shared": 8, "nvidia.com/mig-1g.10gb": "0",
           "nvidia.com/mig-2g.20gb": "1k", "memory": "1Gi"}
    assert gl.gpu_resources(raw) == {"nvidia.com/gpu": 2, "nvidia.com/gpu.shared": 8, "nvidia.com/mig-1g.10gb": 0,
                                     "nvidia.com/mig-2g.20gb": 1000}
    assert gl.gpu_resources(raw, keep_zero=False) == {"nvidia.com/gpu": 2, "nvidia.com/gpu.shared": 8,
                                                      "nvidia.com/mig-2g.20gb": 1000}
    assert gl.gpu_resources(None) == {}


def test_plain_gpu_pod():
    p = pod([{"limits": {"nvidia.com/gpu": "1", "cpu": "1"}}, {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}}])
    assert gl.pod_gpu_requests(p) == {"nvidia.com/gpu": 3}
    assert gl.is_gpu_pod(p)


def test_mixed_strategy_mig_pod_and_single_strategy_pod():
    mixed = pod([{"limits": {"nvidia.com/mig-1g.10gb": "2"}}, {"limits": {"nvidia.com/mig-3g.40gb": "1"}}])
    assert gl.pod_gpu_requests(mixed) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}
    single = pod([{"limits": {"nvidia.com/gpu": "1"}}])  # under single, MIG devices are nvidia.com/gpu
    assert gl.pod_gpu_requests(single) == {"nvidia.com/gpu": 1}


def test_time_sliced_pods():
    assert gl.pod_gpu_requests(pod([{"limits": {"nvidia.com/gpu.shared": 1}}])) == {"nvidia.com/gpu.shared": 1}
    assert gl.pod_gpu_requests(pod([{"requests": {"nvidia.com/mig-1g.10gb.shared": "1"}}])) == {
        "nvidia.com/mig-1g.10gb.shared": 1}
    assert gl.is_gpu_pod(pod([{"limits": {"nvidia.com/gpu.shared": 1}}]))


def test_init_containers_count_as_kubernetes_counts_them():
    p = pod([{"limits": {"nvidia.com/gpu": "1"}}], init=[{"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                                                         {"resources": {"limits": {"nvidia.com/gpu": "1"}}}])
    assert gl.pod_gpu_requests(p) == {"nvidia.com/gpu": 2}  # largest init container, not the sum
    # a sidecar (restartable init container) runs beside the app containers and the later init containers
    sidecar = {"restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    p = pod([{"limits": {"nvidia.com/gpu": "1"}}], init=[sidecar, {"resources": {"limits": {"nvidia.com/gpu": "3"}}}])
    assert gl.pod_gpu_requests(p) == {"nvidia.com/gpu": 4}
    p = pod([{"limits": {"nvidia.com/gpu": "2"}}], init=[sidecar])
    assert gl.pod_gpu_requests(p) == {"nvidia.com/gpu": 3}


def test_requests_win_limits_fill_in_and_zero_or_malformed_is_no_request():
    assert gl.pod_gpu_requests(pod([{"requests": {"nvidia.com/gpu": "1"}}])) == {"nvidia.com/gpu": 1}
    assert gl.pod_gpu_requests(pod([{"limits": {"nvidia.com/gpu": "0"}}])) == {}
    assert gl.pod_gpu_requests(pod([{"limits": {"nvidia.com/gpu": "one"}}])) == {}
    assert gl.pod_gpu_requests({}) == {} and gl.pod_gpu_requests(None) == {}
    assert not gl.is_gpu_pod(pod([{"limits": {"cpu": "1"}}]))


def test_runtime_class_alone_makes_a_gpu_pod():
    assert gl.is_gpu_pod(pod([{}], runtime_class="nvidia"))
    assert not gl.is_gpu_pod(pod([{}], runtime_class="kata"))
    assert gl.is_gpu_pod(pod([{}], runtime_class="kata"), runtime_classes=["kata"])
    assert not gl.is_gpu_pod(pod([{}], runtime_class="nvidia"), runtime_classes=None)


def test_pod_ref():
    assert gl.pod_ref(pod(name="x")) == "w/x"
    assert gl.pod_ref({}) == "None/None"


# -- nodes ---------------------------------------------------------------------------------------------------

def test_node_allocatable_views():
    n = node(allocatable={"cpu": "8", "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "0", "nvidia.com/gpu.shared": "4"})
    assert gl.node_gpu_allocatable(n) == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 0, "nvidia.com/gpu.shared": 4}
    assert gl.node_gpu_allocatable(n, keep_zero=False) == {"nvidia.com/gpu": 1, "nvidia.com/gpu.shared": 4}
    assert gl.node_gpu_allocatable({}) == {}


@pytest.mark.parametrize("labels, capacity, expected", [
    ({"nvidia.com/gpu.present": "true"}, {}, True),
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {}, True),
    ({}, {"nvidia.com/gpu": "8"}, True),
    ({}, {"nvidia.com/gpu.shared": "8"}, True),  # time-sliced, renamed: still a GPU node
    ({}, {"nvidia.com/mig-1g.10gb": "7"}, True),
    ({}, {"nvidia.com/gpu": "0"}, True),  # device plugin down: kubelet keeps the resource at 0
    ({"nvidia.com/gpu.present": "false"}, {"cpu": "4"}, False),
    ({}, {}, False),
])
def test_is_gpu_node(labels, capacity, expected):
    assert gl.is_gpu_node(node(labels, capacity=capacity)) is expected


def test_node_ready_unschedulable_and_deploy_labels():
    assert gl.node_ready(node()) and not gl.node_ready(node(ready="False")) and not gl.node_ready({})
    assert gl.unschedulable(node(unschedulable=True)) and not gl.unschedulable(node()) and not gl.unschedulable({})
    labels = {"nvidia.com/gpu.deploy.driver": "true", "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
              "nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-mig-change", "nvidia.com/gpu.product": "X"}
    assert gl.deploy_labels(labels) == {"driver": "true", "device-plugin": "paused-for-mig-change",
                                        "dcgm-exporter": "paused-for-mig-change"}
    assert gl.paused_deploy_labels(node(labels)) == ["nvidia.com/gpu.deploy.dcgm-exporter",
                                                     "nvidia.com/gpu.deploy.device-plugin"]
    assert gl.nvidia_labels(dict(labels, zone="a")) == labels


def test_shares_expected_multiplies_by_replicas_and_keeps_the_renamed_form():
    node = {"metadata": {"labels": {"nvidia.com/gpu.replicas": "4", "nvidia.com/mig-1g.10gb.replicas": "bad"}},
            "status": {"allocatable": {"nvidia.com/gpu.shared": "8", "cpu": "4"}}}
    assert gl.shares_expected({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 3}, node) == {
        "nvidia.com/gpu.shared": 8, "nvidia.com/mig-1g.10gb": 3}
    assert gl.shares_expected({"nvidia.com/gpu": 2}, {}) == {"nvidia.com/gpu": 2}
    assert gl.shares_expected(None, None) == {}
