# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The testbed's own promises: real versions, loopback only, side-by-side clusters, clean teardown."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys

import pytest
from kubernetes import client

from tests.testbed.cluster import COMPONENTS, REPO_ROOT, Cluster, TestbedError, pids_mentioning


def _listening_sockets():
    """{socket inode: (table, local address hex, port)} for every TCP socket in LISTEN state."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    addr, hexport = fields[1].split(":")
                    found[fields[9]] = (table, addr, int(hexport, 16))
    return found


def _socket_inodes(pid):
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def test_server_reports_the_stamped_release(testbed):
    version = client.VersionApi(testbed.api_client()).get_code()
    # build.sh stamps the release with ldflags; unstamped builds report v0.0.0-master (reference §1.4).
    assert version.git_version.startswith("v1.36."), version
    assert (version.major, version.minor) == ("1", "36")
    assert "v3." in testbed.helm("version", "--short").stdout


def test_components_listen_on_loopback_only(testbed):
    assert testbed.cluster is not None, "reused kubeconfig is not <dir>/kubeconfig of a tests/testbed/cluster.py cluster"
    ports = testbed.cluster.ports()
    assert len(ports) == 6 and all(ports.values()), ports
    listening = _listening_sockets()
    loopback = "0100007F"  # 127.0.0.1 in /proc/net/tcp's little-endian hex
    seen_ports = set()
    for component in COMPONENTS:
        sockets = [listening[i] for i in _socket_inodes(testbed.cluster.pid(component)) if i in listening]
        assert sockets, "%s listens nowhere?" % component
        for table, addr, port in sockets:
            assert (table, addr) == ("/proc/net/tcp", loopback), "%s listens on %s %s:%d" % (component, table, addr, port)
            seen_ports.add(port)
    # Every port cluster.py chose is in use by the cluster, all on 127.0.0.1.
    assert set(ports.values()) <= seen_ports, (ports, seen_ports)
    assert all(s["healthy"] for s in testbed.cluster.status().values())


def test_second_cluster_runs_side_by_side_and_leaves_no_process(testbed, tmp_path):
    side = Cluster(name="side-%d" % os.getpid(), directory=tmp_path / "side", bin_dir=testbed.bin_dir)
    try:
        side.up(timeout=90)
        assert set(side.ports().values()).isdisjoint(testbed.cluster.ports().values())
        out = subprocess.run([str(testbed.bin_dir / "kubectl"), "--kubeconfig", str(side.kubeconfig), "get", "ns",
                              "default", "-o", "name"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "namespace/default"
        assert testbed.kubectl("get", "--raw", "/readyz").stdout == "ok"
        pids = [side.pid(c) for c in COMPONENTS]
        assert all(pids), pids
    finally:
        side.down()
    assert pids_mentioning(str(side.cluster_dir) + os.sep) == []
    pgrep = subprocess.run(["pgrep", "-f", str(side.cluster_dir)], capture_output=True, text=True, check=False)
    assert pgrep.returncode == 1 and pgrep.stdout == "", "pgrep still finds: %s" % pgrep.stdout
    assert not side.kubeconfig.exists()
    assert testbed.kubectl("get", "--raw", "/readyz").stdout == "ok", "the session cluster survived"


def test_start_failure_names_the_component(testbed, tmp_path):
    """A component that cannot start is named in the error, and nothing is left running."""
    bins = tmp_path / "bin"
    bins.mkdir()
    for binary in testbed.bin_dir.iterdir():
        (bins / binary.name).symlink_to(binary)
    (bins / "etcd").unlink()
    # Answers kwokctl's version probe like etcd, then dies like a broken etcd would.
    (bins / "etcd").write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'etcd Version: 3.6.16'; exit 0; }\n"
                               "echo 'simulated etcd crash' >&2; exit 1\n")
    (bins / "etcd").chmod(0o755)
    broken = Cluster(name="broken-%d" % os.getpid(), directory=tmp_path / "broken", bin_dir=bins)
    with pytest.raises(TestbedError) as failure:
        broken.up(timeout=15)
    message = str(failure.value)
    assert "first unhealthy: etcd" in message, message
    assert "simulated etcd crash" in message, message
    assert pids_mentioning(str(broken.cluster_dir) + os.sep) == []


def test_killed_owner_does_not_leak_the_cluster(testbed, tmp_path):
    """A test run killed with SIGKILL (no fixture teardown) still leaves no cluster process behind."""
    directory = tmp_path / "orphan"
    owner = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-c",
         "import os, sys, time\n"
         "from tests.testbed.cluster import Cluster\n"
         "c = Cluster(sys.argv[1], sys.argv[2], sys.argv[3])\n"
         "c.up(timeout=90)\n"
         "c.start_reaper(os.getpid())\n"
         "print('up', flush=True)\n"
         "time.sleep(600)\n",
         "orphan-%d" % os.getpid(), str(directory), str(testbed.bin_dir)],
        cwd=str(REPO_ROOT), stdout=subprocess.PIPE, text=True)
    orphan = Cluster("orphan-%d" % os.getpid(), directory, testbed.bin_dir)
    try:
        assert owner.stdout.readline().strip() == "up"
        assert all(orphan.pid(c) for c in COMPONENTS)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        testbed.wait_for(lambda: not pids_mentioning(str(orphan.cluster_dir) + os.sep), 45,
                         "the reaper to stop the orphaned cluster")
        assert "exited without stopping" in (directory / "reaper.log").read_text()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        orphan.down()
