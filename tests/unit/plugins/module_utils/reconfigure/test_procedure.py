"""A node's procedure never raises: an error no step expects becomes the node's failed row, naming the node, the
stage and the error, with the diagnostics when they can be read and without them when they cannot."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure import procedure

PLANNED = {"node": "n1", "errors": [], "model": "NVIDIA H100 80GB HBM3", "current_config": "all-disabled",
           "pods_to_evict": []}


class NoMigManagerPod(object):
    """The API as far as the step before the drain reads it: no MIG Manager pod on the node (nothing to wait for)."""

    @staticmethod
    def list_pods_on_node(node, label_selector=None):
        return {"items": []}


class Ctx(object):
    options = {"drain_timeout": 60, "log_lines": 10}
    namespace = "gpu-operator"
    daemonsets = None  # each check reads the DaemonSet

    def __init__(self, drain_error):
        self.drain_error = drain_error
        self.reported = []

    def report(self, node, state, message):
        self.reported.append((node, state))

    def drainer(self, ops, node_name):
        raise self.drain_error


def test_an_unexpected_error_during_the_drain_is_the_nodes_failed_row(monkeypatch):
    monkeypatch.setattr(procedure.node_step, "collect_diagnostics",
                        lambda ops, node, namespace, lines: {"unschedulable": True, "config": "all-disabled"})
    row = procedure.run_node(Ctx(ValueError("Expecting value: line 1 column 1 (char 0)")), "n1", "all-1g.10gb",
                             dict(PLANNED), ops=NoMigManagerPod())
    assert row["result"] == "failed" and row["stage"] == "drain", row
    assert row["message"].startswith("node n1: unexpected error during drain: ValueError: Expecting value"), row
    assert row["left_cordoned"] is True and row["after"] == "all-disabled"


def test_the_row_is_kept_when_the_diagnostics_fail_too(monkeypatch):
    def broken(ops, node, namespace, lines):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(procedure.node_step, "collect_diagnostics", broken)
    row = procedure.run_node(Ctx(KeyError("metadata")), "n1", "all-1g.10gb", dict(PLANNED), ops=NoMigManagerPod())
    assert row["result"] == "failed" and "KeyError: 'metadata'" in row["message"], row
    assert "diagnostics not read: OSError: [Errno 28] No space left on device" in row["message"], row


def test_an_error_text_is_one_line_and_bounded():
    text = procedure.unexpected_text(ValueError("a\nb " + "x" * 2000))
    assert "\n" not in text and len(text) == 500 and text.startswith("ValueError: a b x")


class Drainer(object):
    """Evicts one pod, then the API server goes away."""

    def __init__(self):
        self.evicted = [{"namespace": "team", "name": "trainer-0", "uid": "u0"}]
        self.pods = None

    def evictions(self, evicted):
        return [{"node": "n1", "pod": "%s/%s" % (p["namespace"], p["name"])} for p in evicted]


def test_evictions_made_before_the_api_server_went_away_stay_in_the_row(monkeypatch):
    class Gone(Ctx):
        def drainer(self, ops, node_name):
            return Drainer()

    def drain_node(drainer, timeout, plan=None):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(procedure, "drain_node", drain_node)
    monkeypatch.setattr(procedure.node_step, "collect_diagnostics",
                        lambda ops, node, namespace, lines: {"unschedulable": True, "config": "all-disabled"})
    row = procedure.run_node(Gone(None), "n1", "all-1g.10gb", dict(PLANNED), ops=NoMigManagerPod())
    assert row["result"] == "failed" and "unreachable during drain" in row["message"], row
    assert row["evicted"] == ["team/trainer-0"] and row["_evictions"] == [{"node": "n1", "pod": "team/trainer-0"}]
