# -*- coding: utf-8 -*-
"""Benchmark: mig-reconfigure.yml across many simulated GPU nodes against the critical-path bound, and the
usual alternative (kubernetes.core.k8s_drain + a label task + an `until` loop polling every 10 s, one node
at a time). Not a test; figures go to docs/reconfigure.md.

    python tests/benchmarks/bench_reconfigure.py [--nodes 50] [--max-unavailable 10] [--apply-seconds 30]
        [--naive-nodes 5] [--memory-nodes 200] [--memory-max-unavailable 20] [--out bench-reconfigure.json]

Starts its own testbed cluster (tests/testbed/cluster.py) and simulated agents with a fixed simulated apply
time, makes the nodes (one NVIDIA H100 each, one GPU workload each), then measures:
  * wall time of the rollout (no canary; the hosts' NVML is not reachable, as from an API-only controller, so one
    sliding window of --max-unavailable) vs the bound ceil(N / max_unavailable) x T, T = mean per-node
    drain + apply + verify as measured inside the module;
  * orchestration overhead per node = (wall - bound) / N: everything above the bound, stragglers included;
  * API requests per node (counted by the modules; watches, so independent of how long a node takes);
  * peak RSS of the largest controller process, for a rollout of --memory-nodes nodes;
  * the naive playbook on --naive-nodes nodes, extrapolated per node to N, and the ratio.
"""

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / ".collections")]

import yaml  # noqa: E402

from tests.testbed.agents.pytest_agents import GpuAgents  # noqa: E402
from tests.testbed.cluster import Cluster, default_bin_dir  # noqa: E402
from tests.testbed.pytest_cluster import Testbed  # noqa: E402

PLAYBOOK = ROOT / "mig-reconfigure.yml"
MODEL = "H100-80GB-HBM3"
PROFILE = "all-1g.10gb"
VALUES = {"mig": {"strategy": "mixed"}, "driver": {"enabled": False}, "toolkit": {"enabled": False}}

NAIVE_PLAYBOOK = """
- name: Naive MIG change - one node at a time, poll every 10 s
  hosts: gpu_nodes
  serial: 1
  gather_facts: false
  tasks:
    - name: Drain
      kubernetes.core.k8s_drain:
        name: "{{ inventory_hostname }}"
        delete_options: {ignore_daemonsets: true, delete_emptydir_data: true, wait_timeout: 300}
      delegate_to: localhost
    - name: Label (and clear the stale state, else the first poll reads the old success)
      kubernetes.core.k8s:
        state: patched
        kind: Node
        name: "{{ inventory_hostname }}"
        definition: {metadata: {labels: {nvidia.com/mig.config: "%(profile)s", nvidia.com/mig.config.state: null}}}
      delegate_to: localhost
    - name: Wait for success
      kubernetes.core.k8s_info:
        kind: Node
        name: "{{ inventory_hostname }}"
      register: node
      until: (node.resources[0].metadata.labels['nvidia.com/mig.config.state'] | default('')) in ['success', 'failed']
      retries: 60
      delay: 10
      delegate_to: localhost
    - name: Uncordon
      kubernetes.core.k8s_drain:
        name: "{{ inventory_hostname }}"
        state: uncordon
      delegate_to: localhost
"""


def log(message):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def inventory(path, nodes):
    hosts = dict((n, {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}) for n in nodes)
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": localhost},
                                            "children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def run_playbook(playbook, inv, kubeconfig, extra_vars=None):
    env = dict(os.environ, K8S_AUTH_KUBECONFIG=str(kubeconfig), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="false",
               PATH="%s%s%s" % (Path(sys.executable).parent, os.pathsep, os.environ.get("PATH", "")))
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", str(inv),
           "-e", json.dumps(extra_vars or {})]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        messages = sorted(set(m for m in re.findall(r'"(?:message|msg)": "([^"]*)"', proc.stdout)))[:10]
        raise SystemExit("playbook %s failed (rc %s): %s\n%s"
                         % (playbook, proc.returncode, messages, proc.stderr[-3000:]))
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    return wall, data, (peak_kb if peak_kb > before else None)


def task_seconds(data):
    """Wall seconds per task name (summed over repeats), from the JSON callback's task durations."""
    import datetime
    out = {}
    for play in data["plays"]:
        for task in play["tasks"]:
            duration = task["task"].get("duration") or {}
            if duration.get("start") and duration.get("end"):
                start, end = (datetime.datetime.strptime(duration[k][:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
                              for k in ("start", "end"))
                name = task["task"]["name"].split(" : ", 1)[-1]
                name = "Reconfigure step" if name.startswith("Reconfigure step") else name
                out[name] = round(out.get(name, 0.0) + (end - start).total_seconds(), 2)
    return out


def batch_results(data):
    out = []
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ", 1)[-1].startswith("Reconfigure step"):
                for host in task["hosts"].values():
                    if host.get("rows"):
                        out.append(host)
    return out


def make_nodes(agents, prefix, count, namespace):
    names = ["%s-%03d" % (prefix, i) for i in range(count)]
    for name in names:
        agents.add_gpu_node(name, MODEL, 1)
    tb = agents.testbed
    tb.kubectl("create", "namespace", namespace, check=False)
    docs = []
    for name in names:
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w-" + name, "namespace": namespace},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w-" + name}},
                              "template": {"metadata": {"labels": {"app": "w-" + name}}, "spec": {
                                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                      "nodeSelectorTerms": [{"matchFields": [
                                          {"key": "metadata.name", "operator": "In", "values": [name]}]}]}}},
                                  "containers": [{"name": "main", "image": "busybox",
                                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    tb.wait_for(lambda: all((tb.core.read_node(n).status.allocatable or {}).get("nvidia.com/gpu") == "1" for n in names),
                300, "GPUs advertised on %d nodes" % count, interval=2)
    tb.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=300)

    def running():
        pods = tb.core.list_namespaced_pod(namespace).items
        return sum(1 for p in pods if p.status.phase == "Running") >= count
    tb.wait_for(running, 300, "%d GPU workloads running" % count, interval=2)
    return names


def ours(agents, kubeconfig, workdir, names, max_unavailable):
    inv = inventory(workdir / ("inv-%d.yml" % len(names)), names)
    extra = {"profile": PROFILE, "mig_reconfigure_max_unavailable": max_unavailable, "mig_reconfigure_canary": False,
             "mig_reconfigure_eviction_retry_delay": 1, "mig_reconfigure_lock_name": "bench-%d" % len(names)}
    wall, data, peak_kb = run_playbook(PLAYBOOK, inv, kubeconfig, extra)
    batches = batch_results(data)
    rows = [r for b in batches for r in b["rows"]]
    bad = [r for r in rows if r["result"] != "reconfigured"]
    if bad or len(rows) != len(names):
        raise SystemExit("rollout incomplete: %s" % json.dumps(bad[:3], indent=1))
    steps = [sum(r["timings"].values()) for r in rows]
    step_mean = statistics.mean(steps)
    n_batches = math.ceil(len(names) / float(max_unavailable))
    bound = n_batches * step_mean
    requests = sum(b["api_requests"]["total"] for b in batches)
    by_verb = {}
    for b in batches:
        for verb, count in b["api_requests"]["by_verb"].items():
            by_verb[verb] = by_verb.get(verb, 0) + count
    return {
        "nodes": len(names), "max_unavailable": max_unavailable, "batches": n_batches,
        "wall_s": round(wall, 1), "step_mean_s": round(step_mean, 2),
        "step_parts_mean_s": dict((k, round(statistics.mean(r["timings"][k] for r in rows), 2))
                                  for k in ("drain_s", "apply_s", "verify_s")),
        # Per node inside the window but outside drain + apply + verify (the fresh plan, giving the node back).
        "step_overhead_mean_s": dict((k, round(statistics.mean(r["overhead_s"][k] for r in rows), 3))
                                     for k in ("plan", "around_steps")),
        "bound_s": round(bound, 1), "wall_over_bound": round(wall / bound, 3),
        "overhead_per_node_s": round((wall - bound) / len(names), 3),
        "module_schedule_over_bound": round(sum(b.get("duration_s") or 0 for b in batches) / bound, 3),
        "api_requests_per_node": round(requests / float(len(names)), 1), "api_requests_by_verb": by_verb,
        "peak_rss_mb": round(peak_kb / 1024.0, 1) if peak_kb else None,
        "module_batch_s": [b.get("duration_s") for b in batches],
        "slowest_node_per_batch_s": [round(max(sum(r["timings"].values()) for r in b["rows"]), 2) for b in batches],
        "task_seconds": task_seconds(data),
    }


def naive(kubeconfig, workdir, names):
    book = workdir / "naive.yml"
    book.write_text(NAIVE_PLAYBOOK % {"profile": PROFILE})
    inv = inventory(workdir / "inv-naive.yml", names)
    wall, data, _peak = run_playbook(book, inv, kubeconfig)
    polls = []
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "Wait for success":
                polls += [h.get("attempts", 1) for h in task["hosts"].values()]
    return {"nodes": len(names), "wall_s": round(wall, 1), "per_node_s": round(wall / len(names), 2),
            "state_polls_per_node": round(statistics.mean(polls), 1) if polls else None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--max-unavailable", type=int, default=10)
    # A change from all-disabled needs a MIG mode change; with a host-installed driver MIG Manager alone sleeps
    # 30 s for it (mig-parted main.go; shared/reference/nvidia-gpu-operator-and-mig.md §3.6 step 9), so
    # 30 s is a realistic floor for the simulated apply.
    parser.add_argument("--apply-seconds", type=float, default=30.0)
    parser.add_argument("--naive-nodes", type=int, default=5)
    parser.add_argument("--memory-nodes", type=int, default=200)
    parser.add_argument("--memory-max-unavailable", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconfigure-"))
    cluster = Cluster(name="bench-reconfigure", directory=workdir / "cluster")
    log("starting testbed cluster in %s" % workdir)
    cluster.up()
    testbed = Testbed(cluster.kubeconfig, default_bin_dir(), workdir)
    agents = GpuAgents(testbed, workdir / "hosts")
    result = {"apply_seconds": args.apply_seconds, "profile": PROFILE, "model": MODEL}
    try:
        agents.start(["--apply-seconds", str(args.apply_seconds)])
        agents.install_chart(VALUES)
        log("creating %d nodes + workloads" % args.nodes)
        names = make_nodes(agents, "bench", args.nodes, "bench-work")
        log("rollout over %d nodes, max_unavailable %d" % (args.nodes, args.max_unavailable))
        result["ours"] = ours(agents, cluster.kubeconfig, workdir, names, args.max_unavailable)
        log("ours: %s" % json.dumps(result["ours"]))
        if args.naive_nodes:
            naive_names = make_nodes(agents, "naive", args.naive_nodes, "naive-work")
            log("naive playbook over %d nodes" % args.naive_nodes)
            result["naive"] = naive(cluster.kubeconfig, workdir, naive_names)
            est = result["naive"]["per_node_s"] * args.nodes
            result["naive"]["extrapolated_wall_s_for_%d" % args.nodes] = round(est, 1)
            result["naive_over_ours"] = round(est / result["ours"]["wall_s"], 1)
            log("naive: %s" % json.dumps(result["naive"]))
        if args.memory_nodes:
            log("memory run: %d nodes, max_unavailable %d" % (args.memory_nodes, args.memory_max_unavailable))
            mem_names = make_nodes(agents, "mem", args.memory_nodes, "mem-work")
            result["memory_run"] = ours(agents, cluster.kubeconfig, workdir, mem_names, args.memory_max_unavailable)
            log("memory: %s" % json.dumps(result["memory_run"]))
    finally:
        agents.stop()
        cluster.down()
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
