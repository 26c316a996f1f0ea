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
- NVML profile index constants: NVIDIA/go-nvml pkg/nvml/nvml.h (NVML_GPU_INSTANCE_PROFILE_*); A30 ids/placements: observed
  ``nvidia-smi mig -lgipp`` output (names and counts: the guide's A30 table);
- PCI device ids: the static config's device filters (same 0400_configmap.yaml);
- H200 memory MB, SMs and engines: real NVML read (tests/fixtures/h200/gpu_info_direct.json); A100 MB/SMs: go-nvml
  mock (NVIDIA/go-nvml pkg/nvml/mock/gpus/a100.go); H100 SMs: observed ``nvidia-smi mig -lgip``.
  Unknown figures are None, never guessed.
- B200 placements are not published in these sources: assumed to be the 7-slice layout because its
  names and instance counts match it one to one (guide Table 9). Marked ``placements_source``.
- memory_mb of a model is the nominal size (name GB x 1024) except where a real read gives it.
- Models added from the static config's device filters (GH200 0x2342 and 0x2348, H100 96GB 0x233D,
  H20 0x2329, PG506 0x20B6, GB200 0x2941, B300 0x3182, GB300 0x31C2, RTX PRO 6000 Blackwell 0x2BB5):
  profile names and maximum instance counts from NVIDIA's MIG User Guide "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) as the
  static config restates them (every all-<profile> config gives a profile's maximum per GPU, and
  all-balanced's device filters tie the names to the PCI ids). Their SMs, engines, per-profile memory
  MB and nvidia-smi profile ids are unknown here and stay None; their placements are assumed to be
  the 7-slice (or, for RTX PRO 6000, the 4-slice) layout because names and counts match it one to
  one (marked ``placements_source``); their NVML names are NVIDIA's product names, not read from a
  driver, so the PCI id (which get_model prefers) is what identifies them. memory_mb is the 7g (4g
  for RTX PRO 6000) profile's GB x 1024, as for B200.
- boards: every GPU a model's profile table serves, as (NVML name, PCI device id). The PCI ids are the static
  config's device filters, grouped by the config's own comments (e.g. "H100-80GB, H800-80GB, A100-80GB,
  A800-80GB"); the board each id is comes from the PCI ID database go-nvlib vendors
  (NVIDIA/go-nvlib pkg/pciids/default_pci.ids, e.g. 2331 "GH100 [H100 PCIe]"). The NVML name is what
  GFD builds ``nvidia.com/gpu.product`` from; names read from a driver in public sources: A100-SXM4-40GB,
  A100-PCIE-40GB, A100-SXM4-80GB, A100 80GB PCIe, H100 80GB HBM3, H100 PCIe, H100 NVL, H200 (real read here),
  B300 SXM6 AC, GB300. The other names (A800 40GB PCIe, A800-SXM4-80GB, A800 80GB PCIe, H800, H800 PCIe,
  H800 NVL, H200 NVL, H100 96GB, GH200 480GB, GH200 144G HBM3e, H20, PG506-96GB, B200, GB200, RTX PRO 6000
  Blackwell Server Edition) are inferred from NVIDIA's product names in the same pattern; the PCI id, which
  planning prefers, identifies those boards. A board with id None is a name only (no device filter lists it).
- STATIC_DEFAULT_CONFIG: NVIDIA's static default MIG config, ConfigMap default-mig-parted-config
  (key config.yaml) of gpu-operator v26.7.0, assets/state-mig-manager/0400_configmap.yaml, every
  named config and device filter as published (81 configs). all-3g.95gb, all-4g.95gb and
  all-7g.189gb name no GPU by device filter, so no catalog model has them.
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

# RTX PRO 6000 Blackwell (guide Table 11): 4 compute and 4 memory slices like A30, with graphics
# (+gfx), all-media-engine (+me.all) and no-media-engine (-me) variants. NVML indices from nvml.h
# (1_SLICE_GFX 0xA, 2_SLICE_GFX 0xB, 4_SLICE_GFX 0xC, 1_SLICE_NO_ME 0xD, 2_SLICE_NO_ME 0xE,
# 1_SLICE_ALL_ME 0xF, 2_SLICE_ALL_ME 0x10); nvidia-smi ids unknown (None); placements assumed as A30's.
FOUR_SLICE_GFX_LAYOUT = (
    ("1g", 0x0, None, 1, 1, 4, (0, 1, 2, 3)),
    ("1g+me", 0x7, None, 1, 1, 1, (0, 1, 2, 3)),
    ("1g+gfx", 0xA, None, 1, 1, 4, (0, 1, 2, 3)),
    ("1g+me.all", 0xF, None, 1, 1, 1, (0, 1, 2, 3)),
    ("1g-me", 0xD, None, 1, 1, 4, (0, 1, 2, 3)),
    ("2g", 0x1, None, 2, 2, 2, (0, 2)),
    ("2g+gfx", 0xB, None, 2, 2, 2, (0, 2)),
    ("2g+me.all", 0x10, None, 2, 2, 1, (0, 2)),
    ("2g-me", 0xE, None, 2, 2, 2, (0, 2)),
    ("4g", 0x3, None, 4, 4, 1, (0,)),
    ("4g+gfx", 0xC, None, 4, 4, 1, (0,)),
)

LAYOUTS = {"seven": SEVEN_SLICE_LAYOUT, "four": FOUR_SLICE_LAYOUT, "four-gfx": FOUR_SLICE_GFX_LAYOUT}

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

ASSUMED_SEVEN = "assumed: 7-slice layout (names and counts match it); not read on hardware"

MODELS = (
    {
        "name": "NVIDIA A100-SXM4-40GB",
        "boards": (
            ("NVIDIA A100-SXM4-40GB", "0x20B010DE"),
            ("NVIDIA A100-PCIE-40GB", "0x20B110DE"),
            ("NVIDIA A100-PCIE-40GB", "0x20F110DE"),
            ("NVIDIA A800 40GB PCIe", "0x20F610DE"),
            ("NVIDIA A800-SXM4-40GB", None),
        ),
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
        "boards": (
            ("NVIDIA A100-SXM4-80GB", "0x20B210DE"),
            ("NVIDIA A100 80GB PCIe", "0x20B510DE"),
            ("NVIDIA A800-SXM4-80GB", "0x20F310DE"),
            ("NVIDIA A800 80GB PCIe", "0x20F510DE"),
        ),
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
        "boards": (
            ("NVIDIA H100 80GB HBM3", "0x233010DE"),
            ("NVIDIA H100 PCIe", "0x233110DE"),
            ("NVIDIA H800 PCIe", "0x232210DE"),
            ("NVIDIA H800", "0x232410DE"),
        ),
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
        "boards": (("NVIDIA H100 NVL", "0x232110DE"), ("NVIDIA H800 NVL", "0x233A10DE")),
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
        "boards": (("NVIDIA H200", "0x233510DE"), ("NVIDIA H200 NVL", "0x233B10DE")),
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
        "boards": (("NVIDIA A30", "0x20B710DE"),),
        "memory_mb": 24576,
        "layout": "four",
        "names": {"1g": "1g.6gb", "1g+me": "1g.6gb+me", "2g": "2g.12gb", "2g+me": "2g.12gb+me", "4g": "4g.24gb"},
        "profile_memory_mb": {},
        "sms": {"1g": 14, "1g+me": 14, "2g": 28, "2g+me": 28, "4g": 56},
        "engines": {},
    },
    {
        "name": "NVIDIA B200",
        "boards": (("NVIDIA B200", "0x290110DE"),),
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
    {
        "name": "NVIDIA H100 96GB",
        "boards": (("NVIDIA H100 96GB", "0x233D10DE"),),
        "memory_mb": 98304,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.12gb", "1g+me": "1g.12gb+me", "1g-2m": "1g.24gb", "2g": "2g.24gb",
                  "3g": "3g.48gb", "4g": "4g.48gb", "7g": "7g.96gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA GH200 480GB",
        "boards": (("NVIDIA GH200 480GB", "0x234210DE"),),
        "memory_mb": 98304,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.12gb", "1g+me": "1g.12gb+me", "1g-2m": "1g.24gb", "2g": "2g.24gb",
                  "3g": "3g.48gb", "4g": "4g.48gb", "7g": "7g.96gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA GH200 144G HBM3e",
        "boards": (("NVIDIA GH200 144G HBM3e", "0x234810DE"),),
        "memory_mb": 147456,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.18gb", "1g+me": "1g.18gb+me", "1g-2m": "1g.36gb", "2g": "2g.36gb",
                  "3g": "3g.72gb", "4g": "4g.72gb", "7g": "7g.144gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA H20",
        "boards": (("NVIDIA H20", "0x232910DE"),),
        "memory_mb": 98304,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.12gb", "1g+me": "1g.12gb+me", "1g-2m": "1g.24gb", "2g": "2g.24gb",
                  "3g": "3g.48gb", "4g": "4g.48gb", "7g": "7g.96gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA PG506-96GB",
        "boards": (("NVIDIA PG506-96GB", "0x20B610DE"),),
        "memory_mb": 98304,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.12gb", "1g+me": "1g.12gb+me", "1g-2m": "1g.24gb", "2g": "2g.24gb",
                  "3g": "3g.48gb", "4g": "4g.48gb", "7g": "7g.96gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA GB200",
        "boards": (("NVIDIA GB200", "0x294110DE"),),
        "memory_mb": 190464,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.23gb", "1g+me": "1g.23gb+me", "1g-2m": "1g.47gb", "2g": "2g.47gb",
                  "3g": "3g.93gb", "4g": "4g.93gb", "7g": "7g.186gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA B300 SXM6 AC",
        "boards": (("NVIDIA B300 SXM6 AC", "0x318210DE"),),
        "memory_mb": 275456,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.34gb", "1g+me": "1g.34gb+me", "1g-2m": "1g.67gb", "2g": "2g.67gb",
                  "3g": "3g.135gb", "4g": "4g.135gb", "7g": "7g.269gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA GB300",
        "boards": (("NVIDIA GB300", "0x31C210DE"),),
        "memory_mb": 284672,
        "layout": "seven",
        "placements_source": ASSUMED_SEVEN,
        "names": {"1g": "1g.35gb", "1g+me": "1g.35gb+me", "1g-2m": "1g.70gb", "2g": "2g.70gb",
                  "3g": "3g.139gb", "4g": "4g.139gb", "7g": "7g.278gb"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
    {
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "boards": (("NVIDIA RTX PRO 6000 Blackwell Server Edition", "0x2BB510DE"),),
        "memory_mb": 98304,
        "layout": "four-gfx",
        "placements_source": "assumed: 4-slice layout of A30 (names and counts match it); not read on hardware",
        "names": {"1g": "1g.24gb", "1g+me": "1g.24gb+me", "1g+gfx": "1g.24gb+gfx", "1g+me.all": "1g.24gb+me.all",
                  "1g-me": "1g.24gb-me", "2g": "2g.48gb", "2g+gfx": "2g.48gb+gfx", "2g+me.all": "2g.48gb+me.all",
                  "2g-me": "2g.48gb-me", "4g": "4g.96gb", "4g+gfx": "4g.96gb+gfx"},
        "profile_memory_mb": {},
        "sms": {},
        "engines": {},
    },
)

# The static default MIG config (see the module docstring): (config name, ((device filter, mig-devices), ...)).
# Every entry is "devices: all" with MIG enabled; a device filter is a tuple of PCI ids, one id as a plain
# string (as NVIDIA writes A30's), or None for no filter. all-disabled and all-enabled come first.
STATIC_DEFAULT_CONFIG = (
    ("all-1g.5gb", ((None, {"1g.5gb": 7}),)),
    ("all-1g.5gb.me", ((None, {"1g.5gb+me": 1}),)),
    ("all-2g.10gb", ((None, {"2g.10gb": 3}),)),
    ("all-3g.20gb", ((None, {"3g.20gb": 2}),)),
    ("all-4g.20gb", ((None, {"4g.20gb": 1}),)),
    ("all-7g.40gb", ((None, {"7g.40gb": 1}),)),
    ("all-1g.24gb.gfx", ((None, {"1g.24gb+gfx": 4}),)),
    ("all-1g.24gb.me.all", ((None, {"1g.24gb+me.all": 1}),)),
    ("all-1g.24gb-me", ((None, {"1g.24gb-me": 4}),)),
    ("all-2g.48gb", ((None, {"2g.48gb": 2}),)),
    ("all-2g.48gb.gfx", ((None, {"2g.48gb+gfx": 2}),)),
    ("all-2g.48gb.me.all", ((None, {"2g.48gb+me.all": 1}),)),
    ("all-2g.48gb-me", ((None, {"2g.48gb-me": 2}),)),
    ("all-4g.96gb", ((None, {"4g.96gb": 1}),)),
    ("all-4g.96gb.gfx", ((None, {"4g.96gb+gfx": 1}),)),
    ("all-1g.10gb", (
        (("0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE",
         "0x20F310DE", "0x20F510DE", "0x232410DE"),
         {"1g.10gb": 7}),
        (("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"), {"1g.10gb": 4}),
    )),
    ("all-1g.10gb.me", ((None, {"1g.10gb+me": 1}),)),
    ("all-1g.20gb", ((None, {"1g.20gb": 4}),)),
    ("all-1g.23gb", ((None, {"1g.23gb": 7}),)),
    ("all-1g.23gb.me", ((None, {"1g.23gb+me": 1}),)),
    ("all-1g.24gb.me", ((None, {"1g.24gb+me": 1}),)),
    ("all-2g.20gb", ((None, {"2g.20gb": 3}),)),
    ("all-3g.40gb", ((None, {"3g.40gb": 2}),)),
    ("all-4g.40gb", ((None, {"4g.40gb": 1}),)),
    ("all-7g.80gb", ((None, {"7g.80gb": 1}),)),
    ("all-1g.6gb", ((None, {"1g.6gb": 4}),)),
    ("all-1g.6gb.me", ((None, {"1g.6gb+me": 1}),)),
    ("all-2g.12gb", ((None, {"2g.12gb": 2}),)),
    ("all-2g.12gb.me", ((None, {"2g.12gb+me": 1}),)),
    ("all-4g.24gb", ((None, {"4g.24gb": 1}),)),
    ("all-1g.12gb", ((None, {"1g.12gb": 7}),)),
    ("all-1g.12gb.me", ((None, {"1g.12gb+me": 1}),)),
    ("all-1g.24gb", ((None, {"1g.24gb": 4}),)),
    ("all-1g.45gb", ((None, {"1g.45gb": 4}),)),
    ("all-1g.47gb", ((None, {"1g.47gb": 4}),)),
    ("all-2g.24gb", ((None, {"2g.24gb": 3}),)),
    ("all-2g.45gb", ((None, {"2g.45gb": 3}),)),
    ("all-2g.47gb", ((None, {"2g.47gb": 3}),)),
    ("all-3g.47gb", ((None, {"3g.47gb": 2}),)),
    ("all-4g.47gb", ((None, {"4g.47gb": 1}),)),
    ("all-7g.94gb", ((None, {"7g.94gb": 1}),)),
    ("all-3g.48gb", ((None, {"3g.48gb": 2}),)),
    ("all-3g.90gb", ((None, {"3g.90gb": 2}),)),
    ("all-3g.93gb", ((None, {"3g.93gb": 2}),)),
    ("all-3g.95gb", ((None, {"3g.95gb": 2}),)),
    ("all-4g.48gb", ((None, {"4g.48gb": 1}),)),
    ("all-4g.90gb", ((None, {"4g.90gb": 1}),)),
    ("all-4g.93gb", ((None, {"4g.93gb": 1}),)),
    ("all-4g.95gb", ((None, {"4g.95gb": 1}),)),
    ("all-7g.96gb", ((None, {"7g.96gb": 1}),)),
    ("all-7g.180gb", ((None, {"7g.180gb": 1}),)),
    ("all-7g.186gb", ((None, {"7g.186gb": 1}),)),
    ("all-7g.189gb", ((None, {"7g.189gb": 1}),)),
    ("all-balanced", (
        (("0x294110DE",), {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
        (("0x2BB510DE",), {"1g.24gb": 2, "2g.48gb": 1}),
        (("0x290110DE",), {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
        (("0x234810DE",), {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
        (("0x233510DE", "0x233B10DE"), {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        (("0x232110DE", "0x233A10DE"), {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        (("0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE",
         "0x20F310DE", "0x20F510DE", "0x232410DE"),
         {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        (("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"), {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        ("0x20B710DE", {"1g.6gb": 2, "2g.12gb": 1}),
        (("0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"), {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
        (("0x318210DE",), {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
        (("0x31C210DE",), {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
    )),
    ("all-1g.18gb", ((None, {"1g.18gb": 7}),)),
    ("all-1g.18gb.me", ((None, {"1g.18gb+me": 1}),)),
    ("all-1g.35gb", (
        (("0x233510DE",), {"1g.35gb": 4}),
        (("0x31C210DE",), {"1g.35gb": 7}),
    )),
    ("all-2g.35gb", ((None, {"2g.35gb": 3}),)),
    ("all-3g.71gb", ((None, {"3g.71gb": 2}),)),
    ("all-4g.71gb", ((None, {"4g.71gb": 1}),)),
    ("all-7g.141gb", ((None, {"7g.141gb": 1}),)),
    ("all-1g.36gb", ((None, {"1g.36gb": 4}),)),
    ("all-2g.36gb", ((None, {"2g.36gb": 3}),)),
    ("all-3g.72gb", ((None, {"3g.72gb": 2}),)),
    ("all-4g.72gb", ((None, {"4g.72gb": 1}),)),
    ("all-7g.144gb", ((None, {"7g.144gb": 1}),)),
    ("all-1g.34gb", ((None, {"1g.34gb": 7}),)),
    ("all-1g.34gb.me", ((None, {"1g.34gb+me": 1}),)),
    ("all-1g.67gb", ((None, {"1g.67gb": 4}),)),
    ("all-2g.67gb", ((None, {"2g.67gb": 3}),)),
    ("all-3g.135gb", ((None, {"3g.135gb": 2}),)),
    ("all-4g.135gb", ((None, {"4g.135gb": 1}),)),
    ("all-7g.269gb", ((None, {"7g.269gb": 1}),)),
    ("all-1g.35gb.me", ((None, {"1g.35gb+me": 1}),)),
    ("all-1g.70gb", ((None, {"1g.70gb": 4}),)),
    ("all-2g.70gb", ((None, {"2g.70gb": 3}),)),
    ("all-3g.139gb", ((None, {"3g.139gb": 2}),)),
    ("all-4g.139gb", ((None, {"4g.139gb": 1}),)),
    ("all-7g.278gb", ((None, {"7g.278gb": 1}),)),
)
