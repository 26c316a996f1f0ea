"""NVIDIA's real GPU Operator controller on a testbed cluster (tests/testbed/operator.py): it runs only while
the chart's operator Deployment exists, in a private mount namespace with its assets, on loopback only, and
leaves no process once the cluster is stopped."""

import json
import os
import subprocess
import time
from pathlib import Path

from kubernetes import client

from tests.testbed import operator as real_operator
from tests.testbed.cluster import Cluster, pids_mentioning
from tests.testbed.pytest_cluster import Testbed

from tests.integration.testbed.test_cluster import _listening_sockets, _socket_inodes


def controller_pid(run_dir):
    """PID of the controller binary (not the supervisor) whose command line names run_dir."""
    for pid in pids_mentioning(str(run_dir)):
        try:
            exe = os.readlink("/proc/%d/exe" % pid)
        except OSError:
            continue
        if os.path.basename(exe) == "gpu-operator":
            return pid
    return None


def test_controller_runs_in_its_own_mount_namespace_and_stops_with_the_cluster(testbed, tmp_path):
    cluster = Cluster(name="realop-%d" % os.getpid(), directory=tmp_path / "c", bin_dir=testbed.bin_dir)
    run_dir = cluster.cluster_dir / "gpu-operator"
    controller = None
    try:
        cluster.up(timeout=90)
        bed = Testbed(cluster.kubeconfig, cluster.bin_dir, tmp_path, cluster=cluster)
        controller = real_operator.Controller(cluster.kubeconfig, run_dir, tmp_path / "gpu-operator.log").start()
        bed.create_node("gpu-1", labels=real_operator.NFD_GPU_NODE_LABELS)
        time.sleep(3)
        assert controller_pid(run_dir) is None, "the controller must wait for the chart's Deployment"
        values = dict(real_operator.TESTBED_CHART_VALUES, driver={"enabled": False}, toolkit={"enabled": False})
        bed.helm("install", "gpu-operator", str(real_operator.chart_dir()), "--namespace", "gpu-operator",
                 "--create-namespace", "--values", "-", input=json.dumps(values))
        pid = bed.wait_for(lambda: controller_pid(run_dir), 60, "the controller process")
        # Private mount namespace with the assets at /opt/gpu-operator; the host has neither path.
        assert os.readlink("/proc/%d/ns/mnt" % pid) != os.readlink("/proc/self/ns/mnt")
        assert Path("/proc/%d/root/opt/gpu-operator/state-mig-manager" % pid).is_dir()
        assert Path("/proc/%d/root/host-etc/os-release" % pid).read_text() == Path("/etc/os-release").read_text()
        assert not Path("/opt/gpu-operator").exists() and not Path("/host-etc").exists()
        # NVIDIA's controller labels the node and creates the operands, owned by the ClusterPolicy.

        def present():
            labels = bed.core.read_node("gpu-1").metadata.labels or {}
            return labels if labels.get("nvidia.com/gpu.present") == "true" else None
        labels = bed.wait_for(present, 90, "nvidia.com/gpu.present on gpu-1")
        assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
        apps = client.AppsV1Api(bed.api_client())
        ds = bed.wait_for(lambda: [d for d in apps.list_namespaced_daemon_set("gpu-operator").items
                                   if d.metadata.name == "nvidia-device-plugin-daemonset"], 90, "device-plugin DaemonSet")
        assert [o.kind for o in ds[0].metadata.owner_references] == ["ClusterPolicy"]
        lease = client.CoordinationV1Api(bed.api_client()).read_namespaced_lease("53822513.nvidia.com", "gpu-operator")
        assert lease.spec.holder_identity
        # Its metrics and health ports listen on 127.0.0.1 only.
        listening = _listening_sockets()
        mine = [listening[i] for i in _socket_inodes(pid) if i in listening]
        assert len(mine) == 2, mine
        assert all(table == "/proc/net/tcp" and addr == "0100007F" for table, addr, _port in mine), mine
        # helm uninstall removes the Deployment: the supervisor stops the controller. Without hooks: the chart's
        # pre-delete Jobs (cleanup_crd.yaml, cleanup_gpucluster.yaml) need a container runtime a kwok node lacks.
        bed.helm("uninstall", "gpu-operator", "--namespace", "gpu-operator", "--no-hooks")
        bed.wait_for(lambda: controller_pid(run_dir) is None, 60, "the controller to stop after helm uninstall")
        bed.helm("install", "gpu-operator", str(real_operator.chart_dir()), "--namespace", "gpu-operator",
                 "--values", "-", input=json.dumps(values))
        bed.wait_for(lambda: controller_pid(run_dir), 60, "the controller back after helm install")
    finally:
        cluster.down()  # stops the supervisor and the controller: their command lines name the cluster dir
        if controller is not None:
            controller.stop()  # reaps the supervisor (already gone)
    assert pids_mentioning(str(run_dir)) == []
    pgrep = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False)
    assert pgrep.returncode == 1, pgrep.stdout
