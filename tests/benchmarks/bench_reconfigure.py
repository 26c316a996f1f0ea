# -*- coding: utf-8 -*-
"""Benchmark: the collection's playbooks across many simulated GPU nodes. Not a test; figures go to
docs/reconfigure.md (`make bench-quick`: 50 nodes, `make bench`: 1000 nodes plus the fair peer comparison).

    python tests/benchmarks/bench_reconfigure.py [--nodes 50] [--max-unavailable 10] [--apply-seconds 30]
        [--fair-nodes 200] [--fair-max-unavailable 20] [--naive-nodes 4]
        [--phases inventory,plan,rollout,report,validate,validate-dcgm] [--out build/bench.json] [--md build/bench.md]

Starts its own testbed cluster (tests/testbed/cluster.py, with an audit log of the controller's requests) and the
simulated agents with a fixed simulated apply time, makes --nodes nodes (one NVIDIA H100 each, one GPU workload
each) and, with the gpufleet.gpu_operator.gpu_nodes inventory plugin as the inventory, measures:
  * inventory: `ansible-inventory --list` wall;
  * plan: `mig-reconfigure.yml --check` wall;
  * rollout: mig-reconfigure.yml (no canary; the hosts' NVML is not reachable, as from an API-only controller, so one
    sliding window of --max-unavailable) vs the bound ceil(N / max_unavailable) x T, T = mean per-node drain + apply
    + verify measured inside the module; overhead per node = (wall - bound) / N, stragglers included;
  * API requests per node: every request of the controller's ServiceAccount in the apiserver's audit log, by verb;
  * peak RSS of the largest controller process (wait4 of the ansible-playbook process tree);
  * report.yml wall; `site.yml --tags validate` wall (gpu_info on every host, against its simulated NVML);
  * validate-dcgm: the same with gpu_validate_hardware_source=dcgm, the hardware from a real Prometheus that scrapes
    a simulated dcgm-exporter per node every 15 s (one query instead of a module run per host);
  * the agents' lag (tests/testbed/agents: from a node's watch event to the end of its reconcile), separately, so
    that a slow simulator is not mistaken for a slow collection;
  * with --fair-nodes: our rollout and the naive playbook (kubernetes.core.k8s_drain + label + `until` polls, the
    same drain and a verify of allocatable) at the same parallelism (`serial:` = max_unavailable), each on its own
    fresh nodes; with --naive-nodes: the naive playbook at `serial: 1`, extrapolated per node to --nodes.
Each figure is recorded with the load average while it ran (the machine may be shared).
"""

import argparse
import concurrent.futures
import heapq
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / ".collections")]

import yaml  # noqa: E402

from tests.testbed.agents.agent import LAG_STATS_FILE  # noqa: E402
from tests.testbed.agents.pytest_agents import GpuAgents, nvml_lib_dir  # noqa: E402
from tests.testbed.cluster import Cluster, default_bin_dir  # noqa: E402
from tests.testbed.dcgm.exporter import DcgmSimulator  # noqa: E402
from tests.testbed.dcgm.prometheus import Prometheus  # noqa: E402
from tests.testbed.pytest_cluster import Testbed  # noqa: E402

MODEL = "H100-80GB-HBM3"
PROFILE = "all-1g.10gb"
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
VALUES = {"mig": {"strategy": "mixed"}, "driver": {"enabled": False}, "toolkit": {"enabled": False}}
SET_LABEL = "bench.gpufleet.io/set"
SA_NAMESPACE, SA_NAME = "gpufleet-bench", "controller"
CONTROLLER_USER = "system:serviceaccount:%s:%s" % (SA_NAMESPACE, SA_NAME)
# Only the controller's requests, one event per request (ResponseComplete; watches too).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived", "ResponseStarted"],
                "rules": [{"level": "Metadata", "users": [CONTROLLER_USER]}, {"level": "None"}]}

NAIVE_PLAYBOOK = """
- name: Naive MIG change - {{ naive_serial }} node(s) at a time, poll every 10 s
  hosts: gpu_nodes
  serial: "{{ naive_serial | int }}"
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
    - name: Verify the advertised MIG devices (the same check as ours before uncordon)
      kubernetes.core.k8s_info:
        kind: Node
        name: "{{ inventory_hostname }}"
      register: node
      until: (node.resources[0].status.allocatable['%(resource)s'] | default('0')) == '%(count)s'
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


class Bench:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        policy = workdir / "audit-policy.yml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self.cluster = Cluster(name="bench-reconfigure", directory=workdir / "cluster", audit_policy=policy)
        self.testbed = None
        self.agents = None
        self.controller_kubeconfig = None

    # -- set-up ----------------------------------------------------------------------------
    def start(self):
        log("starting testbed cluster in %s" % self.workdir)
        self.cluster.up()
        self.testbed = Testbed(self.cluster.kubeconfig, default_bin_dir(), self.workdir, cluster=self.cluster)
        # The simulators of MIG Manager and the device plugin: a process of NVIDIA's each per node does not fit 1000 nodes here.
        self.agents = GpuAgents(self.testbed, self.workdir / "hosts", mig_manager="sim", device_plugin="sim")
        # MIG Manager's own 5 min wait for the operand pods to go (the tests' 20 s wedged a wave of 20 nodes at load 80).
        self.agents.start(["--apply-seconds", str(self.args.apply_seconds), "--pod-wait-seconds", "300"])
        self.agents.install_chart(VALUES)
        self.testbed.kubectl("create", "namespace", SA_NAMESPACE)
        self.controller_kubeconfig = self.testbed.serviceaccount_kubeconfig(SA_NAMESPACE, SA_NAME, 24 * 3600)
        self.testbed.kubectl("create", "clusterrolebinding", "gpufleet-bench-controller", "--clusterrole=cluster-admin",
                             "--serviceaccount=%s:%s" % (SA_NAMESPACE, SA_NAME))

    def stop(self):
        if self.agents:
            self.agents.stop()
        self.cluster.down()

    def make_nodes(self, prefix, count):
        """`count` GPU nodes labelled SET_LABEL=prefix, each with one running GPU workload."""
        names = ["%s-%04d" % (prefix, i) for i in range(count)]
        tb = self.testbed
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            # Ready within 10 min, not the tests' 60 s: 1000 nodes on a shared 2-core machine (one timed out at 810 there).
            list(pool.map(lambda n: self.agents.add_gpu_node(n, MODEL, 1, labels={SET_LABEL: prefix}, timeout=600), names))
        selector = "%s=%s" % (SET_LABEL, prefix)

        def advertised():
            nodes = tb.core.list_node(label_selector=selector).items
            return sum(1 for n in nodes if (n.status.allocatable or {}).get("nvidia.com/gpu") == "1") >= count
        tb.wait_for(advertised, 60 + count, "GPUs advertised on %d nodes" % count, interval=2)
        namespace = prefix + "-work"
        tb.kubectl("create", "namespace", namespace)
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
        tb.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=600)

        def running():
            pods = tb.core.list_namespaced_pod(namespace).items
            return sum(1 for p in pods if p.status.phase == "Running") >= count
        tb.wait_for(running, 120 + count, "%d GPU workloads running" % count, interval=2)
        log("%d nodes + workloads in %.0f s" % (count, time.monotonic() - started))
        return names

    def inventory_dir(self, prefix):
        """An inventory of the set's nodes from the gpu_nodes plugin; the hosts read their simulated NVML locally."""
        inv = self.workdir / ("inv-" + prefix)
        (inv / "group_vars").mkdir(parents=True, exist_ok=True)
        (inv / "bench.gpu_nodes.yml").write_text(yaml.safe_dump({
            "plugin": "gpufleet.gpu_operator.gpu_nodes", "kubeconfig": str(self.controller_kubeconfig),
            "label_selector": "%s=%s" % (SET_LABEL, prefix)}))
        (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump({
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "gpufleet_kubeconfig": str(self.controller_kubeconfig)}))
        (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({
            "gpu_validate_host_environment": {
                "LD_LIBRARY_PATH": str(nvml_lib_dir()),
                "GPUFLEET_SIM_NVML_STATE": "%s/{{ inventory_hostname }}.state" % self.agents.hosts_dir}}))
        return inv

    # -- measuring -------------------------------------------------------------------------
    def env(self):
        return dict(os.environ, K8S_AUTH_KUBECONFIG=str(self.controller_kubeconfig), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                    ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="false",
                    ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
                    PATH="%s%s%s" % (Path(sys.executable).parent, os.pathsep, os.environ.get("PATH", "")))

    def measured(self, what, argv):
        """Run a controller command; (wall, stdout, figures): wall, peak RSS of its largest process, load, API requests."""
        audit_from = self.audit_offset()
        lag_before = self.lag()
        out_path = self.workdir / ("%s.out" % what)
        err_path = self.workdir / ("%s.err" % what)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(argv, env=self.env(), cwd=str(ROOT), stdout=out, stderr=err)  # pylint: disable=consider-using-with
            # wait4: ru_maxrss is the largest of the process and its waited-for descendants (forks, modules).
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        stdout = out_path.read_text()
        if proc.returncode != 0:
            messages = sorted(set(m for m in re.findall(r'"(?:message|msg)": "([^"]*)"', stdout)))[:10]
            raise SystemExit("%s failed (rc %s): %s\n%s" % (what, proc.returncode, messages, err_path.read_text()[-3000:]))
        time.sleep(1.5)  # the apiserver writes its audit events after the response; the lag file once a second
        # CPU seconds of the controller's process tree: less sensitive than wall time to a shared, loaded machine.
        figures = {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                   "peak_rss_mb": round(usage.ru_maxrss / 1024.0, 1),
                   "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                   "api_requests": self.audit_count(audit_from), "agents_lag": lag_delta(lag_before, self.lag())}
        log("%s: %.1f s, peak %.0f MB, %d API requests, load %s" % (
            what, wall, figures["peak_rss_mb"], figures["api_requests"]["total"], figures["load_avg_1m"]))
        return wall, stdout, figures

    def playbook(self, what, playbook, inv, extra_vars=None, options=()):
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", str(inv),
                "-e", json.dumps(extra_vars or {}), *options]
        wall, stdout, figures = self.measured(what, argv)
        return wall, json.loads(stdout[stdout.index("{"):]), figures

    def audit_offset(self):
        try:
            return self.cluster.audit_log.stat().st_size
        except OSError:
            return 0

    def audit_count(self, offset):
        by_verb, by_resource = {}, {}
        try:
            with open(self.cluster.audit_log, "rb") as fh:
                fh.seek(offset)
                for line in fh:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if event.get("user", {}).get("username") == CONTROLLER_USER:
                        verb = event.get("verb", "?")
                        by_verb[verb] = by_verb.get(verb, 0) + 1
                        ref = event.get("objectRef") or {}
                        what = "%s %s%s" % (verb, ref.get("resource", "?"),
                                            "/" + ref["subresource"] if ref.get("subresource") else "")
                        by_resource[what] = by_resource.get(what, 0) + 1
        except OSError:
            pass
        return {"total": sum(by_verb.values()), "by_verb": by_verb,
                "by_resource": dict(sorted(by_resource.items(), key=lambda item: -item[1]))}

    def lag(self):
        try:
            return json.loads((self.agents.hosts_dir / LAG_STATS_FILE).read_text())
        except (OSError, ValueError):
            return None

    # -- phases ----------------------------------------------------------------------------
    def extra(self, prefix, max_unavailable):
        return {"profile": PROFILE, "mig_reconfigure_max_unavailable": max_unavailable, "mig_reconfigure_canary": False,
                "mig_reconfigure_eviction_retry_delay": 1, "mig_reconfigure_lock_name": "bench-" + prefix,
                # The workloads ask for whole GPUs, which all-1g.10gb takes away: they stay Pending.
                "mig_reconfigure_allow_unschedulable": True}

    def inventory_phase(self, inv, count):
        argv = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inv), "--list"]
        _wall, stdout, figures = self.measured("inventory", argv)
        hosts = json.loads(stdout).get("gpu_nodes", {}).get("hosts", [])
        if len(hosts) != count:
            raise SystemExit("inventory plugin listed %d GPU hosts, expected %d" % (len(hosts), count))
        # What a playbook pays for the inventory: --graph runs the plugin but not ansible-inventory's JSON dump of
        # every host's variables (most of --list's time at 1000 nodes).
        _wall, graph, figures["graph"] = self.measured("inventory-graph", argv[:-1] + ["--graph"])
        if graph.count("|--") < count:
            raise SystemExit("inventory --graph shows fewer than %d hosts" % count)
        return figures

    def plan_phase(self, inv, prefix, count, max_unavailable):
        _wall, data, figures = self.playbook("plan", ROOT / "mig-reconfigure.yml", inv, self.extra(prefix, max_unavailable),
                                             ["--check"])
        planned = [h for play in data["plays"] for t in play["tasks"]
                   if t["task"]["name"].endswith("Plan every node and cut the canary and the batches")
                   for h in t["hosts"].values()]
        nodes = len(planned[0].get("plan") or []) if planned else 0
        if nodes != count:
            raise SystemExit("the plan covers %d nodes, expected %d" % (nodes, count))
        figures["task_seconds"] = top_tasks(data)
        return figures

    def rollout_phase(self, inv, prefix, names, max_unavailable):
        wall, data, figures = self.playbook("rollout-" + prefix, ROOT / "mig-reconfigure.yml", inv,
                                            self.extra(prefix, max_unavailable))
        batches = batch_results(data)
        rows = [r for b in batches for r in b["rows"]]
        bad = [r for r in rows if r["result"] != "reconfigured"]
        if bad or len(rows) != len(names):
            raise SystemExit("rollout incomplete: %s" % json.dumps(bad[:3], indent=1))
        steps = [sum(r["timings"].values()) for r in rows]
        step_mean = statistics.mean(steps)
        n_batches = math.ceil(len(names) / float(max_unavailable))
        bound = n_batches * step_mean
        module_requests = sum(b["api_requests"]["total"] for b in batches)
        parts = dict((k, round(statistics.mean(r["timings"][k] for r in rows), 2)) for k in ("drain_s", "apply_s", "verify_s"))
        figures.update({
            "nodes": len(names), "max_unavailable": max_unavailable, "waves": n_batches,
            "step_mean_s": round(step_mean, 2), "step_parts_mean_s": parts,
            # Per node inside the window but outside drain + apply + verify (the fresh plan, giving the node back).
            "step_overhead_mean_s": dict((k, round(statistics.mean(r["overhead_s"][k] for r in rows), 3))
                                         for k in ("plan", "around_steps")),
            "bound_s": round(bound, 1), "wall_over_bound": round(wall / bound, 3),
            "overhead_per_node_s": round((wall - bound) / len(names), 3),
            "module_window_over_bound": round(sum(b.get("duration_s") or 0 for b in batches) / bound, 3),
            "beyond_bound": beyond_bound(wall, batches, max_unavailable, bound),
            "replayed_s": round(replayed(batches, max_unavailable), 1),
            "resampled_over_bound": resampled([sum(r["timings"].values()) for r in rows], max_unavailable),
            "api_requests_per_node": round(figures["api_requests"]["total"] / float(len(names)), 1),
            "module_counted_requests_per_node": round(module_requests / float(len(names)), 1),
            # What the simulated MIG Manager added to the fixed apply time (its lag, and the label round trips).
            "apply_over_simulated_s": round(parts["apply_s"] - self.args.apply_seconds, 2),
            "task_seconds": top_tasks(data),
        })
        return figures

    def report_phase(self, inv, prefix, count):
        report_dir = self.workdir / ("report-" + prefix)
        _wall, data, figures = self.playbook("report", ROOT / "report.yml", inv, {
            "gpu_report_dir": str(report_dir), "gpu_report_label_selector": "%s=%s" % (SET_LABEL, prefix)})
        nodes = json.loads((report_dir / "report.json").read_text()).get("nodes") or []
        if len(nodes) != count:
            raise SystemExit("report.json has %d nodes, expected %d" % (len(nodes), count))
        figures["task_seconds"] = top_tasks(data)
        return figures

    def validate_phase(self, inv, names):
        count = len(names)
        # The smoke pods are left out: kwok never runs a container, so a bare smoke pod stays Running and would only
        # measure gpu_smoke_test's timeout. Measured: the operand, label, allocatable and hardware checks.
        _wall, data, figures = self.playbook("validate", ROOT / "site.yml", inv, {"gpu_validate_smoke_test": False},
                                             ["--tags", "validate"])
        figures["task_seconds"] = top_tasks(data)
        # The same without the per-host gpu_info read (labels, allocatable and operands only): the part of the
        # validation that does not launch a module on every host.
        _wall, data, figures["cluster_only"] = self.playbook(
            "validate-cluster-only", ROOT / "site.yml", inv,
            {"gpu_validate_smoke_test": False, "gpu_validate_collect_hardware": False}, ["--tags", "validate"])
        figures["cluster_only"]["task_seconds"] = top_tasks(data)
        # The floor of any per-host module here: ansible.builtin.ping on the same hosts, connection and forks (a
        # module that imports only ansible.module_utils.basic and returns). The hardware read cannot cost less.
        argv = [str(Path(sys.executable).parent / "ansible"), "-i", str(inv), "gpu_nodes", "-m", "ansible.builtin.ping"]
        _wall, stdout, figures["ping"] = self.measured("validate-ping-floor", argv)
        pongs = len(re.findall(r'\bping"?: "?pong', stdout))  # YAML or JSON results, as ansible.cfg sets
        if pongs != count:
            raise SystemExit("ping answered on %d of %d hosts" % (pongs, count))
        return figures

    def validate_from_dcgm(self, inv, names):
        """validate with gpu_validate_hardware_source=dcgm: the hardware from a real Prometheus scraping one
        simulated dcgm-exporter per node (each reads its node's simulated NVML state), every 15 s as commonly set."""
        sim = DcgmSimulator()
        server = None
        try:
            for name in names:
                sim.add_node(name, state_path=str(self.agents.state_path(name)))
            server = Prometheus(self.workdir / "prometheus", dict((n, sim.target(n)) for n in names),
                                scrape_interval_s=15).start()
            # One result per node scraped (a node has a series per MIG instance after a rollout: count nodes, not series).
            server.wait_for_series("count by (node) (DCGM_FI_DEV_FB_USED)", len(names), timeout=120)
            _wall, data, figures = self.playbook(
                "validate-dcgm", ROOT / "site.yml", inv,
                {"gpu_validate_smoke_test": False, "gpu_validate_hardware_source": "dcgm",
                 "gpu_validate_prometheus_url": server.url}, ["--tags", "validate"])
            figures["task_seconds"] = top_tasks(data)
            checked = [t for play in data["plays"] for t in play["tasks"]
                       if t["task"]["name"].endswith("Check operands, GFD labels and advertised resources")]
            nodes = next(iter(checked[0]["hosts"].values()))["nodes"] if checked else {}
            compared = sum(1 for entry in nodes.values() if entry.get("hardware_source") == "dcgm")
            if compared != len(names):
                raise SystemExit("validate from dcgm compared the hardware of %d of %d nodes" % (compared, len(names)))
            figures["nodes_compared"] = compared
            return figures
        finally:
            if server is not None:
                server.stop()
            sim.stop()

    def naive_phase(self, prefix, names, serial):
        book = self.workdir / "naive.yml"
        book.write_text(NAIVE_PLAYBOOK % {"profile": PROFILE, "resource": MIG_RESOURCE, "count": 7})
        inv = self.inventory_dir(prefix)
        wall, data, figures = self.playbook("naive-%s-serial-%d" % (prefix, serial), book, inv, {"naive_serial": serial})
        polls = [h.get("attempts", 1) for play in data["plays"] for t in play["tasks"]
                 if t["task"]["name"] == "Wait for success" for h in t["hosts"].values()]
        figures.update({"nodes": len(names), "serial": serial, "per_node_s": round(wall / len(names), 2),
                        "state_polls_per_node": round(statistics.mean(polls), 1) if polls else None,
                        "api_requests_per_node": round(figures["api_requests"]["total"] / float(len(names)), 1),
                        "task_seconds": top_tasks(data)})
        return figures


def lag_delta(before, after):
    """The agents' lag between two reads of their cumulative stats: count, mean, an upper bound of the p95, and max."""
    if not after:
        return None
    before = before or {"count": 0, "sum_s": 0.0, "buckets": dict((k, 0) for k in after["buckets"])}
    count = after["count"] - before["count"]
    if count <= 0:
        return {"reconciles": 0}
    buckets = sorted((float(k), after["buckets"][k] - before["buckets"].get(k, 0)) for k in after["buckets"])
    p95 = next((bound for bound, n in buckets if n >= 0.95 * count), None)
    return {"reconciles": count, "mean_s": round((after["sum_s"] - before["sum_s"]) / count, 3),
            "p95_at_most_s": p95 if p95 is not None else ">%s" % buckets[-1][0], "max_so_far_s": round(after["max_s"], 2)}


def top_tasks(data, limit=8):
    """The slowest tasks (wall seconds, summed over repeats) from the JSON callback's durations."""
    import datetime
    out = {}
    for play in data["plays"]:
        for task in play["tasks"]:
            duration = task["task"].get("duration") or {}
            if duration.get("start") and duration.get("end"):
                start, end = (datetime.datetime.strptime(duration[k][:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
                              for k in ("start", "end"))
                name = task["task"]["name"].split(" : ", 1)[-1]
                name = re.sub(r" \d+$", "", name)
                out[name] = round(out.get(name, 0.0) + (end - start).total_seconds(), 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:limit])


def beyond_bound(wall, batches, max_unavailable, bound):
    """Where wall - bound goes, in seconds (exact: the parts add up to it). A module call keeps min(window, its nodes)
    slots; while its nodes run, a slot is running a node's drain + apply + verify (the bound's work), or its fresh
    plan and give-back (per-node overhead), or idle: no node left for it while the others finish (the last wave's
    stragglers). Before the first node and after the last (the module's timeline) every slot waits. Each part counts
    per slot (divided by the call's width). The steps exceed the bound when a call is narrower than max_unavailable
    (the canary runs alone) or the nodes do not divide into full waves."""
    parts = dict.fromkeys(("per_node_overhead_s", "stragglers_s", "before_first_node_s", "after_last_node_s",
                           "rest_of_module_s"), 0.0)
    steps = module_wall = 0.0
    for call in batches:
        rows = call["rows"]
        width = float(max(1, min(max_unavailable, len(rows))))
        timeline = call["timeline"]
        duration = call.get("duration_s") or 0.0
        busy_steps = sum(sum(r["timings"].values()) for r in rows)
        occupied = sum(r["finished_s"] - r["started_s"] for r in rows)
        module_wall += duration
        steps += busy_steps / width
        parts["per_node_overhead_s"] += (occupied - busy_steps) / width
        parts["stragglers_s"] += timeline["nodes_s"] - occupied / width
        parts["before_first_node_s"] += timeline["prepare_s"] + timeline["pods_listed_s"]
        parts["after_last_node_s"] += timeline["follow_s"] + timeline["finish_s"]
        parts["rest_of_module_s"] += duration - sum(timeline[k] for k in (
            "prepare_s", "pods_listed_s", "nodes_s", "follow_s", "finish_s"))
    parts["narrow_calls_and_partial_waves_s"] = steps - bound
    parts["playbook_outside_module_s"] = wall - module_wall
    return dict((k, round(v, 1)) for k, v in parts.items())


def window_makespan(steps, width):
    """How long ``steps`` (seconds, in order) take through ``width`` slots when each goes to the first free slot."""
    slots = [0.0] * max(1, min(width, len(steps)))
    for step in steps:
        heapq.heapreplace(slots, slots[0] + step)
    return max(slots)


def replayed(batches, max_unavailable):
    """The rollout a perfect orchestrator would run with the same steps: each call's measured drain + apply + verify,
    in the order its nodes started, given to the first free slot (a sliding window with no per-node overhead, nothing
    before the first node or after the last, no playbook around it). The bound assumes every step takes the mean and
    the slots end together; with steps that vary (NVIDIA's operator, kwok and the agents), the slots drift apart and
    this is the least a window of max_unavailable can take. Wall over this is the orchestration's own share."""
    return sum(window_makespan([sum(row["timings"].values()) for row in sorted(call["rows"], key=lambda r: r["started_s"])],
                               max_unavailable) for call in batches)


def resampled(steps, width, draws=1000, seed=0):
    """The same replay for rollouts drawn at random from these steps (as many nodes, the same slots): the mean and
    the 90th percentile of (perfect window / bound), so one run's luck in the order of its slow steps is not read as
    the orchestration's."""
    rng = random.Random(seed)
    ratios = []
    for _draw in range(draws):
        drawn = [rng.choice(steps) for _step in steps]
        ratios.append(window_makespan(drawn, width) / (math.ceil(len(drawn) / float(width)) * statistics.mean(drawn)))
    ratios.sort()
    return {"mean": round(statistics.mean(ratios), 3), "p90": round(ratios[int(0.9 * len(ratios))], 3)}


def batch_results(data):
    out = []
    for play in data["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ", 1)[-1].startswith("Reconfigure step"):
                for host in task["hosts"].values():
                    if host.get("rows"):
                        out.append(host)
    return out


def markdown(result):
    """The figures as a markdown table (what docs/reconfigure.md shows)."""
    rows = []
    targets = {"inventory": "<= 5 s at 1000", "plan": "<= 30 s at 1000", "report": "<= 20 s at 1000",
               "validate": "<= 180 s at 1000", "validate-dcgm": "<= 180 s at 1000"}
    main = result.get("main") or {}
    n = result["nodes"]
    for phase in ("inventory", "plan", "report", "validate", "validate-dcgm"):
        if phase in main:
            f = main[phase]
            rows.append(("%s wall, %d nodes" % (phase, n), targets[phase], "%.1f s (CPU %.1f s)" % (f["wall_s"], f.get("cpu_s", 0)),
                         "%d req, peak %.0f MB" % (f["api_requests"]["total"], f["peak_rss_mb"]), load(f)))
            for key, label in (("graph", "inventory --graph (the plugin without the --list dump)"),
                               ("cluster_only", "validate without the per-host gpu_info read"),
                               ("ping", "ansible.builtin.ping on the same hosts (a per-host module's floor)")):
                g = f.get(key)
                if g:
                    rows.append(("%s, %d nodes" % (label, n), "-", "%.1f s (CPU %.1f s)" % (g["wall_s"], g.get("cpu_s", 0)),
                                 "%d req, peak %.0f MB" % (g["api_requests"]["total"], g["peak_rss_mb"]), load(g)))
    for key, label in (("rollout", "rollout, %d nodes" % n), ("fair_ours", "rollout, fair comparison")):
        f = main.get(key) if key == "rollout" else (result.get("fair") or {}).get("ours")
        if not f:
            continue
        rows.append(("%s, max_unavailable %d: wall vs bound" % (label, f["max_unavailable"]), "<= 1.05 x (200), 1.10 x (1000)",
                     "%.1f s vs %d x %.2f s = %.1f s -> %.3f x" % (
                         f["wall_s"], f["waves"], f["step_mean_s"], f["bound_s"], f["wall_over_bound"]),
                     "drain %(drain_s).2f + apply %(apply_s).2f + verify %(verify_s).2f s" % f["step_parts_mean_s"], load(f)))
        rows.append(("%s: the same steps replayed in a perfect window" % label, "-",
                     "%.1f s = %.3f x bound; wall %.3f x it" % (
                         f["replayed_s"], f["replayed_s"] / f["bound_s"], f["wall_s"] / f["replayed_s"]),
                     "the steps' spread alone, no orchestration; drawn at random from them: mean %.3f x, p90 %.3f x" % (
                         f["resampled_over_bound"]["mean"], f["resampled_over_bound"]["p90"]), load(f)))
        rows.append(("%s: overhead per node" % label, "< 0.3 s", "%.3f s" % f["overhead_per_node_s"],
                     "module window %.3f x bound" % f["module_window_over_bound"], load(f)))
        parts = f.get("beyond_bound")
        if parts:
            rows.append(("%s: wall - bound, by part" % label, "-", "%.1f s" % (f["wall_s"] - f["bound_s"]),
                         "fresh plan + give-back %(per_node_overhead_s).1f s, last wave's stragglers %(stragglers_s).1f s, "
                         "module before the first node %(before_first_node_s).1f s and after the last %(after_last_node_s).1f s "
                         "(rest %(rest_of_module_s).1f s), canary/partial waves %(narrow_calls_and_partial_waves_s).1f s, "
                         "playbook outside the module %(playbook_outside_module_s).1f s" % parts,
                         load(f)))
        rows.append(("%s: API requests per node (audit log)" % label, "<= 20, flat", "%.1f" % f["api_requests_per_node"],
                     ", ".join("%s %.1f" % (v, c / float(f["nodes"])) for v, c in sorted(f["api_requests"]["by_verb"].items())),
                     load(f)))
        rows.append(("%s: peak RSS, largest controller process" % label, "< 300 MB at 1000", "%.1f MB" % f["peak_rss_mb"], "",
                     load(f)))
        lag = f.get("agents_lag") or {}
        rows.append(("%s: agents' lag (simulator, not the collection)" % label, "-",
                     "mean %s s, p95 <= %s s" % (lag.get("mean_s"), lag.get("p95_at_most_s")),
                     "apply beyond the simulated %.0f s: %.2f s" % (result["apply_seconds"], f["apply_over_simulated_s"]),
                     load(f)))
    fair = result.get("fair") or {}
    if fair.get("naive"):
        f = fair["naive"]
        rows.append(("naive at the same parallelism (serial %d), %d nodes" % (f["serial"], f["nodes"]), ">= 1.5 x slower",
                     "%.1f s -> **%.2f x** ours" % (f["wall_s"], fair["naive_over_ours"]),
                     "%.1f requests/node, %.1f state polls/node" % (f["api_requests_per_node"], f["state_polls_per_node"] or 0),
                     load(f)))
    if result.get("naive_serial1"):
        f = result["naive_serial1"]
        rows.append(("naive at serial 1 (%d nodes, extrapolated to %d)" % (f["nodes"], n), "-",
                     "%.1f s/node -> %.0f s: %s x ours" % (f["per_node_s"], f["extrapolated_wall_s"], result.get("naive_serial1_over_ours")),
                     "", load(f)))
    lines = ["| figure | target | measured | detail | load avg (1 min, before/after) |", "|---|---|---|---|---|"]
    lines += ["| %s |" % " | ".join(r) for r in rows]
    return "\n".join(lines) + "\n"


def load(figures):
    return "%.1f / %.1f" % tuple(figures["load_avg_1m"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--max-unavailable", type=int, default=10)
    # A change from all-disabled needs a MIG mode change; with a host-installed driver MIG Manager alone sleeps
    # 30 s for it (mig-parted reconfigure.go), so 30 s is a realistic floor for the simulated apply.
    parser.add_argument("--apply-seconds", type=float, default=30.0)
    parser.add_argument("--phases", default="inventory,plan,rollout,report,validate,validate-dcgm")
    parser.add_argument("--fair-nodes", type=int, default=0)
    parser.add_argument("--fair-max-unavailable", type=int, default=20)
    parser.add_argument("--naive-nodes", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--md", default=None)
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconfigure-"))
    bench = Bench(args, workdir)
    result = {"nodes": args.nodes, "max_unavailable": args.max_unavailable, "apply_seconds": args.apply_seconds,
              "profile": PROFILE, "model": MODEL, "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:])}
    try:
        bench.start()
        if phases and args.nodes:
            names = bench.make_nodes("bench", args.nodes)
            inv = bench.inventory_dir("bench")
            main_result = result["main"] = {}
            for phase in phases:
                log("%s over %d nodes" % (phase, args.nodes))
                if phase == "inventory":
                    main_result[phase] = bench.inventory_phase(inv, args.nodes)
                elif phase == "plan":
                    main_result[phase] = bench.plan_phase(inv, "bench", args.nodes, args.max_unavailable)
                elif phase == "rollout":
                    main_result[phase] = bench.rollout_phase(inv, "bench", names, args.max_unavailable)
                elif phase == "report":
                    main_result[phase] = bench.report_phase(inv, "bench", args.nodes)
                elif phase == "validate":
                    main_result[phase] = bench.validate_phase(inv, names)
                elif phase == "validate-dcgm":
                    main_result[phase] = bench.validate_from_dcgm(inv, names)
                else:
                    raise SystemExit("unknown phase %r" % phase)
        if args.fair_nodes:
            fair = result["fair"] = {}
            names = bench.make_nodes("ours", args.fair_nodes)
            log("fair comparison: ours over %d nodes, max_unavailable %d" % (args.fair_nodes, args.fair_max_unavailable))
            fair["ours"] = bench.rollout_phase(bench.inventory_dir("ours"), "ours", names, args.fair_max_unavailable)
            names = bench.make_nodes("naive", args.fair_nodes)
            log("fair comparison: naive over %d nodes, serial %d" % (args.fair_nodes, args.fair_max_unavailable))
            fair["naive"] = bench.naive_phase("naive", names, args.fair_max_unavailable)
            fair["naive_over_ours"] = round(fair["naive"]["wall_s"] / fair["ours"]["wall_s"], 2)
        if args.naive_nodes:
            names = bench.make_nodes("serial1", args.naive_nodes)
            log("naive playbook at serial 1 over %d nodes" % args.naive_nodes)
            f = result["naive_serial1"] = bench.naive_phase("serial1", names, 1)
            f["extrapolated_wall_s"] = round(f["per_node_s"] * args.nodes, 1)
            ours = (result.get("main") or {}).get("rollout")
            if ours:
                result["naive_serial1_over_ours"] = round(f["extrapolated_wall_s"] / ours["wall_s"], 1)
    finally:
        bench.stop()
        result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        text = json.dumps(result, indent=2, sort_keys=True)
        print(text)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text + "\n")
    table = markdown(result)
    print(table)
    if args.md:
        Path(args.md).write_text(table)


if __name__ == "__main__":
    main()
