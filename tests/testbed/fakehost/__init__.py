"""Stand-ins for a GPU host's OS boundary, for NVIDIA's programs run on the testbed (docs/testbed.md,
"NVIDIA's MIG Manager"): systemd on the D-Bus system bus (systemd_dbus.py), `nvidia-smi -r` and `chroot <host> ...`
(executables in bin/). Each acts on the simulated host's state file (tests/testbed/gpusim/hoststate.py). For NVIDIA's
device plugin ("NVIDIA's device plugin"): the driver's MIG capability table (nvidia_caps.py)."""
