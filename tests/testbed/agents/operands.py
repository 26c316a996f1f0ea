"""What GPU Feature Discovery and the device plugin derive from a host's GPUs (pure, no I/O).

Follows NVIDIA/k8s-device-plugin v0.20.0 (GFD internal/lm, device plugin internal/rm) as summarised
in reference nvidia-gpu-operator-and-mig.md §6. tests/integration/oracle/test_gfd_matrix.py checks gfd_labels and
the time-slicing labels against NVIDIA's GFD v0.20.0 binary on the same simulated hosts.
"""

import collections
import re

GPU = "nvidia.com/gpu"
LABEL_PREFIX = "nvidia.com/"
FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 8: "ampere", 9: "hopper", 10: "blackwell",
            12: "blackwell"}


def family(major, minor):
    if major == 7:
        return "volta" if minor < 5 else "turing"
    return FAMILIES.get(major, "undefined")


def product(*parts):
    """GFD product label value: parts joined by '-', spaces to '-', other characters stripped (§6.1)."""
    text = "-".join(p.replace(" ", "-") for p in parts if p)
    return re.sub(r"[^A-Za-z0-9_.-]", "", text)


def is_gfd_label(key):
    """Labels GFD owns (it rewrites all of them on each pass)."""
    if key.startswith(("nvidia.com/gpu.deploy.", "nvidia.com/mig.config")):
        return False
    if key in ("nvidia.com/gpu.present", "nvidia.com/mig.capable"):
        return False  # the operator's; GFD writes mig.capable too, with the same value
    return key.startswith(("nvidia.com/gpu.", "nvidia.com/mig-", "nvidia.com/cuda.", "nvidia.com/gfd.",
                           "nvidia.com/mig.strategy", "nvidia.com/mps.", "nvidia.com/vgpu."))


def _full_gpu_labels(name, count, memory_mb, compute, replicas):
    major, minor = compute
    return {
        "nvidia.com/gpu.product": product(name),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(memory_mb),
        "nvidia.com/gpu.family": family(major, minor),
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
    }


def _mig_labels(prefix, model, device, count):
    gi = device.gi_profile
    return {
        prefix + ".product": product(model, "MIG", device.profile.replace("+", ".")),
        prefix + ".count": str(count),
        prefix + ".replicas": "1",
        prefix + ".sharing-strategy": "none",
        prefix + ".memory": str(gi.memory_mb),
        prefix + ".multiprocessors": str(device.multiprocessors),
        prefix + ".slices.gi": str(gi.slices),
        prefix + ".slices.ci": str(device.ci_slices),
        prefix + ".engines.copy": str(gi.copy_engines),
        prefix + ".engines.decoder": str(gi.decoders),
        prefix + ".engines.encoder": str(gi.encoders),
        prefix + ".engines.jpeg": str(gi.jpegs),
        prefix + ".engines.ofa": str(gi.ofas),
    }


def single_strategy_problem(gpus):
    """Why a node's MIG layout is invalid under mig.strategy=single, or None (GFD/device plugin, §6.2)."""
    enabled = [g for g in gpus if g.mig_current]
    if not enabled:
        return None
    if any(not g.mig_devices for g in enabled):
        return "at least one MIG device is enabled but empty"
    if len(enabled) != len(gpus):
        return "devices with MIG enabled and disable detected"
    if len({d.profile for g in enabled for d in g.mig_devices}) != 1:
        return "more than one MIG device type present on node"
    return None


def gfd_labels(host, strategy):
    """Every label GFD puts on the node for this hardware and MIG strategy (none|single|mixed)."""
    gpus = host.gpus
    if not gpus:
        return {}
    driver = host.driver_version.split(".")
    cuda_major, cuda_minor = host.cuda_driver_version // 1000, (host.cuda_driver_version % 1000) // 10
    labels = {
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1] if len(driver) > 1 else "",
        "nvidia.com/cuda.driver-version.revision": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.driver-version.full": host.driver_version,
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.full": "%d.%d" % (cuda_major, cuda_minor),
        # The older spellings GFD v0.20.0 still writes beside them (internal/lm/nvml.go, newVersionLabeler).
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1] if len(driver) > 1 else "",
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.runtime.major": str(cuda_major),
        "nvidia.com/cuda.runtime.minor": str(cuda_minor),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true" if any(g.mig_capable for g in gpus) else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
    }
    # Full-GPU labels: MIG-enabled GPUs first without sharing (replicas 0), full GPUs override.
    counts = collections.Counter(g.name for g in gpus)
    for gpu in sorted(gpus, key=lambda g: not g.mig_current):
        labels.update(_full_gpu_labels(gpu.name, counts[gpu.name], gpu.memory_mb, gpu.compute,
                                       0 if gpu.mig_current else 1))
    if strategy == "none":
        return labels
    labels["nvidia.com/mig.strategy"] = strategy
    migs = [d for g in gpus for d in g.mig_devices]
    model = {g.index: g.name for g in gpus}
    if strategy == "single":
        if not any(g.mig_current for g in gpus):
            return labels
        problem = single_strategy_problem(gpus)
        if problem:
            first = next(g for g in gpus if g.mig_current)
            labels.update({
                "nvidia.com/gpu.product": product(first.name, "MIG", "INVALID"),
                "nvidia.com/gpu.count": "0", "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0",
                "nvidia.com/gpu.sharing-strategy": "",
            })
            return labels
        labels.update(_mig_labels("nvidia.com/gpu", model[migs[0].gpu], migs[0], len(migs)))
        return labels
    by_profile = collections.OrderedDict()
    for device in migs:
        by_profile.setdefault(device.profile, []).append(device)
    for profile, devices in by_profile.items():
        # '+' is not allowed in label keys or values: named like the resource (+ -> ., §6.3)
        labels.update(_mig_labels(mig_resource_name(profile), model[devices[0].gpu], devices[0], len(devices)))
    return labels


class Shared(dict):
    """{resource: (replicas, advertised name)} of a device-plugin config's active sharing, with ``strategy``
    (``time-slicing`` or ``mps``; ``none`` when nothing is shared)."""

    strategy = "none"


def _replicated(block):
    """NVIDIA api/config/v1 ReplicatedResources.isReplicated: some resource has replicas > 1."""
    return any(int((entry or {}).get("replicas") or 0) > 1 for entry in (block or {}).get("resources") or [])


def time_slicing(config):
    """The active sharing of a device-plugin config (§9.1): NVIDIA api/config/v1 Sharing.SharingStrategy is
    ``mps`` when sharing.mps is set and replicated, else ``time-slicing`` when timeSlicing is; the replicated
    resources are those of sharing.mps whenever it is set (Sharing.ReplicatedResources), else timeSlicing's.
    Returns a Shared {resource: (replicas, advertised name)} with its ``strategy``."""
    sharing = (config or {}).get("sharing") or {}
    mps = sharing.get("mps")
    shared = Shared()
    if mps is not None and _replicated(mps):
        shared.strategy = "mps"
    elif _replicated(sharing.get("timeSlicing")):
        shared.strategy = "time-slicing"
    else:
        return shared
    block = mps if mps is not None else sharing.get("timeSlicing")
    by_default = bool(block.get("renameByDefault"))
    for entry in block.get("resources") or []:
        replicas = int(entry.get("replicas") or 1)
        name = entry.get("name")
        if not name or replicas < 2:
            continue
        shared[name] = (replicas, entry.get("rename") or (name + ".shared" if by_default else name))
    return shared


def sharing_strategy(shared):
    return getattr(shared, "strategy", "time-slicing" if shared else "none")


def gfd_error(host, shared):
    """Why NVIDIA's GFD exits instead of labelling (None: it labels). Under MPS it checks every GPU
    (internal/lm/nvml.go isMPSCapable): one in MIG mode fails the labeler, whatever the MIG strategy."""
    if sharing_strategy(shared) == "mps" and any(g.mig_current for g in host.gpus):
        return "error creating sharing labeler: failed to check MPS-capable: MPS sharing is not supported for mig devices"
    return None


def sharing_error(host, mig_strategy, shared):
    """Why the device plugin refuses to start under this sharing (None: it starts). MPS: refused with the mixed
    strategy (cmd/nvidia-device-plugin/main.go validateFlags) and on MIG devices, which the single strategy
    advertises as nvidia.com/gpu (internal/plugin/mps.go getMPSOptions)."""
    if sharing_strategy(shared) != "mps":
        return None
    if mig_strategy == "mixed":
        return "using --mig-strategy=mixed is not supported with MPS"
    if mig_strategy == "single" and any(g.mig_current for g in host.gpus):
        return "sharing using MPS is not supported for MIG devices"
    return None


def apply_time_slicing_labels(labels, shared):
    """GFD under time-slicing or MPS: <resource>.replicas, sharing-strategy, product -SHARED unless renamed,
    and mps.capable true under MPS (GFD has failed before labelling when a GPU is in MIG mode, gfd_error)."""
    strategy = sharing_strategy(shared)
    if strategy == "mps":
        labels["nvidia.com/mps.capable"] = "true"
    for resource, (replicas, advertised) in shared.items():
        prefix = resource
        if labels.get(prefix + ".count") in (None, "0") or labels.get(prefix + ".replicas") == "0":
            continue  # not present, or MIG-enabled full GPUs (labelled without sharing)
        labels[prefix + ".replicas"] = str(replicas)
        labels[prefix + ".sharing-strategy"] = strategy
        if advertised == resource:
            labels[prefix + ".product"] = labels[prefix + ".product"] + "-SHARED"
    return labels


def apply_time_slicing(resources, shared):
    """Device plugin under time-slicing or MPS: each shared resource advertised replicas times, maybe renamed."""
    out = dict(resources)
    for resource, (replicas, advertised) in shared.items():
        if resource in out:
            count = out.pop(resource) * replicas
            out[advertised] = out.get(advertised, 0) + count
    return out


def mig_resource_name(profile):
    return "nvidia.com/mig-" + profile.replace("+", ".")


def device_plugin_resources(host, strategy):
    """(resources {name: count}, error) the device plugin advertises (§6.2, §6.3).

    An error means the plugin exits without advertising anything (single strategy with a layout it
    rejects); under mixed, MIG-enabled GPUs without MIG devices are only warned about.
    """
    gpus = host.gpus
    if strategy == "none":
        return {GPU: len(gpus)}, None
    if strategy == "single":
        if not any(g.mig_current for g in gpus):
            return {GPU: len(gpus)}, None
        problem = single_strategy_problem(gpus)
        if problem:
            return {}, "invalid MIG configuration: %s" % problem
        return {GPU: sum(len(g.mig_devices) for g in gpus)}, None
    resources = collections.Counter()
    full = [g for g in gpus if not g.mig_current]
    if full:
        resources[GPU] = len(full)
    for gpu in gpus:
        if gpu.mig_current:
            for device in gpu.mig_devices:
                resources[mig_resource_name(device.profile)] += 1
    return dict(resources), None


def is_gpu_resource(name):
    return name == GPU or name.startswith("nvidia.com/mig-")
