# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The host roles' per-platform package names, pins and repository paths, rendered by Ansible's own templar.

The Molecule scenarios run the Debian 12 path for real; NVIDIA's repositories for Ubuntu and RHEL are out of reach
here, so these tests render the exact expressions the roles use (their vars files and set_fact templates) with the
facts of those platforms.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

ROLES = Path(__file__).resolve().parents[3] / "roles"
LOADER = DataLoader()

FACTS = {
    "ubuntu2204": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_version": "22.04",
                   "distribution_major_version": "22", "architecture": "x86_64", "kernel": "5.15.0-130-generic"},
    "ubuntu2404-arm": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_version": "24.04",
                       "distribution_major_version": "24", "architecture": "aarch64", "kernel": "6.8.0-51-generic"},
    "ubuntu2004": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_version": "20.04",
                   "distribution_major_version": "20", "architecture": "x86_64", "kernel": "5.4.0-200-generic"},
    "rhel9": {"distribution": "RedHat", "os_family": "RedHat", "distribution_version": "9.5",
              "distribution_major_version": "9", "architecture": "x86_64", "kernel": "5.14.0-503.el9.x86_64"},
    "rhel8": {"distribution": "Rocky", "os_family": "RedHat", "distribution_version": "8.10",
              "distribution_major_version": "8", "architecture": "x86_64", "kernel": "4.18.0-553.el8_10.x86_64"},
    "debian12": {"distribution": "Debian", "os_family": "Debian", "distribution_version": "12.8",
                 "distribution_major_version": "12", "architecture": "x86_64", "kernel": "6.1.0-28-amd64"},
}


def _load(path):
    return LOADER.load_from_file(str(path), trusted_as_template=True)


def _task_expression(role, tasks_file, task_name, key):
    for task in _load(ROLES / role / "tasks" / tasks_file):
        if task.get("name") == task_name:
            return task["ansible.builtin.set_fact"][key]
    raise AssertionError("no task %r in %s/tasks/%s" % (task_name, role, tasks_file))


def _driver_templar(platform, **overrides):
    facts = FACTS[platform]
    vars_file = ROLES / "nvidia_driver" / "vars" / ("%s.yml" % facts["distribution"])
    if not vars_file.exists():
        vars_file = ROLES / "nvidia_driver" / "vars" / ("%s.yml" % facts["os_family"])
    variables = dict(_load(ROLES / "nvidia_driver" / "defaults" / "main.yml"))
    variables.update(_load(vars_file))
    variables.update(overrides)
    variables["ansible_facts"] = facts
    variables["nvidia_driver_effective_branch"] = variables["nvidia_driver_branch"]
    return Templar(loader=LOADER, variables=variables), variables


def _driver_install_names(platform, **overrides):
    templar = _driver_templar(platform, **overrides)[0]
    expression = _task_expression("nvidia_driver", "validate.yml",
                                  "Settle the package names to install, with the version pin where one is wanted",
                                  "nvidia_driver_install_names")
    return templar.template(expression)


@pytest.mark.parametrize("platform, overrides, expected", [
    ("ubuntu2204", {}, ["nvidia-open-580"]),
    ("ubuntu2204", {"nvidia_driver_kernel_module": "proprietary"}, ["cuda-drivers-580"]),
    ("ubuntu2204", {"nvidia_driver_version": "580.126.20"}, ["nvidia-open-580=580.126.20*"]),
    ("rhel9", {}, ["@nvidia-driver:580-open"]),
    ("rhel9", {"nvidia_driver_version": "580.126.20"}, ["@nvidia-driver:580-open", "nvidia-driver-580.126.20"]),
    ("rhel8", {"nvidia_driver_kernel_module": "proprietary", "nvidia_driver_branch": "570"},
     ["@nvidia-driver:570-dkms"]),
    ("debian12", {"nvidia_driver_version": "535.261.03"},
     ["nvidia-kernel-dkms=535.261.03*", "nvidia-smi=535.261.03*", "libcuda1=535.261.03*", "nvidia-persistenced",
      "firmware-nvidia-gsp=535.261.03*"]),
    ("debian12", {"nvidia_driver_packages": ["nvidia-smi"]}, ["nvidia-smi"]),
])
def test_driver_packages_and_pins_per_platform(platform, overrides, expected):
    assert _driver_install_names(platform, **overrides) == expected


@pytest.mark.parametrize("platform, distro, arch, headers", [
    ("ubuntu2204", "ubuntu2204", "x86_64", ["linux-headers-5.15.0-130-generic"]),
    ("ubuntu2404-arm", "ubuntu2404", "sbsa", ["linux-headers-6.8.0-51-generic"]),
    ("rhel9", "rhel9", "x86_64", ["kernel-devel-5.14.0-503.el9.x86_64", "kernel-headers-5.14.0-503.el9.x86_64"]),
])
def test_driver_cuda_repository_path_and_kernel_headers(platform, distro, arch, headers):
    templar, variables = _driver_templar(platform)
    assert templar.template(variables["nvidia_driver_cuda_repo_distro"]) == distro
    assert templar.template(variables["nvidia_driver_cuda_arch"]) == arch
    assert templar.template(variables["nvidia_driver_platform_headers"]) == headers


@pytest.mark.parametrize("platform, supported", [
    ("ubuntu2204", True), ("ubuntu2404-arm", True), ("rhel8", True), ("rhel9", True), ("debian12", True),
    ("ubuntu2004", False),
])
def test_driver_supported_releases(platform, supported):
    templar, variables = _driver_templar(platform)
    release = templar.template(variables["nvidia_driver_platform_release"])
    assert (release in variables["nvidia_driver_platform_supported_versions"]) is supported


def _toolkit_variables(**overrides):
    variables = dict(_load(ROLES / "container_toolkit" / "defaults" / "main.yml"))
    variables.update(_load(ROLES / "container_toolkit" / "vars" / "main.yml"))
    variables.update(overrides)
    return Templar(loader=LOADER, variables=variables), variables


def _toolkit_install_names(manager, **overrides):
    templar = _toolkit_variables(**overrides)[0]
    task_name = "Install the toolkit packages with %s" % manager
    for task in _load(ROLES / "container_toolkit" / "tasks" / "install.yml"):
        if task.get("name") == task_name:
            return templar.template(task["ansible.builtin.%s" % manager]["name"])
    raise AssertionError("no task %r" % task_name)


def test_toolkit_packages_are_pinned_together():
    apt = _toolkit_install_names("apt")
    dnf = _toolkit_install_names("dnf")
    assert apt == ["nvidia-container-toolkit=1.20.0-1", "nvidia-container-toolkit-base=1.20.0-1",
                   "libnvidia-container-tools=1.20.0-1", "libnvidia-container1=1.20.0-1"]
    assert dnf == [name.replace("=", "-") for name in apt]
    assert _toolkit_install_names("apt", container_toolkit_version="") == [
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
        "libnvidia-container1"]


def test_toolkit_nvidia_ctk_arguments():
    templar, variables = _toolkit_variables(container_toolkit_set_as_default=True, container_toolkit_cdi_enabled=True)
    assert templar.template(variables["container_toolkit_ctk_args"]) == [
        "/usr/bin/nvidia-ctk", "--quiet", "runtime", "configure", "--runtime=containerd",
        "--config=/etc/containerd/config.toml", "--drop-in-config=/etc/containerd/conf.d/99-nvidia.toml",
        "--nvidia-runtime-name=nvidia", "--set-as-default", "--cdi.enabled"]
    templar, variables = _toolkit_variables()
    assert "--set-as-default" not in templar.template(variables["container_toolkit_ctk_args"])
