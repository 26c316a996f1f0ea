"""Build the demo sandbox on a running testbed cluster: simulated GPU nodes, agents, smoke runtime, workloads.

  python -m tests.testbed.sandbox.sandbox up   [--inventory inventories/sandbox/hosts.yml]
  python -m tests.testbed.sandbox.sandbox down
  python -m tests.testbed.sandbox.sandbox status

``up`` is safe to re-run: a node or host state that exists is kept (its MIG layout too). Nodes and
models come from the sandbox inventory (``gpu_model``/``gpu_sim_count`` of group ``gpu_nodes``,
hosts of ``cpu_nodes``). What is simulated and what is real is described in docs/sandbox.md.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
# Overridable so a second sandbox can run beside the demo's (same variables as cluster.py and the inventory).
SANDBOX_DIR = Path(os.environ.get("GPUFLEET_SANDBOX_DIR") or REPO_ROOT / ".sandbox")
HOSTS_DIR = SANDBOX_DIR / "hosts"
NVML_LINK = SANDBOX_DIR / "nvml"
TESTBED_DIR = Path(os.environ.get("GPUFLEET_TESTBED_DIR") or REPO_ROOT / ".testbed")
INVENTORY = REPO_ROOT / "inventories" / "sandbox" / "hosts.yml"
WORKLOADS = Path(__file__).resolve().parent / "workloads.yaml"
AGENTS_PIDFILE = SANDBOX_DIR / "agents.pid"
RUNTIME_PIDFILE = SANDBOX_DIR / "smoke-runtime.pid"
# NVIDIA's real GPU Operator controller (tests/testbed/operator.py); its log: .sandbox/gpu-operator.log
OPERATOR_PIDFILE = SANDBOX_DIR / "gpu-operator.pid"
TESTBED_NAME = os.environ.get("GPUFLEET_TESTBED_NAME") or "gpufleet"


def say(message):
    print("[sandbox] %s" % message, flush=True)


def read_inventory(path):
    data = yaml.safe_load(Path(path).read_text())
    children = (data.get("all") or {}).get("children") or {}
    gpu_hosts = ((children.get("gpu_nodes") or {}).get("hosts")) or {}
    cpu_hosts = ((children.get("cpu_nodes") or {}).get("hosts")) or {}
    gpu = []
    for name, hostvars in sorted(gpu_hosts.items()):
        hostvars = hostvars or {}
        if not hostvars.get("gpu_model") or not hostvars.get("gpu_sim_count"):
            raise SystemExit("inventory %s: GPU host %s needs gpu_model and gpu_sim_count" % (path, name))
        gpu.append((name, hostvars["gpu_model"], int(hostvars["gpu_sim_count"])))
    return gpu, sorted(cpu_hosts)


def testbed():
    from tests.testbed.cluster import default_bin_dir
    from tests.testbed.pytest_cluster import Testbed

    kubeconfig = TESTBED_DIR / "kubeconfig"
    if not kubeconfig.exists():
        raise SystemExit("no testbed cluster (%s missing): run make testbed-up first" % kubeconfig)
    return Testbed(kubeconfig, default_bin_dir(), SANDBOX_DIR)


def nvml_lib_dir():
    proc = subprocess.run([str(REPO_ROOT / "tests" / "testbed" / "gpusim" / "build.sh")],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("gpusim build failed:\n%s%s" % (proc.stdout, proc.stderr))
    return Path(proc.stdout.strip().splitlines()[-1])


def node_exists(bed, name):
    from kubernetes.client.rest import ApiException

    try:
        bed.core.read_node(name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def run_module(module, *args):
    subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=str(REPO_ROOT), check=True)


def up(args):
    from tests.testbed.agents.agent import STATE_ANNOTATION
    from tests.testbed.gpusim import hoststate
    from tests.testbed.operator import NFD_GPU_NODE_LABELS, default_run_dir

    gpu_nodes, cpu_nodes = read_inventory(args.inventory)
    bed = testbed()
    HOSTS_DIR.mkdir(parents=True, exist_ok=True)
    lib_dir = nvml_lib_dir()
    if NVML_LINK.is_symlink() or NVML_LINK.exists():
        NVML_LINK.unlink()
    NVML_LINK.symlink_to(lib_dir)
    for name, model, count in gpu_nodes:
        state = HOSTS_DIR / ("%s.state" % name)
        if not state.exists():
            hoststate.create_host(state, model, count, seed=name)
            say("simulated host %s: %d x %s" % (name, count, model))
        if not node_exists(bed, name):
            bed.create_node(name, labels=dict(NFD_GPU_NODE_LABELS), annotations={STATE_ANNOTATION: str(state)})
            say("node %s created" % name)
    for name in cpu_nodes:
        if not node_exists(bed, name):
            bed.create_node(name)
            say("node %s (CPU only) created" % name)
    # Runs the controller once site.yml has installed the chart (while its operator Deployment exists).
    run_module("tests.testbed.operator", "start", "--kubeconfig", bed.kubeconfig, "--pidfile", OPERATOR_PIDFILE,
               "--run-dir", default_run_dir(TESTBED_DIR, TESTBED_NAME))
    # NVIDIA's MIG Manager and device plugin for every node: site.yml installs chart v26.7.0, whose RBAC the MIG
    # Manager it ships needs (docs/testbed.md).
    run_module("tests.testbed.agents", "start", "--kubeconfig", bed.kubeconfig, "--hosts-dir", HOSTS_DIR,
               "--nvml-lib-dir", lib_dir, "--pidfile", AGENTS_PIDFILE, "--mig-manager", "nvidia",
               "--device-plugin", "nvidia")
    run_module("tests.testbed.sandbox.smoke_runtime", "start", "--kubeconfig", bed.kubeconfig, "--hosts-dir", HOSTS_DIR,
               "--nvml-lib-dir", lib_dir, "--pidfile", RUNTIME_PIDFILE)
    bed.kubectl("apply", "-f", str(WORKLOADS))
    say("workloads applied from %s" % WORKLOADS.relative_to(REPO_ROOT))
    say("ready: KUBECONFIG=%s" % bed.kubeconfig)
    return 0


def down(_args):
    run_module("tests.testbed.sandbox.smoke_runtime", "stop", "--pidfile", RUNTIME_PIDFILE)
    run_module("tests.testbed.agents", "stop", "--pidfile", AGENTS_PIDFILE)
    run_module("tests.testbed.operator", "stop", "--pidfile", OPERATOR_PIDFILE)
    # The simulated hardware goes with the cluster: a new sandbox starts from MIG disabled.
    for path in sorted(HOSTS_DIR.glob("*")) if HOSTS_DIR.exists() else []:
        if path.is_file():
            path.unlink()
    return 0


def status(_args):
    rc = subprocess.run([sys.executable, "-m", "tests.testbed.agents", "status", "--pidfile", str(AGENTS_PIDFILE)],
                        cwd=str(REPO_ROOT), check=False).returncode
    return rc


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.sandbox.sandbox")
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--inventory", default=str(INVENTORY))
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "status": status}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
