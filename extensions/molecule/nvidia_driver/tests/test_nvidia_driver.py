# -*- coding: utf-8 -*-
# Copyright (c) gpufleet maintainers; Apache-2.0
"""What the nvidia_driver role left in a Debian 12 root filesystem (Molecule verify step)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

REPORT = "/var/lib/gpufleet-molecule-nvidia-driver-report.json"


def test_driver_user_space_packages_come_from_debian_non_free(host):
    for name in ("nvidia-smi", "libnvidia-ml1", "nvidia-persistenced"):
        assert host.package(name).is_installed, name
    policy = host.check_output("apt-cache policy libnvidia-ml1")
    assert "non-free" in policy


def test_non_free_components_are_added_in_their_own_file(host):
    added = host.file("/etc/apt/sources.list.d/gpufleet-nvidia-driver.list")
    assert added.exists
    assert "bookworm contrib non-free non-free-firmware" in added.content_string
    assert "bookworm-updates contrib non-free non-free-firmware" in added.content_string
    # the host's own sources stay as debootstrap wrote them
    assert "non-free" not in host.file("/etc/apt/sources.list").content_string


def test_nouveau_is_blacklisted_for_modprobe(host):
    conf = host.file("/etc/modprobe.d/gpufleet-blacklist-nouveau.conf")
    assert conf.mode == 0o644
    # kmod's own view of the merged modprobe configuration, not just the file text
    showconfig = host.check_output("modprobe --showconfig")
    assert "blacklist nouveau" in showconfig.splitlines()
    assert "options nouveau modeset=0" in showconfig.splitlines()


def test_persistence_daemon_unit_is_enabled(host):
    # systemctl works offline on the unit files inside a chroot; nothing is started there
    assert host.check_output("systemctl is-enabled nvidia-persistenced.service") == "enabled"
    assert host.file("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").is_symlink


def test_report_names_the_installed_version_and_the_pending_reboot(host):
    report = json.loads(host.file(REPORT).content_string)
    installed = host.package("libnvidia-ml1").version.split("-")[0]
    assert report["action"] == "install"
    assert report["installed_version"] == installed
    # no nvidia module is loaded in a chroot, so the installed driver is not the loaded one
    assert report["loaded_version"] == ""
    assert report["reboot_required"] is True


def test_nvidia_smi_runs_but_finds_no_kernel_driver(host):
    # the user-space tool is real and executes; the kernel module build is outside what a chroot can do
    result = host.run("nvidia-smi")
    assert result.rc != 0
    assert "NVIDIA driver" in result.stdout + result.stderr
