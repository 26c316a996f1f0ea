# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Each node's GPUs as dcgm-exporter reports them, in validate.node's short hardware form (pure, no I/O).

dcgm-exporter reads the GPUs through DCGM on the node, independently of GFD and the device plugin, and
labels each series with the GPU index, ``modelName`` and, for a MIG GPU instance, ``GPU_I_ID`` and
``GPU_I_PROFILE`` (NVIDIA/dcgm-exporter internal/pkg/collector; the GPU Operator deploys it on every GPU node
by default, ClusterPolicy spec.dcgmExporter).
What the series cannot say is left out, so validate.node does not compare it:
- the memory per GPU (a MIG GPU's series are per instance);
- compute instances smaller than their GPU instance (one MIG device per GPU instance is assumed);
- a GPU in MIG mode without instances is watched as the whole GPU, so it reads as a GPU without MIG.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def hardware_by_node(samples):
    """{node: {'gpus': [{'index', 'name', 'mig_enabled', 'mig_devices'}]}} from report.metrics samples."""
    nodes = {}
    for sample in samples:
        gpus = nodes.setdefault(sample["node"], {})
        gpu = gpus.setdefault(sample["gpu"], {"name": sample.get("model"), "instances": {}})
        if not gpu["name"] and sample.get("model"):
            gpu["name"] = sample["model"]
        if sample.get("gi_id") is not None:
            gpu["instances"][sample["gi_id"]] = sample.get("profile")
    return dict((node, {"gpus": [{"index": index, "name": gpu["name"], "mig_enabled": bool(gpu["instances"]),
                                  "mig_devices": [profile for _gi, profile in sorted(gpu["instances"].items()) if profile]}
                                 for index, gpu in sorted(gpus.items())]})
                for node, gpus in nodes.items())


def missing_reason(source):
    """The hardware_error of a node without any series: names the source and what to look at."""
    return ("no dcgm-exporter series for the node in %s (is the operator's dcgm-exporter running there, and "
            "scraped with the node name in its Hostname, node or kubernetes_node label?)" % source)
