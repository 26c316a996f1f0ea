# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report: per node, GPU and MIG slice facts, findings, totals and a suggested layout.

Pure functions over what the API server and the metrics source returned (no I/O here): the
``gpu_cluster_info`` module gathers, this builds; the renderers turn the result into a table and a page.
Facts: MIG Manager labels (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go), GFD labels and device-plugin
resources (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md, internal/rm/rm.go), dcgm-exporter metrics
and labels (NVIDIA/dcgm-exporter etc/default-counters.csv); what the report shows and why: docs/report.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import datetime

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import gpu_labels
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import pod_gpu_requests, pod_ref
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.report import cluster_facts
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, placement, plan, profiles
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import PlanningError, ProfileNameError

SCHEMA_VERSION = 1
# DCGM_FI_DEV_GPU_UTIL is not reported per MIG instance; the profiling field GR_ENGINE_ACTIVE is
# (NVIDIA/dcgm-exporter#216).
METRIC_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
METRIC_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
SLICE_STATES = ("free", "busy", "idle", "allocated")  # allocated: held by a pod, activity unknown (no metrics)
FINDING_KINDS = ("drift", "stuck", "idle", "unallocatable", "suggestion", "empty")
ACTIVE_PHASES = ("Pending", "Running", "Unknown")
MEMORY_HEADROOM = 1.2  # suggested slice memory >= observed use x this


def _parse_time(text):
    if not text:
        return None
    if isinstance(text, datetime.datetime):
        return text if text.tzinfo else text.replace(tzinfo=_UTC)
    text = str(text).replace("Z", "+00:00")
    try:
        return datetime.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_UTC)
    except ValueError:
        return None


class _Utc(datetime.tzinfo):
    def utcoffset(self, dt):
        return datetime.timedelta(0)

    def tzname(self, dt):
        return "UTC"

    def dst(self, dt):
        return datetime.timedelta(0)


_UTC = _Utc()


def utc_now():
    return datetime.datetime.now(_UTC)


def iso(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def label_since(node, label):
    """When a label was last written, from the node's managedFields (the API keeps no label history).

    The time is that of the field manager's last update to any field it owns, so it is a lower bound of
    how long the label has had its value when that manager (MIG Manager) writes only a few labels.
    """
    latest = None
    key = "f:" + label
    for entry in (node.get("metadata") or {}).get("managedFields") or []:
        labels = (((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {})
        if key in labels:
            moment = _parse_time(entry.get("time"))
            if moment and (latest is None or moment > latest):
                latest = moment
    return latest


def _model_for(summary, metric_model=None):
    for name in (metric_model, summary.get("product_label")):
        if not name:
            continue
        model = catalog.get_model(name=name) if name == metric_model else catalog.model_from_gfd_product(name)
        if model:
            return model
    return None


def _profile_memory_mb(profile):
    if profile.get("memory_mb"):
        return profile["memory_mb"]
    return int(profiles.parse_profile(profile["name"]).gb * 1024)


def _gpu_count(summary):
    """Physical GPUs: gpu.count counts MIG devices under single, so prefer capacity/labels that do not."""
    if summary["mig_strategy"] == "single" and summary["mig_devices"]:
        return None
    return summary["count"]


def _hardware_from_labels(summary, model, gpu_count):
    return {"gpus": [{"index": i, "name": model["name"], "pci_device_id": model.get("pci_device_id"),
                      "mig": {"current": True, "pending": True}} for i in range(gpu_count)]}


def _label_plan(summary, model, gpu_count):
    """What the node's mig.config label means for its GPUs (None when it cannot be planned)."""
    if not (summary["mig_config"] and model and gpu_count):
        return None, None
    try:
        return plan.plan_node(_hardware_from_labels(summary, model, gpu_count),
                              config_name=summary["mig_config"]), None
    except PlanningError as exc:
        return None, str(exc)


def _metric_gpus(node_metrics):
    """{gpu index: {"model": ..., "instances": {gi_id: {...}}}} from the node's metric samples."""
    gpus = {}
    for sample in node_metrics:
        gpu = gpus.setdefault(sample["gpu"], {"model": sample.get("model"), "instances": {}, "whole": {}})
        if sample.get("gi_id") is None:
            gpu["whole"].setdefault(sample["metric"], sample["value"])
            continue
        instance = gpu["instances"].setdefault(sample["gi_id"], {"profile": sample.get("profile"), "pod": None})
        instance[sample["metric"]] = sample["value"]
        if sample.get("pod"):
            instance["pod"] = sample["pod"]
    return gpus


def _canonical(name):
    """dcgm-exporter's GPU_I_PROFILE (``1g.10gb``, ``1g.10gb+me``) as the planner names it; unknown forms kept."""
    if not name:
        return ""
    try:
        return profiles.canonical_profile_name(name)
    except ProfileNameError:
        return str(name)


def _place(model, counts):
    """Planner placements for a profile multiset (where a slice sits in the picture when only counts are known).

    A profile the model's table lacks (an exporter of a newer driver, a mislabelled series) places nothing: the
    slices are still listed, without a position, and ``_unknown_profile_findings`` names them."""
    if not (model and counts):
        return []
    try:
        solution = placement.solve(model, counts)
    except PlanningError:
        return []
    return list(solution.placements) if solution.feasible else []


def _unknown_profiles(model, gpus):
    """[(gpu index, profile)] of the slices whose profile the GPU model's table does not have."""
    if not model:
        return []
    return [(gpu["index"], piece["profile"]) for gpu in gpus for piece in gpu["slices"]
            if not catalog.find_profile(model, piece["profile"])]


def _slice_state(holder, engine, idle_threshold):
    if not holder:
        return "free"
    if engine is None:
        return "allocated"
    return "idle" if engine < idle_threshold else "busy"


def _build_gpus(summary, model, gpu_count, label_plan, node_metrics, options):
    """Per-GPU slices: from dcgm metrics when there are any (what the hardware holds), else the label's plan."""
    from_metrics = _metric_gpus(node_metrics)
    gpus = []
    if from_metrics:
        for index in sorted(from_metrics):
            data = from_metrics[index]
            gpu_model = _model_for(summary, data.get("model")) or model
            instances = sorted(data["instances"].items())
            counts = collections.Counter(_canonical(i["profile"]) for _gi, i in instances if i.get("profile"))
            spots = _place(gpu_model, dict(counts))
            slices = []
            for gi_id, instance in instances:
                name = _canonical(instance["profile"])
                spot = next((s for s in spots if s["profile"] == name), None)
                if spot:
                    spots.remove(spot)
                slices.append({"gi_id": gi_id, "profile": name, "start": spot["start"] if spot else None,
                               "size": spot["size"] if spot else None, "pod": instance.get("pod"),
                               "engine_active": instance.get(METRIC_ENGINE),
                               "fb_used_mib": instance.get(METRIC_FB_USED)})
            gpus.append({"index": index, "model": (gpu_model or {}).get("name") or data.get("model"),
                         "mig_enabled": bool(instances), "layout_source": "dcgm", "slices": slices,
                         "engine_active": data["whole"].get(METRIC_ENGINE) if not instances else None,
                         "fb_used_mib": data["whole"].get(METRIC_FB_USED) if not instances else None})
    elif label_plan:
        for entry in label_plan["gpus"]:
            slices = [{"gi_id": None, "profile": p["profile"], "start": p["start"], "size": p["size"], "pod": None,
                       "engine_active": None, "fb_used_mib": None} for p in entry["placements"]]
            gpus.append({"index": entry["index"], "model": entry["model"], "mig_enabled": bool(entry["mig_enabled"]),
                         "layout_source": "label", "slices": slices, "engine_active": None, "fb_used_mib": None})
    elif gpu_count:
        for index in range(gpu_count):
            gpus.append({"index": index, "model": (model or {}).get("name"), "mig_enabled": False,
                         "layout_source": "labels", "slices": [], "engine_active": None, "fb_used_mib": None})
    return gpus


def _assign_pods(gpus, pods, strategy):
    """Which pod holds which slice: the exporter's pod label when it has one, else pods in order per profile."""
    held = set(s["pod"] for g in gpus for s in g["slices"] if s["pod"])
    wanting = collections.defaultdict(list)
    for pod in pods:
        ref = pod_ref(pod)
        if ref in held:
            continue
        for resource, count in sorted(pod_gpu_requests(pod).items()):
            wanting[resource].extend([ref] * count)
    for gpu in gpus:
        for piece in gpu["slices"]:
            if piece["pod"]:
                continue
            resource = (gpu_labels.RESOURCE_GPU if strategy == "single"
                        else gpu_labels.mig_resource(piece["profile"]))
            if wanting.get(resource):
                piece["pod"] = wanting[resource].pop(0)
                piece["pod_mapping"] = "by-request"
            piece.setdefault("pod_mapping", "dcgm" if piece["pod"] else None)


def _finding(kind, severity, node, message, action, gpu=None, **details):
    return {"kind": kind, "severity": severity, "node": node, "gpu": gpu, "message": message, "action": action,
            "details": details}


def _drift_findings(summary, label_plan, gpus, plan_error):
    name = summary["node_name"]
    findings = []
    if summary["mig_invalid"]:
        findings.append(_finding(
            "drift", "error", name,
            "GFD labels the node %s: mig-strategy=single with more than one profile or mixed MIG modes"
            % summary["product_label"],
            "use one all-<profile> config on this node, or switch the cluster to the mixed strategy"))
    for problem in cluster_facts.sharing_problems(summary):
        findings.append(_finding("drift", "warning", name, "time-slicing/MPS labels disagree: %s" % problem,
                                 "check the device-plugin config the node gets (nvidia.com/device-plugin.config) "
                                 "and that GPU Feature Discovery restarted after it changed"))
    if plan_error:
        findings.append(_finding("drift", "error", name, "mig.config=%s cannot be applied here: %s"
                                 % (summary["mig_config"], plan_error),
                                 "set a config that exists for this GPU model (see the survey/named configs)"))
    if label_plan is None or summary["mig_config_state"] not in (None, "success"):
        return findings
    strategy = summary["mig_strategy"] if summary["mig_strategy"] in plan.STRATEGIES else "none"
    expected = dict((k, v) for k, v in plan.expected_resources(label_plan, strategy).items() if v)
    # Time-sliced/MPS nodes advertise replicas per device, maybe renamed (.shared): compare the devices.
    advertised = dict((k, v) for k, v in gpu_labels.devices_advertised(summary["allocatable"], summary["labels"]).items()
                      if v)
    if advertised != expected:
        findings.append(_finding(
            "drift", "warning", name,
            "allocatable %s differs from what mig.config=%s gives under the %s strategy: %s"
            % (_fmt(advertised), summary["mig_config"], strategy, _fmt(expected)),
            "check the device plugin on this node; re-apply the config with mig-reconfigure.yml",
            expected=expected, allocatable=advertised))
    label_counts = collections.Counter()
    for entry in label_plan["gpus"]:
        label_counts.update(dict((gpu_labels.resource_profile(p), c) for p, c in entry["target"].items() if c))
    if strategy == "mixed" and summary["mig_devices"] and dict(summary["mig_devices"]) != dict(label_counts):
        findings.append(_finding(
            "drift", "warning", name,
            "GFD labels count MIG devices %s but mig.config=%s means %s"
            % (_fmt(summary["mig_devices"]), summary["mig_config"], _fmt(dict(label_counts))),
            "GFD is stale or the layout changed by hand; re-apply the config",
            gfd=summary["mig_devices"], label=dict(label_counts)))
    if gpus and gpus[0]["layout_source"] == "dcgm":
        hardware = collections.Counter(gpu_labels.resource_profile(s["profile"]) for g in gpus for s in g["slices"])
        if dict(hardware) != dict(label_counts):
            findings.append(_finding(
                "drift", "error", name,
                "hardware holds %s but mig.config=%s (state success) means %s"
                % (_fmt(dict(hardware)) or "no MIG instances", summary["mig_config"], _fmt(dict(label_counts))),
                "the layout was changed outside MIG Manager or lost at reboot: re-apply mig.config with "
                "mig-reconfigure.yml (MIG Manager acts only on label changes)",
                hardware=dict(hardware), label=dict(label_counts)))
    return findings


def _stuck_findings(summary, since, now, options):
    name = summary["node_name"]
    state = summary["mig_config_state"]
    findings = []
    age = (now - since).total_seconds() if since else None
    if state in ("pending", "rebooting") and (age is None or age > options["stuck_after_s"]):
        # The message names the moment, not the age: it stays the same from one run to the next (content_view).
        findings.append(_finding(
            "stuck", "error", name,
            "mig.config.state=%s %s (mig.config=%s)"
            % (state, "since %s, longer than stuck_after (%ds)" % (iso(since), options["stuck_after_s"])
               if age is not None else "for an unknown time", summary["mig_config"]),
            "read the MIG Manager pod log on the node; look for pods or host processes holding the GPUs; "
            "mig-reconfigure.yml can un-wedge (restore deploy labels, re-trigger) or roll back",
            state=state, seconds=age))
    elif state == "failed":
        findings.append(_finding(
            "stuck", "error", name, "mig.config.state=failed for mig.config=%s" % summary["mig_config"],
            "read the MIG Manager pod log; fix the cause (GPU in use, unknown config, reset needed) and re-apply "
            "or roll back with mig-reconfigure.yml", state=state, seconds=age))
    if summary["deploy_paused"] and (state != "pending" or (age is not None and age > options["stuck_after_s"])):
        findings.append(_finding(
            "stuck", "error", name,
            "operands left %s: %s (state %s)" % (gpu_labels.PAUSED_VALUE, ", ".join(summary["deploy_paused"]), state),
            "restore %s=true on the node (mig-reconfigure.yml un-wedge does this)" % gpu_labels.deploy_label("<operand>"),
            paused=summary["deploy_paused"]))
    return findings


def _fmt(counts):
    return ", ".join("%s=%s" % (k, v) for k, v in sorted(counts.items()))


def _suggest(summary, model, gpus, pending_demand, options):
    """A layout for this node from observed memory use and pending requests, checked with the planner."""
    if (not model or not gpus or summary["mig_strategy"] == "none" or not summary["mig_capable"]
            or summary["mig_config_state"] not in (None, "success")):
        return None
    table = [p for p in model["profiles"] if profiles.is_base_profile(p["name"])]
    by_memory = sorted(table, key=lambda p: (_profile_memory_mb(p), p["slices"]))
    smallest = by_memory[0]["name"] if by_memory else None
    wanted_pending = [p for p in pending_demand if catalog.find_profile(model, p)]
    per_gpu, evidence = [], False
    for gpu in gpus:
        request = collections.Counter()
        for piece in gpu["slices"]:
            if not piece["pod"]:
                continue
            fit = piece["profile"]
            if piece["fb_used_mib"] is not None:
                need = piece["fb_used_mib"] * MEMORY_HEADROOM
                fit = next((p["name"] for p in by_memory if _profile_memory_mb(p) >= need), piece["profile"])
                evidence = evidence or fit != piece["profile"]
            request[fit] += 1
        while wanted_pending:
            trial = request + collections.Counter([wanted_pending[0]])
            if not placement.solve(model, dict(trial)).feasible:
                break
            request = trial
            pending_demand.remove(wanted_pending.pop(0))  # one node takes each pending request
            evidence = True
        while smallest and placement.solve(model, dict(request + collections.Counter([smallest]))).feasible:
            request[smallest] += 1
        per_gpu.append({"index": gpu["index"], "mig_devices": dict(request)})
    current = [dict(collections.Counter(s["profile"] for s in g["slices"])) for g in gpus]
    if not evidence or [g["mig_devices"] for g in per_gpu] == current:
        return None
    config_name = "gpufleet-suggested"
    config = {"version": "v1", "mig-configs": {config_name: [
        {"devices": [g["index"]], "mig-enabled": True, "mig-devices": g["mig_devices"]} for g in per_gpu]}}
    hardware = {"gpus": [{"index": g["index"], "name": model["name"], "pci_device_id": model.get("pci_device_id"),
                          "mig": {"current": True, "pending": True}} for g in gpus]}
    conflict = None
    try:
        checked = plan.plan_node(hardware, config_name=config_name, config=config, config_source="suggestion")
        feasible, reason = checked["feasible"], checked["reason"]
        if feasible and summary["mig_strategy"] in plan.STRATEGIES:
            conflict = plan.strategy_conflict(checked, summary["mig_strategy"])
    except PlanningError as exc:
        feasible, reason = False, str(exc)
    return {"gpus": per_gpu, "mig_parted_config": config, "feasible": feasible and not conflict,
            "reason": conflict or reason, "basis": "memory use x%.1f and pending requests" % MEMORY_HEADROOM}


def describe_source(connection):
    """``context prod of kubeconfig /home/me/.kube/config (API server 10.0.0.1:6443)``: where the nodes were read.

    ``connection``: {kubeconfig (a path, "(mapping)" or None), context (None: unknown), server ("host:port")}."""
    connection = connection or {}
    kubeconfig, context, server = connection.get("kubeconfig"), connection.get("context"), connection.get("server")
    if context and kubeconfig:
        where = "context %s of kubeconfig %s" % (context, kubeconfig)
    elif kubeconfig:
        where = "the current context of kubeconfig %s" % kubeconfig
    elif context:
        where = "context %s" % context
    else:
        where = "the connection given (no kubeconfig)"
    return "%s%s" % (where, " (API server %s)" % server if server else "")


def _empty_finding(nodes, connection):
    """A report of no GPU node is a warning, not a clean bill: a wrong kubeconfig or context reads a cluster
    without GPUs just as well. Names where the nodes were read and how many nodes that gave."""
    connection = connection or {}
    selector = connection.get("label_selector")
    if not nodes:
        seen = "no node matches label selector %s" % selector if selector else "the API server lists no nodes"
    else:
        seen = "%d node%s%s, none with GPU labels (%s, %s) or GPU resources" % (
            len(nodes), "" if len(nodes) == 1 else "s", " matching label selector %s" % selector if selector else "",
            gpu_labels.LABEL_GPU_PRESENT, gpu_labels.LABEL_PRODUCT)
    return _finding(
        "empty", "warning", None, "no GPU nodes in %s: %s" % (describe_source(connection), seen),
        "check that the kubeconfig and context are those of the GPU cluster meant%s; on a GPU cluster, check that "
        "the GPU Operator (or GPU Feature Discovery) runs and labels the GPU nodes"
        % (" and that the label selector matches its GPU nodes" if selector else ""),
        kubeconfig=connection.get("kubeconfig"), context=connection.get("context"), server=connection.get("server"),
        label_selector=selector, nodes_listed=len(nodes))


def build_report(nodes, pods, metrics=None, options=None, now=None, metrics_source="none", connection=None):
    """The report dict (schema: REPORT_SCHEMA). ``nodes``/``pods``: API objects as dicts; ``metrics``:
    [{node, gpu, gi_id, profile, model, metric, value, pod}] (values averaged over the window); ``connection``:
    where the nodes were read ({kubeconfig, context, server, label_selector}, see ``describe_source``), named by
    the ``empty`` finding when no node is a GPU node."""
    options = dict({"idle_below": 0.05, "stuck_after_s": 900, "window_s": 600}, **(options or {}))
    now = now or utc_now()
    by_node_metrics = collections.defaultdict(list)
    for sample in metrics or []:
        by_node_metrics[sample["node"]].append(sample)
    pods_by_node = collections.defaultdict(list)
    pending_unscheduled = []
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ACTIVE_PHASES or not pod_gpu_requests(pod):
            continue
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            pods_by_node[node_name].append(pod)
        elif phase == "Pending":
            pending_unscheduled.append(pod)

    gpu_nodes = [n for n in nodes if gpu_labels.is_gpu_node(n)]
    summaries = dict((n["metadata"]["name"], cluster_facts.node_summary(n)) for n in gpu_nodes)
    offered = collections.Counter()
    for summary in summaries.values():
        offered.update(summary["allocatable"])

    findings, report_nodes = [], []
    pending_profiles = []
    for pod in pending_unscheduled:
        for resource, count in pod_gpu_requests(pod).items():
            if gpu_labels.resource_mig_profile(resource):
                pending_profiles.extend([gpu_labels.resource_mig_profile(resource)] * count)
            if offered.get(resource, 0) <= 0:
                findings.append(_finding(
                    "unallocatable", "error", None,
                    "pod %s is Pending for %s=%d, which no node offers" % (pod_ref(pod), resource, count),
                    "change a node's MIG layout to one with this profile (see suggestions), or request a profile "
                    "that exists: offered %s" % (_fmt(dict((k, v) for k, v in offered.items() if v)) or "none"),
                    pod=pod_ref(pod), resource=resource, count=count))

    totals = collections.defaultdict(lambda: {"allocatable": 0, "requested": 0, "idle_allocated": 0, "free": 0})
    for name in sorted(summaries):
        summary = summaries[name]
        node = next(n for n in gpu_nodes if n["metadata"]["name"] == name)
        model = _model_for(summary)
        gpu_count = _gpu_count(summary) or (len(_metric_gpus(by_node_metrics[name])) or None)
        count_finding = None
        if gpu_count and gpu_count > gpu_labels.MAX_GPUS_PER_NODE:
            count_finding = _finding(
                "drift", "error", name,
                "%s=%d is more GPUs than a node holds (at most %d accepted); its GPUs are not listed"
                % (gpu_labels.LABEL_COUNT, gpu_count, gpu_labels.MAX_GPUS_PER_NODE),
                "check GPU Feature Discovery on the node (its labels are rewritten on each of its runs)")
            gpu_count = None
        label_plan, plan_error = _label_plan(summary, model, gpu_count)
        gpus = _build_gpus(summary, model, gpu_count, label_plan, by_node_metrics[name], options)
        node_pods = pods_by_node.get(name, [])
        _assign_pods(gpus, node_pods, summary["mig_strategy"])
        for gpu in gpus:
            for piece in gpu["slices"]:
                piece["state"] = _slice_state(piece["pod"], piece["engine_active"], options["idle_below"])
                piece.setdefault("pod_mapping", None)
        requested = collections.Counter()
        for pod in node_pods:
            requested.update(pod_gpu_requests(pod))
        since = label_since(node, gpu_labels.LABEL_MIG_STATE)
        node_findings = _drift_findings(summary, label_plan, gpus, plan_error)
        if count_finding:
            node_findings.insert(0, count_finding)
        node_findings += _stuck_findings(summary, since, now, options)
        for gpu in gpus:
            for piece in gpu["slices"]:
                if piece["state"] == "idle":
                    node_findings.append(_finding(
                        "idle", "warning", name,
                        "slice %s (GI %s) on GPU %s is held by %s but its engine was active %.1f%% of the last %ds"
                        % (piece["profile"], piece["gi_id"], gpu["index"], piece["pod"],
                           100.0 * piece["engine_active"], options["window_s"]),
                        "release it (scale the workload down) or give the pod a smaller slice",
                        gpu=gpu["index"], pod=piece["pod"], profile=piece["profile"],
                        engine_active=piece["engine_active"]))
        unknown = _unknown_profiles(model, gpus)
        for index, profile in unknown:
            node_findings.append(_finding(
                "drift", "warning", name,
                "dcgm-exporter reports a GPU instance %s on GPU %s, which %s does not have"
                % ("of profile %r" % profile if profile else "without a GPU_I_PROFILE label", index, model["name"]),
                "check the exporter's GPU_I_PROFILE labels and the node's MIG layout (nvidia-smi mig -lgi)",
                gpu=index, profile=profile))
        suggestion = None if unknown else _suggest(summary, model, gpus, pending_profiles, options)
        if suggestion:
            node_findings.append(_finding(
                "suggestion", "info", name,
                "suggested layout %s (%s); planner: %s" % (
                    "; ".join("GPU %d: %s" % (g["index"], _fmt(g["mig_devices"])) for g in suggestion["gpus"]),
                    suggestion["basis"], "feasible" if suggestion["feasible"] else suggestion["reason"]),
                "put the mig_parted_config into the ClusterPolicy's custom config and run mig-reconfigure.yml",
                **suggestion))
        findings.extend(node_findings)
        for resource, count in summary["allocatable"].items():
            totals[resource]["allocatable"] += count
        for resource, count in requested.items():
            totals[resource]["requested"] += count
        for gpu in gpus:
            for piece in gpu["slices"]:
                key = (gpu_labels.RESOURCE_GPU if summary["mig_strategy"] == "single"
                       else gpu_labels.mig_resource(piece["profile"]))
                if piece["state"] == "idle":
                    totals[key]["idle_allocated"] += 1
                elif piece["state"] == "free":
                    totals[key]["free"] += 1
        report_nodes.append({
            "name": name, "model": summary["model"], "product_label": summary["product_label"],
            "mig_capable": summary["mig_capable"], "mig_strategy": summary["mig_strategy"],
            "mig_config": summary["mig_config"], "mig_config_state": summary["mig_config_state"],
            "state_since": iso(since), "state_seconds": int((now - since).total_seconds()) if since else None,
            "deploy_paused": summary["deploy_paused"], "ready": summary["ready"],
            "unschedulable": summary["unschedulable"], "allocatable": summary["allocatable"],
            "replicas": summary["replicas"], "sharing_strategy": summary["sharing_strategy"],
            "requested": dict(requested), "gpus": gpus,
            "findings": len(node_findings),
        })
    if not report_nodes:
        findings.append(_empty_finding(nodes, connection))
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": iso(now),
        "metrics_source": metrics_source,
        "options": options,
        "nodes": report_nodes,
        "findings": findings,
        "totals": {"nodes": len(report_nodes), "gpus": sum(len(n["gpus"]) for n in report_nodes),
                   "per_resource": dict((k, dict(v)) for k, v in sorted(totals.items()))},
    }


# What depends on the moment the report was built rather than on the fleet: its time, each node's seconds in its
# MIG state, a stuck finding's seconds. Two reports equal but for these describe the same fleet.
VOLATILE_KEYS = ("generated_at", "nodes[].state_seconds", "findings[].details.seconds")


def content_view(report):
    """``report`` without its VOLATILE_KEYS (a copy): what a report says about the fleet."""
    view = dict(report)
    view.pop("generated_at", None)
    view["nodes"] = [dict((k, v) for k, v in node.items() if k != "state_seconds")
                     for node in report.get("nodes") or []]
    findings = []
    for finding in report.get("findings") or []:
        finding = dict(finding)
        if isinstance(finding.get("details"), dict):
            finding["details"] = dict((k, v) for k, v in finding["details"].items() if k != "seconds")
        findings.append(finding)
    view["findings"] = findings
    return view


def _plain(value):
    """``value`` with its mappings' keys in order (and tuples as lists): the same report renders the same page
    whether it was built now or read back from report.json."""
    if isinstance(value, dict):
        return dict((k, _plain(value[k])) for k in sorted(value))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def keep_unchanged(fresh, previous):
    """The report to write: ``previous`` (the report written before, a dict or None) when it says the same about the
    fleet as ``fresh`` (``content_view``), so an unchanged fleet leaves report.json and report.html as they are and
    their ``generated_at`` says when this content was first seen; else ``fresh``. Keys in order either way."""
    if isinstance(previous, dict) and previous.get("schema_version") == fresh.get("schema_version"):
        try:
            if _plain(content_view(previous)) == _plain(content_view(fresh)):
                return _plain(previous)
        except (AttributeError, TypeError, ValueError):  # a report.json of another shape: written anew
            pass
    return _plain(fresh)


_NULLABLE_NUMBER = {"type": ["number", "null"]}
_NULLABLE_STRING = {"type": ["string", "null"]}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpufleet.gpu_operator fleet report",
    "type": "object",
    "required": ["schema_version", "generated_at", "metrics_source", "options", "nodes", "findings", "totals"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "generated_at": {"type": "string"},
        "metrics_source": {"enum": ["none", "prometheus", "dcgm-exporter"]},
        "options": {"type": "object"},
        "nodes": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "model", "mig_strategy", "mig_config", "mig_config_state", "state_since",
                         "allocatable", "requested", "gpus", "deploy_paused"],
            "properties": {
                "name": {"type": "string"},
                "model": _NULLABLE_STRING,
                "product_label": _NULLABLE_STRING,
                "mig_capable": {"type": "boolean"},
                "mig_strategy": {"enum": ["none", "single", "mixed"]},
                "mig_config": _NULLABLE_STRING,
                "mig_config_state": {"enum": [None, "pending", "rebooting", "success", "failed"]},
                "state_since": _NULLABLE_STRING,
                "state_seconds": {"type": ["integer", "null"]},
                "deploy_paused": {"type": "array", "items": {"type": "string"}},
                "ready": {"type": "boolean"},
                "unschedulable": {"type": "boolean"},
                "allocatable": _COUNTS,
                "replicas": {"type": "integer", "minimum": 1},
                "sharing_strategy": {"type": "string"},
                "requested": _COUNTS,
                "findings": {"type": "integer"},
                "gpus": {"type": "array", "items": {
                    "type": "object",
                    "required": ["index", "model", "mig_enabled", "layout_source", "slices"],
                    "properties": {
                        "index": {"type": "integer"},
                        "model": _NULLABLE_STRING,
                        "mig_enabled": {"type": "boolean"},
                        "layout_source": {"enum": ["dcgm", "label", "labels"]},
                        "engine_active": _NULLABLE_NUMBER,
                        "fb_used_mib": _NULLABLE_NUMBER,
                        "slices": {"type": "array", "items": {
                            "type": "object",
                            "required": ["gi_id", "profile", "start", "size", "pod", "state", "engine_active",
                                         "fb_used_mib"],
                            "properties": {
                                "gi_id": {"type": ["integer", "null"]},
                                "profile": {"type": "string"},
                                "start": {"type": ["integer", "null"]},
                                "size": {"type": ["integer", "null"]},
                                "pod": _NULLABLE_STRING,
                                "pod_mapping": {"enum": [None, "dcgm", "by-request"]},
                                "state": {"enum": list(SLICE_STATES)},
                                "engine_active": _NULLABLE_NUMBER,
                                "fb_used_mib": _NULLABLE_NUMBER,
                            },
                        }},
                    },
                }},
            },
        }},
        "findings": {"type": "array", "items": {
            "type": "object",
            "required": ["kind", "severity", "node", "gpu", "message", "action", "details"],
            "additionalProperties": False,
            "properties": {
                "kind": {"enum": list(FINDING_KINDS)},
                "severity": {"enum": ["info", "warning", "error"]},
                "node": _NULLABLE_STRING,
                "gpu": {"type": ["integer", "null"]},
                "message": {"type": "string"},
                "action": {"type": "string"},
                "details": {"type": "object"},
            },
        }},
        "totals": {"type": "object", "required": ["nodes", "gpus", "per_resource"], "properties": {
            "nodes": {"type": "integer"},
            "gpus": {"type": "integer"},
            "per_resource": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["allocatable", "requested", "idle_allocated", "free"],
                "properties": dict((k, {"type": "integer"}) for k in
                                   ("allocatable", "requested", "idle_allocated", "free"))}},
        }},
    },
}
