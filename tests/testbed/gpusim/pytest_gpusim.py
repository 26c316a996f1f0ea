# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures for simulated NVML hosts (see docs/DEVELOPING.md, "Simulated NVML").

``gpusim_lib_dir`` (session): directory of the simulated libnvidia-ml.so.1, built if needed.
``sim_host`` (function): factory ``sim_host(model, count=1, faults=None, **kw) -> SimHost``; each host
gets its own state file under the test's tmp_path.
``mig_parted`` (session): path of NVIDIA's ``nvidia-mig-parted`` v0.15.0, built offline from
../shared/nvidia/src/mig-parted-v0.15.0.tar.gz by tests/testbed/build-nvidia.sh and cached under
${GPUFLEET_CACHE}/nvidia/<first 12 hex digits of the tarball's sha256>/bin.

pynvml resolves libnvidia-ml.so.1 with dlopen at its first nvmlInit and keeps it for the life of the
process, so a process must have LD_LIBRARY_PATH (and GPUFLEET_SIM_NVML_STATE) set before that. The
simple way is a subprocess with ``SimHost.env`` - ``SimHost.run_python(code)`` does that. In-process
use: call ``simhost.preload_library(lib_dir)`` before the first nvmlInit (the dynamic loader reads
LD_LIBRARY_PATH once, at start, but reuses a library already loaded under the same soname) and set
GPUFLEET_SIM_NVML_STATE in os.environ before each nvmlInit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.testbed.gpusim import hoststate
from tests.testbed.gpusim.simhost import STATE_ENV, library_dir, sim_env

RESULT_MARK = "@@gpusim-result@@"


class SimHost(object):
    """One simulated host: its state file, the env that makes pynvml see it, and helpers."""

    def __init__(self, state_path, lib_dir):
        self.state_path = str(state_path)
        self.lib_dir = str(lib_dir)
        self.env = sim_env(self.state_path, self.lib_dir, os.environ)

    def summary(self):
        return hoststate.summary(self.state_path)

    def run_python(self, code, timeout=60, check=True):
        """Run `code` in a fresh interpreter that sees this host; returns CompletedProcess.

        The code may call ``emit(obj)``: the last emitted JSON value comes back as ``.result``.
        """
        prelude = (
            "import json as _json, sys as _sys\n"
            "def emit(obj):\n"
            "    print(%r + _json.dumps(obj), flush=True)\n" % RESULT_MARK
        )
        proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=self.env,
                              capture_output=True, text=True, timeout=timeout, cwd=os.getcwd(), check=False)
        proc.result = None
        for line in proc.stdout.splitlines():
            if line.startswith(RESULT_MARK):
                proc.result = json.loads(line[len(RESULT_MARK):])
        if check and proc.returncode != 0:
            raise AssertionError("simulated-NVML subprocess failed (rc %d)\nstdout:\n%s\nstderr:\n%s"
                                 % (proc.returncode, proc.stdout, proc.stderr))
        return proc

    def run(self, argv, timeout=120):
        """Run a program (e.g. NVIDIA's nvidia-mig-parted) that loads NVML, against this host."""
        return subprocess.run([str(a) for a in argv], env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    # Thin pass-throughs so tests read naturally.
    def add_process(self, gpu_index, pid, used_mb, gi_id=None, ci_id=None):
        hoststate.add_process(self.state_path, gpu_index, pid, used_mb, gi_id, ci_id)

    def remove_processes(self, gpu_index=None, pid=None):
        return hoststate.remove_processes(self.state_path, gpu_index, pid)

    def set_fault(self, gpu_index, fault, value=1, times=None):
        hoststate.set_fault(self.state_path, gpu_index, fault, value, times)

    def reset_gpu(self, index):
        return hoststate.reset_gpu(self.state_path, index)

    def reboot(self):
        return hoststate.reboot(self.state_path)


@pytest.fixture(scope="session")
def gpusim_lib_dir():
    """Directory with the simulated libnvidia-ml.so.1 (tests/testbed/gpusim/build.sh)."""
    path = library_dir(build=True)
    assert os.path.exists(os.path.join(path, "libnvidia-ml.so.1")), path
    return path


REPO = Path(__file__).resolve().parents[3]
MIG_PARTED_TARBALL = "mig-parted-v0.15.0.tar.gz"


def mig_parted_binary():
    """NVIDIA's nvidia-mig-parted v0.15.0: built by tests/testbed/build-nvidia.sh where the checkout has it, else
    looked up in its cache (the same path convention); an AssertionError says how to build it."""
    build = REPO / "tests" / "testbed" / "build-nvidia.sh"
    if build.exists():
        proc = subprocess.run([str(build), "bin", "nvidia-mig-parted"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise AssertionError("build-nvidia.sh bin nvidia-mig-parted failed:\n%s%s" % (proc.stdout, proc.stderr))
        return proc.stdout.strip().splitlines()[-1]
    nvidia_dir = Path(os.environ.get("GPUFLEET_NVIDIA_DIR") or REPO.parent / "shared" / "nvidia")
    tarball = nvidia_dir / "src" / MIG_PARTED_TARBALL
    assert tarball.exists(), "NVIDIA's mig-parted source is missing at %s" % tarball
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()[:12]
    cache = Path(os.environ.get("GPUFLEET_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "gpufleet")
    binary = cache / "nvidia" / digest / "bin" / "nvidia-mig-parted"
    assert binary.exists(), ("nvidia-mig-parted v0.15.0 is not built: %s is missing (tar -xzf %s; cd mig-parted-v0.15.0; "
                             "GOFLAGS=-mod=vendor GOPROXY=off go build -o %s ./cmd/nvidia-mig-parted)"
                             % (binary, tarball, binary))
    return str(binary)


@pytest.fixture(scope="session")
def mig_parted():
    """Path of NVIDIA's nvidia-mig-parted v0.15.0 (see mig_parted_binary)."""
    return mig_parted_binary()


@pytest.fixture
def sim_host(tmp_path, gpusim_lib_dir):
    """Factory: sim_host(model, count=1, faults=None, driver_version=..., mig_enabled=False) -> SimHost."""
    made = []

    def make(model, count=1, faults=None, **kwargs):
        state = tmp_path / ("gpusim-host-%d.state" % len(made))
        hoststate.create_host(state, model, count, faults=faults, **kwargs)
        host = SimHost(state, gpusim_lib_dir)
        made.append(host)
        return host

    return make


__all__ = ["SimHost", "STATE_ENV", "gpusim_lib_dir", "mig_parted", "mig_parted_binary", "sim_host"]
