"""Driver node pools with the gpu_operator role: one NVIDIADriver per pool on NVIDIA's v26.7.0 chart and controller.

NVIDIA's real controller (built from the v26.7.0 release source, run by the testbed while the chart's Deployment
exists) routes each GPU node to an NVIDIADriver (label nvidia.com/gpu-operator.driver.owner) and creates one driver
DaemonSet per NVIDIADriver and OS; kwok runs its pods. Two pools on two driver versions: `hopper`, the inventory group
gpu_hopper (op-h100, op-h200; the role labels them gpufleet.io/driver-pool=hopper), and `ampere`, a node_selector on
the instance type op-a100 carries as a cloud node would.

The tests build on each other in file order on one cluster (the operator_sandbox fixture): check mode and refusals on
the empty cluster (nothing created), the install with site.yml (NVIDIADrivers, DaemonSets, images, pod placement,
status and validation naming each node's NVIDIADriver), an idempotent re-run, check mode with --diff of a version
change, an overlap made by an NVIDIADriver the role did not create (NVIDIA's controller stops every NVIDIADriver, the
role refuses and names it), a pool removed and its node moved to another pool (only the role's NVIDIADriver deleted,
the node routed and its driver replaced), and an empty list (the driver back to ClusterPolicy).
"""

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.operator.test_chart_pin import CHART_V26
from tests.integration.operator.test_operator import assert_untouched, wait_for
from tests.testbed import operator as real_operator

CHART_V26_BUILD = real_operator.cache_dir("v26.7.0") / "chart" / "gpu-operator"
STATUS_PLAYBOOK = Path(__file__).resolve().parent / "status.yml"
NAMESPACE = "gpu-operator"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
POOL_LABEL = "gpufleet.io/driver-pool"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"  # NVIDIA's routing label (internal/consts/consts.go)
MANAGED = {"app.kubernetes.io/managed-by": "gpufleet.gpu_operator"}
HOPPER = {"name": "hopper", "version": "580.105.08", "nodes_group": "gpu_hopper"}
AMPERE = {"name": "ampere", "version": "570.195.03", "node_selector": {INSTANCE_TYPE: "p4d.24xlarge"}}
POOL_NODES = {"hopper": {"op-h100", "op-h200"}, "ampere": {"op-a100"}}
VERSIONS = {"hopper": "580.105.08", "ampere": "570.195.03"}
# The chart's v26.7.0 default driver image and the NFD os-release labels of the simulated nodes (ubuntu 22.04).
IMAGE = "nvcr.io/nvidia/driver:%s-ubuntu22.04"
# An operand DaemonSet rollout after the install takes the ClusterPolicy a while to be ready on a loaded machine, and a
# node moved to another pool goes through NVIDIA's driver upgrade (cordon, new pod, uncordon).
RUN = {"gpu_operator_chart_ref": str(CHART_V26_BUILD), "gpu_operator_wait_timeout": 360,
       "gpu_operator_nvidia_drivers": [HOPPER, AMPERE]}


@pytest.fixture(scope="module", autouse=True)
def pools_inventory(operator_sandbox):
    """The inventory's pool group, and op-a100's instance-type label (what a cloud provider's node carries)."""
    if not (CHART_V26 / "Chart.yaml").exists():
        pytest.fail("NVIDIA's v26.7.0 chart not at %s (set GPUFLEET_NVIDIA_DIR)" % CHART_V26)
    (operator_sandbox.inventory / "pools.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"gpu_hopper": {"hosts": {"op-h100": {}, "op-h200": {}}}}}}))
    operator_sandbox.agents.label("op-a100", INSTANCE_TYPE, "p4d.24xlarge")
    return operator_sandbox


def ran(result, task):
    """Results of ``task`` that were not skipped."""
    return [res for _host, res in result.task_results(task) if not res.get("skipped")]


def custom(sandbox):
    return client.CustomObjectsApi(sandbox.bed.api_client())


def nvidia_drivers(sandbox):
    """{name: NVIDIADriver} as the API holds them ({} without the CRD)."""
    try:
        items = custom(sandbox).list_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers")["items"]
    except client.rest.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return dict((d["metadata"]["name"], d) for d in items)


def node_labels(sandbox, key):
    return dict((n.metadata.name, (n.metadata.labels or {}).get(key)) for n in sandbox.bed.core.list_node().items)


def driver_daemonsets(sandbox):
    """{NVIDIADriver name: [DaemonSet]} of the driver DaemonSets NVIDIA's controller made for NVIDIADrivers."""
    found = {}
    for ds in client.AppsV1Api(sandbox.bed.api_client()).list_namespaced_daemon_set(NAMESPACE).items:
        for ref in ds.metadata.owner_references or []:
            if ref.controller and ref.kind == "NVIDIADriver":
                found.setdefault(ref.name, []).append(ds)
    return found


def pods_of(sandbox, daemonset):
    pods = sandbox.bed.core.list_namespaced_pod(NAMESPACE).items
    return [p for p in pods if any(r.kind == "DaemonSet" and r.name == daemonset for r in p.metadata.owner_references or [])
            and not p.metadata.deletion_timestamp]


def placement(sandbox):
    """{NVIDIADriver: (image, {nodes of its Running pods})} over every driver DaemonSet of an NVIDIADriver."""
    seen = {}
    for name, sets in driver_daemonsets(sandbox).items():
        assert len(sets) == 1, [ds.metadata.name for ds in sets]  # one OS (ubuntu 22.04): one DaemonSet
        ds = sets[0]
        image = next(c.image for c in ds.spec.template.spec.containers if c.name == "nvidia-driver-ctr")
        pods = pods_of(sandbox, ds.metadata.name)
        seen[name] = (ds.metadata.name, image, set(p.spec.node_name for p in pods if p.status.phase == "Running"))
    return seen


def status(sandbox):
    """gpu_operator_status once, through ansible-playbook."""
    result = sandbox.playbook(STATUS_PLAYBOOK)
    assert result.rc == 0, result
    return ran(result, "Read the operator's state")[0]


def test_check_mode_before_the_install_names_the_nvidiadrivers_and_changes_nothing(operator_sandbox):
    result = operator_sandbox.site("--check", "--diff", "--tags", "operator", extra_vars=RUN)
    assert result.rc == 0, result
    said = ran(result, "Say which NVIDIADrivers the install would create")
    assert said and said[0]["changed"] is True
    assert said[0]["msg"] == [
        "NVIDIADriver hopper, driver 580.105.08 (nodes_group gpu_hopper): op-h100, op-h200",
        "NVIDIADriver ampere, driver 570.195.03 (node_selector node.kubernetes.io/instance-type=p4d.24xlarge): op-a100"]
    labelled = ran(result, "Label the nodes of each group pool")[0]["results"]
    assert sorted(r["item"]["node"] for r in labelled if r["changed"]) == ["op-h100", "op-h200"]
    assert_untouched(operator_sandbox)
    assert set(node_labels(operator_sandbox, POOL_LABEL).values()) == {None}


def test_bad_pools_are_refused_naming_pool_and_field_before_any_change(operator_sandbox):
    bad = [{"name": "hopper", "version": 580.105, "nodes_group": "gpu_hopper", "verison": "580.105.08"},
           {"name": "ampere", "node_selector": {}}, {"name": "more", "version": "570", "nodes_group": "gpu_h100"}]
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(RUN, gpu_operator_nvidia_drivers=bad))
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert message.startswith("GPU Operator settings rejected before any change: "), message
    for expected in ("gpu_operator_nvidia_drivers[0] (pool hopper): unknown key(s) verison",
                     "gpu_operator_nvidia_drivers[0] (pool hopper): version 580.105 is a float; quote it",
                     "gpu_operator_nvidia_drivers[1] (pool ampere): version is missing",
                     "gpu_operator_nvidia_drivers[1] (pool ampere): node_selector is empty: the pool would select every node",
                     "gpu_operator_nvidia_drivers[2] (pool more): version '570' is not a driver version",
                     "gpu_operator_nvidia_drivers[2] (pool more): nodes_group gpu_h100 is not a group of the inventory"):
        assert expected in message, message
    assert_untouched(operator_sandbox)


def test_a_node_two_pools_would_select_is_refused_before_any_change(operator_sandbox):
    overlap = [HOPPER, AMPERE, {"name": "a100s", "version": "570.195.03", "nodes_group": "gpu_nodes"}]
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(RUN, gpu_operator_nvidia_drivers=overlap))
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert message.startswith("GPU Operator settings rejected before any change: "), message
    assert "node op-h100 is in nodes_group gpu_nodes and in pool hopper (nodes_group gpu_hopper)" in message
    # A node in two groups is found without the cluster; a group and a selector that meet on a node, against it.
    selector_overlap = [dict(HOPPER, nodes_group="gpu_nodes"), AMPERE]
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(RUN, gpu_operator_nvidia_drivers=selector_overlap))
    assert result.rc != 0, result
    message = " ".join(result.failure_messages())
    assert message == ("driver pools refused before any change: node op-a100 would be selected by pool hopper and pool "
                       "ampere; NVIDIA's controller refuses to reconcile any NVIDIADriver while two select one node"), message
    assert_untouched(operator_sandbox)
    assert set(node_labels(operator_sandbox, POOL_LABEL).values()) == {None}


def test_site_installs_one_nvidiadriver_per_pool_and_nvidias_controller_runs_each_version_on_its_nodes(operator_sandbox):
    result = operator_sandbox.site(extra_vars=RUN)  # the operator and the validation stages
    assert result.rc == 0, result
    policy = operator_sandbox.policy()
    assert policy["spec"]["driver"]["useNvidiaDriverCRD"] is True and policy["status"]["state"] == "ready"
    drivers = nvidia_drivers(operator_sandbox)
    assert sorted(drivers) == ["ampere", "hopper"]  # the chart's own "default" NVIDIADriver is not deployed
    assert drivers["hopper"]["spec"]["nodeSelector"] == {POOL_LABEL: "hopper"}
    assert drivers["ampere"]["spec"]["nodeSelector"] == {INSTANCE_TYPE: "p4d.24xlarge"}
    for name, version in VERSIONS.items():
        assert drivers[name]["spec"]["version"] == version and drivers[name]["metadata"]["labels"] == MANAGED
        assert drivers[name]["status"]["state"] == "ready"
    assert node_labels(operator_sandbox, POOL_LABEL) == {"op-h100": "hopper", "op-h200": "hopper", "op-a100": None,
                                                         "op-cpu": None}
    # NVIDIA's controller routed each node to its pool's NVIDIADriver and made one DaemonSet per NVIDIADriver, whose
    # image tag is the pool's version and whose pods run on that pool's nodes only.
    assert node_labels(operator_sandbox, OWNER_LABEL) == {"op-h100": "hopper", "op-h200": "hopper", "op-a100": "ampere",
                                                          "op-cpu": None}
    placed = placement(operator_sandbox)
    assert sorted(placed) == ["ampere", "hopper"]
    for name, (daemonset, image, nodes) in placed.items():
        assert daemonset.startswith("nvidia-gpu-driver-ubuntu22.04-"), daemonset
        assert image == IMAGE % VERSIONS[name] and nodes == POOL_NODES[name], (name, image, nodes)
    names = [ds.metadata.name for ds in client.AppsV1Api(operator_sandbox.bed.api_client()).list_namespaced_daemon_set(
        NAMESPACE).items]
    assert "nvidia-driver-daemonset" not in names  # ClusterPolicy runs no driver of its own
    # The role's wait (gpu_operator_status) and the validation name each node's driver pod and its NVIDIADriver.
    waited = ran(result, "Wait for ClusterPolicy ready and the operands on every GPU node")[0]
    validated = ran(result, "Check operands, GFD labels and advertised resources")[0]["nodes"]
    for pool, nodes in POOL_NODES.items():
        for node in nodes:
            for seen in (waited["drivers"][node], validated[node]["driver"]):
                assert seen["nvidia_driver"] == pool and seen["source"] == "NVIDIADriver %s" % pool, seen
                assert seen["image"] == IMAGE % VERSIONS[pool] and seen["state"] == "ready", seen
                assert seen["pod"].startswith(placed[pool][0]), seen
            assert waited["nodes"][node]["driver"] == "ready" and validated[node]["problems"] == []
    table = result.table()
    assert table[0].split() == ["NODE", "MODEL", "RESOURCES", "DRIVER", "HARDWARE", "CHECKS", "SMOKE", "RESULT"], table
    rows = dict((line.split()[0], line.split()) for line in table[1:4])
    assert rows["op-a100"][3:5] == ["ampere", "570.195.03-ubuntu22.04"] and rows["op-a100"][-1] == "PASS", table
    assert rows["op-h100"][3:5] == ["hopper", "580.105.08-ubuntu22.04"] and rows["op-h100"][-1] == "PASS", table
    assert rows["op-h200"][3:5] == ["hopper", "580.105.08-ubuntu22.04"] and rows["op-h200"][-1] == "PASS", table


def test_a_second_run_changes_nothing(operator_sandbox):
    result = operator_sandbox.site("--tags", "operator", extra_vars=RUN)
    assert result.rc == 0, result
    assert result.changed == 0, [(t, r) for t in ("Apply the NVIDIADriver", "Label the nodes", "Install or upgrade")
                                 for r in ran(result, t)]
    assert not ran(result, "Create an NVIDIADriver that selects no node")


def test_check_mode_shows_a_version_change_and_changes_nothing(operator_sandbox):
    before = placement(operator_sandbox)
    newer = dict(RUN, gpu_operator_nvidia_drivers=[dict(HOPPER, version="580.126.09"), AMPERE])
    result = operator_sandbox.site("--check", "--diff", "--tags", "operator", extra_vars=newer)
    assert result.rc == 0, result
    applied = dict((r["item"]["name"], r) for r in ran(result, "Apply the NVIDIADriver of each driver pool")[0]["results"])
    assert applied["hopper"]["changed"] is True and applied["ampere"]["changed"] is False
    diff = applied["hopper"]["diff"]
    assert diff["before"]["spec"]["version"] == "580.105.08" and diff["after"]["spec"]["version"] == "580.126.09"
    assert nvidia_drivers(operator_sandbox)["hopper"]["spec"]["version"] == "580.105.08"
    assert placement(operator_sandbox) == before


def test_an_nvidiadriver_the_role_did_not_create_that_overlaps_a_pool_is_named_by_both(operator_sandbox):
    """NVIDIA's controller (internal/validator/validator.go) stops reconciling every NVIDIADriver while two select one
    node; gpu_operator_status reports it from their status, and the role refuses to run until it is gone."""
    theirs = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "theirs"},
              "spec": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "570.195.03",
                       "nodeSelector": {INSTANCE_TYPE: "p4d.24xlarge"}}}
    custom(operator_sandbox).create_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", theirs)
    conflict = "multiple NVIDIADrivers match the same node op-a100: [ampere theirs]"
    try:
        wait_for(lambda: all((d.get("status") or {}).get("state") == "notReady"
                             and any(c.get("message") == conflict for c in d["status"].get("conditions") or [])
                             for d in nvidia_drivers(operator_sandbox).values()),
                 timeout=60, what="NVIDIA's controller to refuse every NVIDIADriver")
        seen = status(operator_sandbox)
        assert "NVIDIADriver hopper: state notReady (ConflictingNodeSelector: %s)" % conflict in seen["not_ready"], seen
        assert "NVIDIADriver ampere: state notReady (ConflictingNodeSelector: %s)" % conflict in seen["not_ready"], seen
        result = operator_sandbox.site("--tags", "operator", extra_vars=RUN)
        assert result.rc != 0, result
        assert result.failure_messages() == [
            "driver pools refused before any change: node op-a100 would be selected by pool ampere and NVIDIADriver "
            "theirs (not this role's); NVIDIA's controller refuses to reconcile any NVIDIADriver while two select one "
            "node"], result
        assert not ran(result, "Install or upgrade the GPU Operator chart")
    finally:
        custom(operator_sandbox).delete_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", "theirs")
    wait_for(lambda: all((d.get("status") or {}).get("state") == "ready" for d in nvidia_drivers(operator_sandbox).values()),
             timeout=60, what="the pools' NVIDIADrivers to be ready again")
    assert sorted(nvidia_drivers(operator_sandbox)) == ["ampere", "hopper"]


def test_a_removed_pool_loses_only_the_roles_nvidiadriver_and_its_node_moves_to_another_pool(operator_sandbox):
    """ampere leaves the list and op-a100 joins hopper (hopper's group is now all GPU nodes): the role deletes its own
    ampere NVIDIADriver, keeps one it did not create, and has NVIDIA's controller route op-a100 to hopper - whose
    NVIDIADriver does not change, so the label alone would not be noticed."""
    kept = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "kept"},
            "spec": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "570.195.03",
                     "nodeSelector": {"team": "ml"}}}
    custom(operator_sandbox).create_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", kept)
    moved = dict(RUN, gpu_operator_nvidia_drivers=[dict(HOPPER, nodes_group="gpu_nodes")])
    result = operator_sandbox.site("--tags", "operator", extra_vars=moved)
    assert result.rc == 0, result
    assert [r["item"] for r in ran(result, "Delete the NVIDIADrivers this role created")[0]["results"]] == ["ampere"]
    assert ran(result, "Create an NVIDIADriver that selects no node") and ran(result, "Delete the NVIDIADriver that selects")
    assert sorted(nvidia_drivers(operator_sandbox)) == ["hopper", "kept"]
    assert nvidia_drivers(operator_sandbox)["hopper"]["spec"]["version"] == "580.105.08"
    assert node_labels(operator_sandbox, POOL_LABEL) == {"op-h100": "hopper", "op-h200": "hopper", "op-a100": "hopper",
                                                         "op-cpu": None}
    assert node_labels(operator_sandbox, OWNER_LABEL) == {"op-h100": "hopper", "op-h200": "hopper", "op-a100": "hopper",
                                                          "op-cpu": None}
    wait_for(lambda: set(placement(operator_sandbox)) == {"hopper"}, timeout=60, what="the ampere DaemonSet to go")
    assert placement(operator_sandbox)["hopper"][1:] == (IMAGE % "580.105.08", {"op-h100", "op-h200", "op-a100"})
    waited = ran(result, "Wait for ClusterPolicy ready and the operands on every GPU node")[0]
    assert waited["drivers"]["op-a100"]["nvidia_driver"] == "hopper", waited["drivers"]
    assert waited["drivers"]["op-a100"]["image"] == IMAGE % "580.105.08"


def test_an_empty_list_returns_the_driver_to_clusterpolicy_and_keeps_what_the_role_did_not_create(operator_sandbox):
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(RUN, gpu_operator_nvidia_drivers=[]))
    assert result.rc == 0, result
    assert operator_sandbox.policy()["spec"]["driver"]["useNvidiaDriverCRD"] is False
    assert sorted(nvidia_drivers(operator_sandbox)) == ["kept"]
    assert set(node_labels(operator_sandbox, POOL_LABEL).values()) == {None}
    waited = ran(result, "Wait for ClusterPolicy ready and the operands on every GPU node")[0]
    for node in ("op-h100", "op-h200", "op-a100"):
        assert waited["drivers"][node]["source"] == "ClusterPolicy", waited["drivers"]
    result = operator_sandbox.site("--tags", "operator", extra_vars=dict(RUN, gpu_operator_nvidia_drivers=[]))
    assert result.rc == 0 and result.changed == 0, result
