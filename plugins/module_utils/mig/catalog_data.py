# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Built-in MIG profile tables (data). Kept as Python, not JSON, because Ansible ships only .py
module_utils to a managed host.

Sources:
- profile names and instance counts: NVIDIA MIG User Guide "Supported MIG Profiles" and the static
  mig-parted config (NVIDIA/gpu-operator v26.7.0 assets/state-mig-manager/0400_configmap.yaml);
- nvidia-smi profile ids and placements of the 7-slice (GA100/GH100) layout: the guide's ``-lgipp``
  example and a real H200 read (tests/fixtures/h200/nvidia-smi-mig-lgipp.txt): 19/20 {0..6}:1, 15 {0,2,4,6}:2,
  14 {0,2,4}:2, 9 {0,4}:4, 5 {0}:4, 0 {0}:8;
- NVML profile index constants: go-nvml nvml.h (§5.4); A30 ids/placements: observed -lgipp (§5.2);
- PCI device ids: the static config's device filters (§4.2);
- H200 memory MB, SMs and engines: real NVML read (h200-nvml-reading.json); A100 MB/SMs: go-nvml
  mock (§5.3); H100 SMs: observed -lgip (§5.2). Unknown figures are None, never guessed.
- B200 placements are not published in these sources: assumed to be the 7-slice layout because its
  names and instance counts match it one to one (guide Table 9). Marked ``placements_source``.
- memory_mb of a model is the nominal size (name GB x 1024) except where a real read gives it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# (kind, NVML index, nvidia-smi id, compute slices, memory slices, max instances, placement starts)
# kind names the slot in each model's name list below.
SEVEN_SLICE_LAYOUT = (
    ("1g", 0x0, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("1g+me", 0x7, 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1g-2m", 0x9, 15, 1, 2, 4, (0, 2, 4, 6)),  # 1_SLICE_REV2: one compute slice, two memory slices
    ("2g", 0x1, 14, 2, 2, 3, (0, 2, 4)),
    ("3g", 0x2, 9, 3, 4, 2, (0, 4)),
    ("4g", 0x3, 5, 4, 4, 1, (0,)),
    ("7g", 0x4, 0, 7, 8, 1, (0,)),
)

FOUR_SLICE_LAYOUT = (
    ("1g", 0x0, 14, 1, 1, 4, (0, 1, 2, 3)),
    ("1g+me", 0x7, 21, 1, 1, 1, (0, 1, 2, 3)),
    ("2g", 0x1, 5, 2, 2, 2, (0, 2)),
    ("2g+me", 0x8, 6, 2, 2, 1, (0, 2)),
    ("4g", 0x3, 0, 4, 4, 1, (0,)),
)

# GH100 engines per profile, from the real H200 NVML read: (copy, decoder, encoder, jpeg, ofa).
_GH100_ENGINES = {
    "1g": (1, 1, 0, 1, 0), "1g+me": (1, 1, 0, 1, 1), "1g-2m": (1, 1, 0, 1, 0), "2g": (2, 2, 0, 2, 0),
    "3g": (3, 3, 0, 3, 0), "4g": (4, 4, 0, 4, 0), "7g": (8, 7, 0, 7, 1),
}
_GH100_SMS = {"1g": 16, "1g+me": 16, "1g-2m": 26, "2g": 32, "3g": 60, "4g": 64, "7g": 132}
# A100 decoders from the guide; copy engines unknown.
_GA100_ENGINES = {
    "1g": (None, 0, 0, 0, 0), "1g+me": (None, 1, 0, 1, 1), "1g-2m": (None, None, None, None, None),
    "2g": (None, 1, 0, 0, 0), "3g": (None, 2, 0, 0, 0), "4g": (None, 2, 0, 0, 0), "7g": (None, 5, 0, 1, 1),
}
_GA100_SMS = {"1g": 14, "1g+me": 14, "1g-2m": 14, "2g": 28, "3g": 42, "4g": 56, "7g": 98}

MODELS = (
    {
        "name": "NVIDIA A100-SXM4-40GB",
        "aliases": ("NVIDIA A100-PCIE-40GB", "NVIDIA A800-SXM4-40GB", "NVIDIA A800 40GB PCIe"),
        "pci_device_ids": ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
        "memory_mb": 40960,
        "layout": "seven",
        "names": {"1g": "1g.5gb", "1g+me": "1g.5gb+me", "1g-2m": "1g.10gb", "2g": "2g.10gb",
                  "3g": "3g.20gb", "4g": "4g.20gb", "7g": "7g.40gb"},
        "profile_memory_mb": {"1g": 4864, "1g+me": 4864, "1g-2m": 9856, "2g": 9856, "3g": 19968,
                              "4g": 19968, "7g": 40192},
        "sms": _GA100_SMS,
        "engines": _GA100_ENGINES,
    },
    {
        "name": "NVIDIA A100-SXM4-80GB",
        "aliases": ("NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"),
        "pci_device_ids": ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
        "memory_mb": 81920,
        "layout": "seven",
        "names": {"1g": "1g.10gb", "1g+me": "1g.10gb+me", "1g-2m": "1g.20gb", "2g": "2g.20gb",
                  "3g": "3g.40gb", "4g": "4g.40gb", "7g": "7g.80gb"},
        "profile_memory_mb": {"1g": 9856, "1g+me": 9856, "1g-2m": 19968, "2g": 19968, "3g": 40192,
                              "4g": 40192, "7g": 80384},
        "sms": _GA100_SMS,
        "engines": _GA100_ENGINES,
    },
    {
        "name": "NVIDIA H100 80GB HBM3",
        "aliases": ("NVIDIA H100 PCIe", "NVIDIA H800", "NVIDIA H800 PCIe"),
        "pci_device_ids": ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
        "memory_mb": 81920,
        "layout": "seven",
        "names": {"1g": "1g.10gb", "1g+me": "1g.10gb+me", "1g-2m": "1g.20gb", "2g": "2g.20gb",
                  "3g": "3g.40gb", "4g": "4g.40gb", "7g": "7g.80gb"},
        "profile_memory_mb": {},
        "sms": _GH100_SMS,
        "engines": _GH100_ENGINES,
    },
    {
        "name": "NVIDIA H100 NVL",
        "aliases": ("NVIDIA H800 NVL",),
        "pci_device_ids": ("0x232110DE", "0x233A10DE"),
        "memory_mb": 96256,
        "layout": "seven",
        "names": {"1g": "1g.12gb", "1g+me": "1g.12gb+me", "1g-2m": "1g.24gb", "2g": "2g.24gb",
                  "3g": "3g.47gb", "4g": "4g.47gb", "7g": "7g.94gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": _GH100_ENGINES,
    },
    {
        "name": "NVIDIA H200",
        "aliases": ("NVIDIA H200 NVL",),
        "pci_device_ids": ("0x233510DE", "0x233B10DE"),
        "memory_mb": 143771,  # real read: nvidia-smi 143771 MiB
        "layout": "seven",
        "names": {"1g": "1g.18gb", "1g+me": "1g.18gb+me", "1g-2m": "1g.35gb", "2g": "2g.35gb",
                  "3g": "3g.71gb", "4g": "4g.71gb", "7g": "7g.141gb"},
        "profile_memory_mb": {"1g": 16384, "1g+me": 16384, "1g-2m": 33280, "2g": 33280, "3g": 71424,
                              "4g": 71424, "7g": 143360},
        "sms": _GH100_SMS,
        "engines": _GH100_ENGINES,
    },
    {
        "name": "NVIDIA A30",
        "aliases": (),
        "pci_device_ids": ("0x20B710DE",),
        "memory_mb": 24576,
        "layout": "four",
        "names": {"1g": "1g.6gb", "1g+me": "1g.6gb+me", "2g": "2g.12gb", "2g+me": "2g.12gb+me", "4g": "4g.24gb"},
        "profile_memory_mb": {},
        "sms": {"1g": 14, "1g+me": 14, "2g": 28, "2g+me": 28, "4g": 56},
        "engines": {},
    },
    {
        "name": "NVIDIA B200",
        "aliases": (),
        "pci_device_ids": ("0x290110DE",),
        "memory_mb": 184320,
        "layout": "seven",
        "placements_source": "assumed: 7-slice layout (names and counts match it); not read on hardware",
        "names": {"1g": "1g.23gb", "1g+me": "1g.23gb+me", "1g-2m": "1g.45gb", "2g": "2g.45gb",
                  "3g": "3g.90gb", "4g": "4g.90gb", "7g": "7g.180gb"},
        "profile_memory_mb": {},
        "sms": {},
        # copy engines from guide Table 9; other engines unknown
        "engines": {"1g": (2, None, None, None, None), "1g+me": (2, None, None, None, None),
                    "1g-2m": (2, None, None, None, None), "2g": (3, None, None, None, None),
                    "3g": (6, None, None, None, None), "4g": (8, None, None, None, None),
                    "7g": (16, None, None, None, None)},
    },
)
