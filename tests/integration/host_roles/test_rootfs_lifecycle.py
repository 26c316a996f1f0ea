# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""extensions/molecule/tools/rootfs.sh: what Molecule's create/destroy mount inside an instance comes off again,
and deleting an instance never reaches through a mount into the host's files."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import tarfile
from pathlib import Path

ROOTFS_SH = Path(__file__).resolve().parents[3] / "extensions" / "molecule" / "tools" / "rootfs.sh"


def _mounts_below(path):
    targets = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], check=True, capture_output=True, text=True).stdout
    return [line for line in targets.splitlines() if line.startswith(str(path) + "/")]


def _tiny_rootfs_tarball(tmp_path):
    tree = tmp_path / "tree"
    for sub in ("proc", "etc", "usr/sbin", "var/cache/apt/archives"):
        (tree / sub).mkdir(parents=True)
    (tree / "etc" / "debian_version").write_text("12.8\n")
    tarball = tmp_path / "rootfs.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(tree, arcname=".")
    return tarball


def test_up_mounts_proc_and_apt_cache_and_down_removes_them_but_not_the_cache(tmp_path):
    assert os.geteuid() == 0, "rootfs.sh mounts and chroots: run the integration tests as root (CI does)"
    tarball = _tiny_rootfs_tarball(tmp_path)
    apt_cache = tmp_path / "apt-cache"
    apt_cache.mkdir()
    (apt_cache / "kept.deb").write_text("shared between runs\n")
    instance = tmp_path / "instance"

    subprocess.run([str(ROOTFS_SH), "up", str(instance), str(tarball), str(apt_cache)], check=True)
    try:
        assert sorted(_mounts_below(instance)) == [str(instance / "proc"), str(instance / "var/cache/apt/archives")]
        assert (instance / "var/cache/apt/archives/kept.deb").exists()  # the bind shows the shared cache
        assert (instance / "usr/sbin/policy-rc.d").read_text() == "#!/bin/sh\nexit 101\n"
        assert (instance / "etc/resolv.conf").exists()
    finally:
        subprocess.run([str(ROOTFS_SH), "down", str(instance)], check=True)

    assert _mounts_below(instance) == []
    assert not instance.exists()
    # deleting the instance did not reach through the bind mount
    assert (apt_cache / "kept.deb").read_text() == "shared between runs\n"


def test_up_twice_starts_from_a_fresh_copy(tmp_path):
    tarball = _tiny_rootfs_tarball(tmp_path)
    apt_cache = tmp_path / "apt-cache"
    instance = tmp_path / "instance"
    subprocess.run([str(ROOTFS_SH), "up", str(instance), str(tarball), str(apt_cache)], check=True)
    try:
        (instance / "etc" / "left-over").write_text("from the first run\n")
        subprocess.run([str(ROOTFS_SH), "up", str(instance), str(tarball), str(apt_cache)], check=True)
        assert not (instance / "etc" / "left-over").exists()
        assert len(_mounts_below(instance)) == 2  # the first run's mounts did not pile up
    finally:
        subprocess.run([str(ROOTFS_SH), "down", str(instance)], check=True)
    assert _mounts_below(instance) == []


def test_down_of_a_missing_instance_is_a_no_op(tmp_path):
    subprocess.run([str(ROOTFS_SH), "down", str(tmp_path / "never-created")], check=True)
    assert not (tmp_path / "never-created").exists()
