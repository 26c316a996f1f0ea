"""Driver node pools as NVIDIADriver resources (pure logic): the role's checks, the rendered NVIDIADrivers and chart
values, and the plan against a cluster's nodes and NVIDIADrivers. What NVIDIA's controller does with them is tested on
the testbed (tests/integration/operator/test_nvidia_driver_pools.py)."""

import os

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator import nvidia_drivers as pools_mod
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.nvidia_drivers import (
    OWNER_LABEL,
    POOL_LABEL,
    plan,
    pool_problems,
    render_pools,
)
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.operator.values import (
    build_values,
    nvidia_drivers,
    settings_problems,
)

from tests.unit.plugins.module_utils.operator.test_values import settings

GROUPS = {"gpu_hopper": ["h1", "h2"], "gpu_ampere": ["a1"], "empty": []}
HOPPER = {"name": "hopper", "version": "580.105.08", "nodes_group": "gpu_hopper"}
AMPERE = {"name": "ampere", "version": "570.195.03", "node_selector": {"nvidia.com/gpu.family": "ampere"}}
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
CRD = os.path.join(os.environ.get("GPUFLEET_NVIDIA_DIR") or os.path.join(ROOT, "..", "shared", "nvidia"),
                   "gpu-operator-v26.7.0", "deployments", "gpu-operator", "crds", "nvidia.com_nvidiadrivers.yaml")


def node(name, **labels):
    return {"metadata": {"name": name, "labels": dict({"nvidia.com/gpu.present": "true"}, **labels)}}


def driver(name, managed=True, **spec):
    labels = {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"} if managed else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def test_good_pools_pass_and_render_one_nvidiadriver_each():
    assert pool_problems([HOPPER, AMPERE], GROUPS) == []
    rendered = render_pools([HOPPER, dict(AMPERE, repository="registry.example.com/nvidia", driver_type="gpu",
                                          kernel_module_type="open")], GROUPS)
    assert [p["name"] for p in rendered] == ["hopper", "ampere"]
    assert rendered[0]["nodes"] == ["h1", "h2"] and rendered[0]["node_selector"] == {POOL_LABEL: "hopper"}
    assert rendered[0]["manifest"] == {
        "apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
        "metadata": {"name": "hopper", "labels": {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"}},
        "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "580.105.08",
                 "nodeSelector": {POOL_LABEL: "hopper"}}}
    assert rendered[1]["nodes"] is None
    assert rendered[1]["manifest"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.family": "ampere"}
    assert rendered[1]["manifest"]["spec"]["repository"] == "registry.example.com/nvidia"
    assert rendered[1]["manifest"]["spec"]["kernelModuleType"] == "open"


@pytest.mark.parametrize("pool, expected", [
    (dict(HOPPER, version=None), "gpu_operator_nvidia_drivers[0] (pool hopper): version is missing"),
    ({"name": "hopper", "nodes_group": "gpu_hopper"}, "(pool hopper): version is missing"),
    (dict(HOPPER, version=580.10), "version 580.1 is a float; quote it"),
    (dict(HOPPER, version="580.105.08-ubuntu22.04"), "version '580.105.08-ubuntu22.04' is not a driver version"),
    (dict(HOPPER, version="latest"), "version 'latest' is not a driver version"),
    (dict(HOPPER, nodes_group="gpu_h100"), "(pool hopper): nodes_group gpu_h100 is not a group of the inventory"),
    (dict(HOPPER, nodes_group="empty"), "nodes_group empty has no hosts: the pool would cover no node"),
    (dict(HOPPER, node_selector={"a": "b"}), "exactly one of nodes_group (an inventory group) or node_selector (node labels), not both"),
    ({"name": "hopper", "version": "580.105.08"}, "give the nodes of the pool as exactly one of nodes_group"),
    (dict(AMPERE, node_selector={}), "(pool ampere): node_selector is empty: the pool would select every node"),
    (dict(AMPERE, node_selector=["a=b"]), "node_selector must be a mapping of node label to value, got list"),
    (dict(AMPERE, node_selector={OWNER_LABEL: "x"}), "node_selector uses nvidia.com/gpu-operator.driver.owner"),
    (dict(AMPERE, node_selector={POOL_LABEL: "x"}), "node_selector uses gpufleet.io/driver-pool"),
    (dict(AMPERE, node_selector={"bad key!": "x"}), "node_selector key 'bad key!' is not a label name"),
    (dict(AMPERE, node_selector={"pool": True}), "node_selector value of pool, True, is not a string (quote it)"),
    (dict(HOPPER, versoin="1"), "(pool hopper): unknown key(s) versoin (known: name, version, nodes_group"),
    (dict(HOPPER, name="Hopper_1"), "name 'Hopper_1' is not a DNS-1123 label"),
    (dict(HOPPER, driver_type="cuda"), "driver_type 'cuda' is not one of gpu|vgpu|vgpu-host-manager"),
    (dict(HOPPER, kernel_module_type="nouveau"), "kernel_module_type 'nouveau' is not one of auto|open|proprietary"),
    (dict(HOPPER, repository="https://nvcr.io/nvidia"), "repository 'https://nvcr.io/nvidia' is not a registry path"),
    ("hopper", "gpu_operator_nvidia_drivers[0] must be a mapping"),
])
def test_each_bad_pool_is_refused_naming_pool_and_field(pool, expected):
    problems = pool_problems([pool], GROUPS)
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_node_in_two_groups_and_duplicate_names_are_refused():
    groups = dict(GROUPS, gpu_h100=["h2", "h3"])
    problems = pool_problems([HOPPER, {"name": "h100", "version": "580.105.08", "nodes_group": "gpu_h100"},
                              dict(AMPERE, name="hopper")], groups)
    assert problems == [
        "gpu_operator_nvidia_drivers[1] (pool h100): node h2 is in nodes_group gpu_h100 and in pool hopper (nodes_group "
        "gpu_hopper); a node can be in one driver pool only (NVIDIA's controller refuses two NVIDIADrivers that select "
        "one node)",
        "gpu_operator_nvidia_drivers[2] (pool hopper): name hopper is also the name of gpu_operator_nvidia_drivers[0]"]


def test_pools_need_the_operator_to_manage_the_driver():
    assert pool_problems([HOPPER], GROUPS, driver_enabled=False) == [
        "gpu_operator_nvidia_drivers is set but gpu_operator_driver_enabled is false: with the driver preinstalled on "
        "the hosts no NVIDIADriver installs one"]
    assert pool_problems(None, GROUPS, driver_enabled=False) == []
    assert pool_problems("hopper", GROUPS) == ["gpu_operator_nvidia_drivers must be a list of driver pools, got str"]


def test_chart_values_switch_the_driver_to_nvidiadrivers_without_the_charts_default():
    values = build_values(settings(nvidia_drivers=[HOPPER], driver_group_nodes=GROUPS))
    assert values["driver"] == {"enabled": True, "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False}}
    assert "nvidiaDriverCRD" not in build_values(settings())["driver"]
    # extra_values may not contradict it
    extra = {"driver": {"nvidiaDriverCRD": {"deployDefaultCR": True}}}
    problems = settings_problems(settings(nvidia_drivers=[HOPPER], driver_group_nodes=GROUPS, extra_values=extra))
    assert problems == ["extra_values sets driver.nvidiaDriverCRD.deployDefaultCR=True but the role variable for it "
                        "says False; set it once"]
    assert settings_problems(settings(nvidia_drivers=[dict(HOPPER, version=None)], driver_group_nodes=GROUPS))


def test_nvidiadrivers_take_the_mirror_registry_and_pull_secrets():
    given = settings(nvidia_drivers=[HOPPER, dict(AMPERE, repository="nvcr.io/nvidia/vgpu", image="vgpu-driver")],
                     driver_group_nodes=GROUPS, image_registry="registry.example.com:5000/mirror",
                     image_pull_secrets=["ngc"])
    rendered = nvidia_drivers(given, build_values(given))
    assert rendered[0]["manifest"]["spec"]["repository"] == "registry.example.com:5000/mirror/nvidia"
    assert rendered[0]["manifest"]["spec"]["imagePullSecrets"] == ["ngc"]
    assert rendered[1]["manifest"]["spec"]["repository"] == "nvcr.io/nvidia/vgpu"
    assert rendered[1]["manifest"]["spec"]["image"] == "vgpu-driver"


def test_rendered_nvidiadrivers_fit_nvidias_crd_schema():
    """Every spec field the role writes is a field of NVIDIA's v26.7.0 CRD, of its type and within its enum."""
    if not os.path.exists(CRD):
        pytest.fail("NVIDIA's v26.7.0 NVIDIADriver CRD not at %s (set GPUFLEET_NVIDIA_DIR)" % CRD)
    with open(CRD) as handle:
        crd = yaml.safe_load(handle)
    version = crd["spec"]["versions"][0]
    assert (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"]) == ("nvidia.com", "v1alpha1", "NVIDIADriver")
    assert crd["spec"]["scope"] == "Cluster"
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    given = settings(nvidia_drivers=[dict(HOPPER, driver_type="vgpu-host-manager", kernel_module_type="proprietary"), AMPERE],
                     driver_group_nodes=GROUPS, image_pull_secrets=["ngc"])
    for pool in nvidia_drivers(given, build_values(given)):
        spec = pool["manifest"]["spec"]
        # required, and without a schema default the API server would fill in
        assert set(k for k in schema["required"] if "default" not in schema["properties"][k]) <= set(spec)
        for key, value in spec.items():
            field = schema["properties"][key]
            assert field["type"] == {str: "string", dict: "object", list: "array"}[type(value)], key
            assert value in field.get("enum", [value]), key
    assert set(pools_mod.DRIVER_TYPES) == set(schema["properties"]["driverType"]["enum"])
    assert set(pools_mod.KERNEL_MODULE_TYPES) == set(schema["properties"]["kernelModuleType"]["enum"])


def rendered(*pools):
    return render_pools(list(pools), GROUPS)


def test_plan_labels_the_group_nodes_and_removes_the_label_elsewhere():
    nodes = [node("h1"), node("h2", **{POOL_LABEL: "old"}), node("a1", **{"nvidia.com/gpu.family": "ampere"}),
             node("x9", **{POOL_LABEL: "old"}), {"metadata": {"name": "cpu"}}]
    result = plan(rendered(HOPPER, AMPERE), nodes, [driver("old")], gpu_nodes=["h1", "h2", "a1"])
    assert result["problems"] == [] and result["warnings"] == []
    assert result["label_changes"] == [{"node": "x9", "from": "old", "to": None},
                                       {"node": "h1", "from": None, "to": "hopper"},
                                       {"node": "h2", "from": "old", "to": "hopper"}]
    assert result["delete"] == ["old"]
    assert result["nodes_by_pool"] == {"hopper": ["h1", "h2"], "ampere": ["a1"]}


def test_plan_is_empty_once_applied():
    nodes = [node("h1", **{POOL_LABEL: "hopper"}), node("h2", **{POOL_LABEL: "hopper"}),
             node("a1", **{"nvidia.com/gpu.family": "ampere"})]
    result = plan(rendered(HOPPER, AMPERE), nodes, [driver("hopper", driverType="gpu"), driver("ampere")], ["h1", "h2", "a1"])
    assert (result["problems"], result["label_changes"], result["delete"]) == ([], [], [])


def test_no_pools_removes_only_what_the_role_made():
    nodes = [node("h1", **{POOL_LABEL: "hopper"}), node("h2")]
    result = plan([], nodes, [driver("hopper"), driver("theirs", managed=False), driver("other", managed=False)], ["h1", "h2"])
    assert result["problems"] == []
    assert result["label_changes"] == [{"node": "h1", "from": "hopper", "to": None}]
    assert result["delete"] == ["hopper"] and result["foreign"] == ["other", "theirs"]


def test_overlapping_selectors_are_refused_naming_the_node_and_both():
    """A node of a group pool whose labels also match another pool's selector, or an NVIDIADriver the role did not make:
    NVIDIA's controller (internal/validator/validator.go) would stop reconciling every NVIDIADriver."""
    nodes = [node("h1", **{"nvidia.com/gpu.family": "ampere"}), node("h2"), node("a1", **{"nvidia.com/gpu.family": "ampere"}),
             node("z1", team="ml")]
    theirs = driver("theirs", managed=False, nodeSelector={"team": "ml"})
    unselective = driver("everything", managed=False)  # no nodeSelector: every nvidia.com/gpu.present=true node
    result = plan(rendered(HOPPER, AMPERE), nodes, [theirs], ["h1", "h2", "a1"])
    assert result["problems"] == [
        "node h1 would be selected by pool hopper and pool ampere; NVIDIA's controller refuses to reconcile any "
        "NVIDIADriver while two select one node"]
    result = plan(rendered(AMPERE), [node("a1", **{"nvidia.com/gpu.family": "ampere"})], [unselective], ["a1"])
    assert result["problems"] == [
        "node a1 would be selected by pool ampere and NVIDIADriver everything (not this role's); NVIDIA's controller "
        "refuses to reconcile any NVIDIADriver while two select one node"]


def test_gpu_nodes_in_no_pool_are_refused_unless_a_default_nvidiadriver_takes_them():
    nodes = [node("h1"), node("h2"), node("a1"), node("b7")]
    result = plan(rendered(HOPPER), nodes, [], ["h1", "h2", "a1", "b7", "gone"])
    assert result["problems"] == [
        "GPU node(s) a1, b7 are in no driver pool: with the driver managed by NVIDIADriver resources a GPU node no "
        "NVIDIADriver selects gets no driver; add them to a pool"]
    fallback = driver("fallback", managed=False, default=True)
    assert plan(rendered(HOPPER), nodes, [fallback], ["h1", "h2", "a1", "b7"])["problems"] == []


def test_gpu_nodes_the_operator_has_not_labelled_yet_are_a_warning():
    """A selector on a label GFD or the operator sets (nvidia.com/gpu.product) matches nothing before the first install;
    NVIDIA's controller routes only nodes labelled nvidia.com/gpu.present=true."""
    nodes = [node("h1"), node("h2"), {"metadata": {"name": "new", "labels": {}}}]
    gfd_pool = dict(AMPERE, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    result = plan(rendered(HOPPER, gfd_pool), nodes, [], ["h1", "h2", "new"])
    assert result["problems"] == []
    assert result["warnings"][-1] == (
        "GPU node(s) new are in no driver pool today; not labelled nvidia.com/gpu.present=true yet, so a pool that "
        "selects labels the GPU Operator sets later may still take them; one that no NVIDIADriver selects gets no driver")


def test_the_charts_own_default_nvidiadriver_does_not_count():
    chart_made = driver("default", managed=False, default=True)
    chart_made["metadata"]["annotations"] = {"meta.helm.sh/release-name": "gpu-operator",
                                             "meta.helm.sh/release-namespace": "gpu-operator"}
    result = plan(rendered(HOPPER), [node("h1"), node("h2"), node("a1")], [chart_made], ["a1"], "gpu-operator", "gpu-operator")
    assert result["foreign"] == [] and result["problems"][0].startswith("GPU node(s) a1 are in no driver pool")


def test_conflicts_with_existing_nvidiadrivers_are_refused():
    nodes = [node("h1"), node("h2"), node("a1", **{"nvidia.com/gpu.family": "ampere"})]
    existing = [driver("hopper", managed=False, nodeSelector={"x": "y"}), driver("ampere", driverType="vgpu"),
                driver("d1", managed=False, default=True), driver("d2", managed=False, default=True)]
    problems = plan(rendered(HOPPER, AMPERE), nodes, existing, ["h1"])["problems"]
    assert problems == [
        "pool hopper: NVIDIADriver hopper exists and this role did not create it (it lacks the label "
        "app.kubernetes.io/managed-by=gpufleet.gpu_operator); name the pool differently, or delete that NVIDIADriver",
        "pool ampere: driver_type gpu, but NVIDIADriver ampere has driverType vgpu, which NVIDIA's CRD does not let "
        "change; give the pool another name (a new NVIDIADriver)",
        "NVIDIADrivers d1, d2 are all spec.default; NVIDIA's controller then reconciles no NVIDIADriver"]


def test_group_nodes_missing_from_the_cluster_are_refused_and_empty_selectors_warned():
    result = plan(rendered(HOPPER, AMPERE), [node("h1")], [], ["h1"])
    assert result["problems"] == ["pool hopper: node h2 (nodes_group gpu_hopper) is not a node of the cluster"]
    assert result["warnings"] == [
        "pool ampere: node_selector nvidia.com/gpu.family=ampere matches no node of the cluster today; its NVIDIADriver "
        "is applied and takes the nodes that get these labels"]


def test_nodes_nvidia_would_not_route_by_the_label_alone_are_listed():
    """NVIDIA's v26.7.0 node-labeling controller notices a label change only when the label is in the nodeSelector of
    the node's current NVIDIADriver (controllers/nodelabeling_controller.go); other nodes are routed through an
    NVIDIADriver create and delete."""
    ampere_sel = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    nodes = [node("new"),  # no owner yet
             node("moved", **{POOL_LABEL: "ampere-g", OWNER_LABEL: "ampere-g"}),  # owner selects the pool label
             node("by-selector", **{OWNER_LABEL: "ampere"}),  # owner's selector lacks the pool label
             node("of-stale", **{POOL_LABEL: "old", OWNER_LABEL: "old"})]  # owner is deleted by this run
    groups = {"gpu_hopper": ["new", "moved", "by-selector", "of-stale"]}
    existing = [driver("ampere-g", nodeSelector={POOL_LABEL: "ampere-g"}), driver("ampere", nodeSelector=ampere_sel),
                driver("old", nodeSelector={POOL_LABEL: "old"})]
    result = plan(render_pools([HOPPER, dict(AMPERE, name="ampere-g")], groups), nodes, existing)
    assert [c["node"] for c in result["label_changes"]] == ["by-selector", "moved", "new", "of-stale"]
    assert result["route"] == ["by-selector", "new", "of-stale"]
    assert pools_mod.route_trigger()["spec"]["nodeSelector"] == {"gpufleet.io/driver-pool-route": "none"}
    assert pools_mod.route_trigger()["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"}
    assert "name gpufleet-route-nodes is reserved" in pool_problems([dict(HOPPER, name="gpufleet-route-nodes")], GROUPS)[0]
