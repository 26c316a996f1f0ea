# -*- coding: utf-8 -*-
# Copyright (c) gpufleet maintainers; Apache-2.0
"""What the container_toolkit role left in Debian 12 root filesystems (Molecule verify step).

Instance "containerd": standalone containerd configured through the real nvidia-ctk.
Instance "k3s": a k3s agent, configured through k3s's own config.yaml.d.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tomllib

import yaml

FILES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "files")
CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"
K3S_DROP_IN = "/etc/rancher/k3s/config.yaml.d/50-gpufleet-nvidia-runtime.yaml"


def _cri(config):
    return config["plugins"]["io.containerd.grpc.v1.cri"]


def test_nvidia_runtime_is_in_the_drop_in_and_the_rest_is_kept(host, instance_name):
    if instance_name != "containerd":
        # k3s nodes: the standalone containerd config is not the one k3s reads and stays untouched
        assert "nvidia" not in host.file(CONFIG).content_string
        assert not host.file(DROP_IN).exists
        return
    main = tomllib.loads(host.file(CONFIG).content_string)
    drop_in = tomllib.loads(host.file(DROP_IN).content_string)
    assert "/etc/containerd/conf.d/*.toml" in main["imports"]
    cri = _cri(drop_in)
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["enable_cdi"] is True
    # what the node had before is still in the main config, and the drop-in carries the same CRI settings
    assert main["root"] == "/var/lib/containerd"
    for section in (_cri(main), cri):
        assert section["sandbox_image"] == "registry.k8s.io/pause:3.10"
        assert section["cni"] == {"bin_dir": "/opt/cni/bin", "conf_dir": "/etc/cni/net.d", "max_conf_num": 1}
        assert section["containerd"]["snapshotter"] == "overlayfs"
        assert section["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
        assert section["registry"]["config_path"] == "/etc/containerd/certs.d"
        assert section["registry"]["configs"]["registry.gpufleet.test:5000"]["auth"]["username"] == "puller"


def test_containerd_itself_loads_the_config(host, instance_name):
    # Debian's containerd binary parses the main config and its imports and merges them as the daemon does at start
    dump = host.check_output("containerd --config %s config dump", CONFIG)
    if instance_name != "containerd":
        assert 'default_runtime_name = "nvidia"' not in dump
        return
    assert 'default_runtime_name = "nvidia"' in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'conf_dir = "/etc/cni/net.d"' in dump
    assert 'config_path = "/etc/containerd/certs.d"' in dump


def test_previous_containerd_config_is_backed_up_once(host, instance_name):
    backups = host.check_output("ls -1 /etc/containerd").split()
    backups = [name for name in backups if name.endswith(".gpufleet-backup")]
    if instance_name != "containerd":
        assert backups == []
        return
    # one change, one backup: the idempotence run wrote nothing
    assert len(backups) == 1
    assert "A cluster node's containerd config" in host.file("/etc/containerd/" + backups[0]).content_string


def test_k3s_default_runtime_is_set_through_its_config_dir(host, instance_name):
    drop_in = host.file(K3S_DROP_IN)
    if instance_name != "k3s":
        assert not drop_in.exists
        return
    assert yaml.safe_load(drop_in.content_string) == {"default-runtime": "nvidia"}


def test_k3s_generated_config_and_template_are_left_to_k3s(host, instance_name):
    if instance_name != "k3s":
        assert not host.file(K3S_DIR).exists
        return
    with open(os.path.join(FILES, "k3s-config.toml.tmpl"), encoding="utf-8") as handle:
        assert host.file(K3S_DIR + "/config.toml.tmpl").content_string == handle.read()
    assert not host.file(K3S_DIR + "/config.toml").exists
