# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""A node order under which no pod a MIG rollout evicts is left without room at any moment (pure).

capacity.shortages() counts the end state. Order matters on the way there: a node whose MIG-slice pods need
slices that another node only offers after its own change must go after that node; whole-GPU nodes whose pods
must land on whole GPUs elsewhere must go before those GPUs turn into slices. This module replays a rollout
node by node - the canary alone, then the sliding window of ``window`` nodes (or batches held together) as
mig_rollout runs them - on a model of the cluster: nodes already changed offer the new layout, nodes not yet
changed the old one, nodes in flight nothing. Each evicted pod must fit on one node (first fit, largest request
first, changed nodes preferred so it is not evicted again), per GPU resource name, time-sliced ``.shared`` names
included (gpu_labels.pod_gpu_requests / node_gpu_allocatable, as capacity.py counts).

The search is a depth-first search over orders, the given order tried first and candidates kept in the given
order, bounded by ``budget`` node starts: it finds an order when one exists within the budget and says whether it
was exhausted. Where the real scheduler places pods elsewhere than this model, the room check before each node
(mig_rollout) is the guard.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import (
    node_gpu_allocatable,
    pod_gpu_requests,
    pod_ref,
    shares_expected,
    unschedulable,
)

DEFAULT_BUDGET = 2000


def finish_before(count, window, canary=True, hold=False):
    """For each position of an order of ``count`` nodes, the earlier positions that are done before it starts:
    the canary before the second node; in a sliding window the oldest in flight once ``window`` are in flight;
    with ``hold`` (batches held cordoned together) a whole batch before the next one starts."""
    window = max(1, int(window or count or 1))
    first = 1 if canary else 0
    out, in_flight = [], []
    for i in range(count):
        new_step = (canary and i == 1) or (hold and i > first and (i - first) % window == 0)
        done = []
        if new_step:
            done, in_flight = in_flight, []
        elif len(in_flight) >= window:
            done = [in_flight.pop(0)]
        out.append(done)
        in_flight.append(i)
    return out


class Cluster(object):
    """The model: per node its capacity before and after, the GPU pods on it, and whether it is old, in
    flight or changed."""

    def __init__(self, before, after, residents, status, targets):
        self.before = before          # node -> {resource: count} offered while unchanged
        self.after = after            # node -> {resource: count} offered once changed (targets only)
        self.residents = residents    # node -> [(pod ref, requests, evictable)]
        self.status = status          # node -> "old" | "in flight" | "changed"
        self.targets = targets        # nodes of the rollout

    def copy(self):
        return Cluster(self.before, self.after, dict((k, list(v)) for k, v in self.residents.items()),
                       dict(self.status), self.targets)

    def capacity(self, name):
        state = self.status[name]
        if state == "in flight":
            return {}
        return self.after[name] if state == "changed" else self.before[name]

    def free(self, name):
        free = dict(self.capacity(name))
        for _ref, requests, _evictable in self.residents[name]:
            for resource, count in requests.items():
                free[resource] = free.get(resource, 0) - count
        return free

    def _rank(self, name):
        """Changed nodes first (a pod there stays), then nodes outside the rollout, then targets still to drain."""
        if self.status[name] == "changed":
            return (0, name)
        return (1 if name not in self.targets else 2, name)

    def start(self, name):
        """Drain ``name`` in the model: its evictable pods move to the first node with room. Returns the pods
        that found none, as [{"pod", "asks"}] (empty when all fit)."""
        self.status[name] = "in flight"
        movers = [r for r in self.residents[name] if r[2]]
        self.residents[name] = [r for r in self.residents[name] if not r[2]]
        movers.sort(key=lambda r: (-sum(r[1].values()), r[0]))
        places = sorted(self.status, key=self._rank)
        stranded = []
        for ref, requests, _evictable in movers:
            for place in places:
                if place == name or self.status[place] == "in flight":
                    continue
                free = self.free(place)
                if all(free.get(resource, 0) >= count for resource, count in requests.items()):
                    self.residents[place].append((ref, requests, True))
                    break
            else:
                stranded.append({"pod": ref, "asks": dict(requests)})
        return stranded

    def finish(self, name):
        self.status[name] = "changed"


def model(plans, nodes, pods, to_change):
    """The Cluster before the rollout: ``plans`` as mig_rollout plans them (expected_resources, pods_to_evict,
    admin_cordoned), ``nodes``/``pods`` every Node and Pod, ``to_change`` the nodes the rollout changes."""
    planned = dict((p["node"], p) for p in plans if not p.get("errors"))
    targets = frozenset(to_change)
    before, after, residents, status = {}, {}, {}, {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        before[name] = {} if unschedulable(node) else node_gpu_allocatable(node, keep_zero=False)
        entry = planned.get(name) or {}
        after[name] = {} if entry.get("admin_cordoned") else shares_expected(entry.get("expected_resources"), node)
        residents[name] = []
        status[name] = "old"
    for pod in pods:
        spec = pod.get("spec") or {}
        where = spec.get("nodeName")
        if where not in residents or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # pending, or on a node that is gone: no room taken; finished: none held
        requests = pod_gpu_requests(pod)
        if not requests:
            continue
        ref = pod_ref(pod)
        evictable = where in targets and ref in set((planned.get(where) or {}).get("pods_to_evict") or [])
        residents[where].append((ref, requests, evictable))
    return Cluster(before, after, residents, status, targets)


def replay(cluster, order, window, canary=True, hold=False):
    """Run ``order`` on a copy of ``cluster``. Returns None when every evicted pod finds room at every step,
    else {"node": the node whose start strands pods, "pods": [{"pod", "asks"}]}."""
    cluster = cluster.copy()
    schedule = finish_before(len(order), window, canary, hold)
    for i, name in enumerate(order):
        for done in schedule[i]:
            cluster.finish(order[done])
        stranded = cluster.start(name)
        if stranded:
            return {"node": name, "pods": stranded}
    return None


def choose_order(plans, nodes, pods, to_change, window, canary=True, hold=False, budget=DEFAULT_BUDGET):
    """The order to roll ``to_change`` out in. The given order when it strands nothing; else the first order the
    bounded search finds that strands nothing; else the given order (and the shortage stays for the checks).

    Returns {"order", "given" (``to_change``), "changed" (another order was chosen), "feasible" (the order strands nothing in the model),
    "given_strands" (replay() of the given order), "starts" (node starts simulated), "exhausted" (the search
    stopped at ``budget`` before trying every order)}."""
    to_change = list(to_change)
    cluster = model(plans, nodes, pods, to_change)
    for name in to_change:
        if name not in cluster.status:  # a target the node list does not have: nothing to model
            cluster.before[name], cluster.after[name], cluster.residents[name] = {}, {}, []
            cluster.status[name] = "old"
    given = replay(cluster, to_change, window, canary, hold)
    result = {"order": to_change, "given": to_change, "changed": False, "feasible": given is None, "given_strands": given,
              "starts": len(to_change), "exhausted": False}
    if given is None or len(to_change) < 2:
        return result
    schedule = finish_before(len(to_change), window, canary, hold)
    spent = [0]

    def search(state, order, left):
        if not left:
            return order
        for name in left:
            if spent[0] >= budget:
                return None
            spent[0] += 1
            nxt = state.copy()
            for done in schedule[len(order)]:
                nxt.finish(order[done])
            if nxt.start(name):
                continue
            found = search(nxt, order + [name], [n for n in left if n != name])
            if found:
                return found
        return None

    found = search(cluster, [], to_change)
    result["starts"] += spent[0]
    result["exhausted"] = found is None and spent[0] >= budget
    if found:
        result.update(order=found, changed=found != to_change, feasible=True)
    return result


def strand_text(strand):
    """'at <node>'s turn ns/p (1 nvidia.com/mig-1g.10gb), ... would find no room'."""
    pods = ", ".join("%s (%s)" % (p["pod"], " ".join("%d %s" % (c, r) for r, c in sorted(p["asks"].items())))
                     for p in strand["pods"])
    return "when %s starts, %s would find no room" % (strand["node"], pods)


def order_note(choice, canary=True):
    """One line for the plan: why the order was changed, or why no order keeps every pod placed; None when the
    given order strands nothing."""
    if choice["given_strands"] is None:
        return None
    given = "in the given order (%s) %s" % (", ".join(choice["given"]), strand_text(choice["given_strands"]))
    if choice["changed"]:
        return "order changed to avoid stranding: %s%s; %s" % (
            ", ".join(choice["order"]), " (canary %s)" % choice["order"][0] if canary else "", given)
    return "no node order keeps every evicted pod placed at every step (%s, %d node starts simulated): %s" % (
        "search stopped at its bound" if choice["exhausted"] else "every order tried", choice["starts"], given)
