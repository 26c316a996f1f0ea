# -*- coding: utf-8 -*-
# Copyright (c) gpufleet maintainers; Apache-2.0
"""Verifier fixtures shared by the Molecule scenarios in extensions/molecule/.

Molecule hands testinfra the scenario inventory; the instances there use Ansible's community.general.chroot
connection, which testinfra would drive through a full Ansible run per command. The chroot path is the host's
ansible_host, so the tests talk to it with testinfra's own chroot backend instead (one `chroot` call per command).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import testinfra


@pytest.fixture
def host(_testinfra_host):
    rootfs = _testinfra_host.backend.get_variables()["ansible_host"]
    return testinfra.get_host(rootfs, connection="chroot")


@pytest.fixture
def instance_name(_testinfra_host):
    """The Molecule platform name of the instance under test."""
    return _testinfra_host.backend.host
