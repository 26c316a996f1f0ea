"""NVIDIA's own code as test oracles: GPU Feature Discovery and the device plugin's config parser.

Both come from NVIDIA's k8s-device-plugin v0.20.0 release source (the version GPU Operator v26.7.0 ships), built
offline and cached by tests/testbed/build-nvidia.sh (make testbed-nvidia-build):

- ``gpu-feature-discovery --oneshot`` run against a simulated host (the simulated libnvidia-ml.so.1 on
  LD_LIBRARY_PATH, GPUFLEET_SIM_NVML_STATE naming the host) writes the labels a real GFD would;
- ``dpconfig`` (tests/testbed/oracle/dpconfig/main.go) parses device-plugin configs with NVIDIA's
  api/config/v1 and runs the device plugin's start-up checks, under the environment the GPU Operator gives
  the device plugin (read from the operator's own DaemonSet asset, plus MIG_STRATEGY from the ClusterPolicy).

Never imports product code (plugins/**).
"""

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TESTBED = HERE.parent
BUILD_NVIDIA = TESTBED / "build-nvidia.sh"
BUILD_OPERATOR = TESTBED / "build-operator.sh"
STATE_ENV = "GPUFLEET_SIM_NVML_STATE"


@functools.lru_cache(maxsize=None)
def binary(program):
    """Path of the cached NVIDIA ``program`` (gpu-feature-discovery, nvidia-mig-parted, nvidia-mig-manager,
    nvidia-device-plugin, config-manager) or of the ``dpconfig`` checker, built on first use."""
    args = ["dpconfig"] if program == "dpconfig" else ["bin", program]
    return subprocess.run([str(BUILD_NVIDIA), *args], check=True, capture_output=True, text=True).stdout.strip()


@functools.lru_cache(maxsize=None)
def operator_device_plugin_env():
    """{name: value} of the plain env entries the GPU Operator's device-plugin DaemonSet asset sets on the
    nvidia-device-plugin container (state-device-plugin/0500_daemonset.yaml of the operator the testbed runs)."""
    opt = subprocess.run([str(BUILD_OPERATOR), "path"], check=True, capture_output=True, text=True).stdout.strip()
    asset = Path(opt) / "opt" / "gpu-operator" / "state-device-plugin" / "0500_daemonset.yaml"
    daemonset = yaml.safe_load(asset.read_text())
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    plugin = next(c for c in containers if c["name"] == "nvidia-device-plugin")
    return {e["name"]: str(e["value"]) for e in plugin.get("env") or [] if "value" in e}


def device_plugin_env(mig_strategy):
    """The device plugin's environment under the operator: its DaemonSet's env, MIG_STRATEGY from the
    ClusterPolicy (the operator always sets it, gpu-operator controllers/object_controls.go)."""
    env = dict(operator_device_plugin_env())
    env["MIG_STRATEGY"] = mig_strategy
    return env


def check_configs(requests):
    """NVIDIA's verdicts: ``requests`` is [(id, config text or None, env)], result {id: verdict}."""
    lines = "".join(json.dumps({"id": i, "config": text, "env": env}) + "\n" for i, text, env in requests)
    proc = subprocess.run([binary("dpconfig")], input=lines, capture_output=True, text=True, check=True, timeout=120)
    return {v["id"]: v for v in map(json.loads, proc.stdout.splitlines())}


def parse_labels(text):
    labels = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            labels[key] = value
    return labels


def run_gfd(state_file, lib_dir, mig_strategy, config_text=None, timeout=60, gfd_binary=None):
    """Labels NVIDIA's GFD writes (``--oneshot``) for the simulated host ``state_file`` under the GPU Operator's
    settings for it (MIG_STRATEGY from the ClusterPolicy; the node's device-plugin config file if any).

    Returns {label: value}; raises RuntimeError with GFD's output when it exits non-zero."""
    with tempfile.TemporaryDirectory(prefix="gfd-") as tmp:
        out = Path(tmp) / "labels"
        args = [gfd_binary or binary("gpu-feature-discovery"), "--oneshot", "--output-file=%s" % out, "--use-node-feature-api=false",
                "--no-timestamp", "--machine-type-file=%s" % (Path(tmp) / "product_name")]
        if config_text is not None:
            cfg = Path(tmp) / "config.yaml"
            cfg.write_text(config_text)
            args.append("--config-file=%s" % cfg)
        env = {k: v for k, v in os.environ.items() if k not in ("MIG_STRATEGY", "CONFIG_FILE")}
        env.update({"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(Path(state_file).resolve()),
                    "MIG_STRATEGY": mig_strategy})
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError("gpu-feature-discovery exited %d:\n%s%s" % (proc.returncode, proc.stdout, proc.stderr))
        return parse_labels(out.read_text())
