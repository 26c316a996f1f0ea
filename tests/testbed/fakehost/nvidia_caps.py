"""The NVIDIA driver's MIG capability table, /proc/driver/nvidia-caps/mig-minors, for NVIDIA's device plugin.

The driver (nvidia-caps, nv-caps.c) creates this file when it loads: one line per capability it can hand out, each
with the minor number of its /dev/nvidia-caps/nvidia-cap<minor> device node: ``config``, ``monitor``, and for every
possible GPU (32), GPU instance (15) and compute instance (8) an ``access`` capability, whether or not that instance
exists (format: NVIDIA MIG user guide, "/dev based nvidia-capabilities"). The table does not change with the MIG
layout, so a fixed file stands in for it. nvidia-device-plugin (internal/mig/mig-dp.go) reads it to find the device
nodes a MIG device's container needs and refuses a MIG device whose GI or CI has no line.
"""

MAX_GPUS, MAX_GPU_INSTANCES, MAX_COMPUTE_INSTANCES = 32, 15, 8


def mig_minors():
    """The file's text: config 1, monitor 2, then gpuN/giG/access and its gpuN/giG/ciC/access in order from 3."""
    lines = ["config 1", "monitor 2"]
    minor = 3
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GPU_INSTANCES):
            lines.append("gpu%d/gi%d/access %d" % (gpu, gi, minor))
            minor += 1
            for ci in range(MAX_COMPUTE_INSTANCES):
                lines.append("gpu%d/gi%d/ci%d/access %d" % (gpu, gi, ci, minor))
                minor += 1
    return "\n".join(lines) + "\n"
