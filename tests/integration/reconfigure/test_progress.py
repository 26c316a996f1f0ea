"""A rollout shows each node's step while it runs - in the terminal, as the lines arrive - and leaves Kubernetes
Events on each node (kubectl describe node). mig-reconfigure.yml under the least-privilege ServiceAccount, with
Ansible's default (text) output as a person sees it."""

import datetime
import errno
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.integration.reconfigure.conftest import PLAYBOOK, PRIOR_ANNOTATION, REPO_ROOT, PlaybookResult, node_view
from tests.integration.reconfigure.test_rollout import CONFIG, STATE, rollout_vars, rows_of, wait_advertised
from tests.testbed.pytest_cluster import unique_name
from tests.support import playbook

LINE = re.compile(r"MIG rollout: (\d\d:\d\d:\d\d)  (\S+)  (\S+(?: started)?)  \+(\d+)s")


def run_streaming(runner, nodes, extra_vars, timeout=420):
    """ansible-playbook with the default callback; every stdout line with the wall-clock time it arrived."""
    env = dict(runner.env(), ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
               ANSIBLE_FORCE_COLOR="false", ANSIBLE_NOCOLOR="true")
    cmd = playbook.command(PLAYBOOK, inventory=runner.inventory(nodes), extra_vars=extra_vars)
    proc = subprocess.Popen(cmd, env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = []
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))
        proc.wait()
    finally:
        killer.cancel()
    return proc.returncode, lines, time.time()


def events_of(testbed, node):
    out = testbed.kubectl("get", "events", "-n", "default", "--field-selector",
                          "involvedObject.kind=Node,involvedObject.name=%s" % node, "-o", "json").stdout
    # In the order they were written: timestamps have one-second resolution, resourceVersion grows with each write.
    items = sorted(json.loads(out)["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [(e["reason"], e["type"], (e.get("source") or {}).get("component"), e.get("message")) for e in items
            if (e.get("source") or {}).get("component") == "gpufleet"]


def test_progress_lines_arrive_while_the_rollout_runs_and_events_record_it(testbed, gpu_cluster, add_gpu_node, runner):
    canary = add_gpu_node("pg-canary", "H100-80GB-HBM3", 1, faults=["slow"])
    good = add_gpu_node("pg-good", "H100-80GB-HBM3", 1)
    bad = add_gpu_node("pg-bad", "H100-80GB-HBM3", 1, faults=["fail"])
    order = [canary, good, bad]
    for name in order:
        wait_advertised(testbed, name)
    variables = dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb", mig_reconfigure_nodes=order,
                     mig_reconfigure_max_unavailable=2, mig_reconfigure_collect_hardware=False,
                     mig_reconfigure_progress_interval=1)

    rc, lines, ended = run_streaming(runner, order, variables)
    text = "\n".join(line for _t, line in lines)
    (runner.workdir / "playbook-output.txt").write_text(text)
    print("playbook output: %s" % (runner.workdir / "playbook-output.txt"))
    assert rc != 0, "the failing node should halt the rollout\n" + text[-6000:]
    steps = {}
    for arrived, line in lines:
        match = LINE.search(line)
        if match:
            clock, node, step, elapsed = match.groups()
            steps.setdefault(node, []).append((step, arrived, clock, int(elapsed)))
    assert set(steps) == set(order), text[-6000:]

    names = dict((n, [s for s, _a, _c, _e in steps[n]]) for n in order)
    for node in (canary, good):
        seen = names[node]
        assert seen[0] == "draining" and seen[-1] == "done", (node, seen, text[-8000:])
        assert {"labelled", "pending", "applied", "verifying"} <= set(seen), (node, seen)
    assert names[bad][0] == "draining" and names[bad][-1] == "failed" and "pending" in names[bad], names[bad]

    # Each line came out as it happened, while the step's task still ran: the canary's pending line was printed
    # seconds before its done line (the slow fault holds it pending 4 s longer) and before the step's task ended
    # (the next task's banner); the time a line shows is the step's own, at most a poll before it arrived.
    arrived = dict((step, when) for step, when, _c, _e in steps[canary])
    assert arrived["done"] - arrived["pending"] >= 3, steps[canary]
    next_task = [when for when, line in lines if line.startswith("TASK [") and "after the change, step 0" in line]
    assert next_task and next_task[0] - arrived["pending"] >= 3 and next_task[0] >= arrived["done"], (next_task, steps[canary])
    assert ended >= next_task[0]
    for node in order:
        for step, when, clock, elapsed in steps[node]:
            shown = datetime.datetime.combine(datetime.date.fromtimestamp(when),
                                              datetime.datetime.strptime(clock, "%H:%M:%S").time()).timestamp()
            assert -1 <= when - shown <= 15, (node, step, clock, when)
    done_elapsed = [e for s, _a, _c, e in steps[canary] if s == "done"][0]
    assert done_elapsed >= 4, steps[canary]

    # Kubernetes Events on each node, as kubectl describe node shows them.
    for node in (canary, good):
        reasons = [(r, t) for r, t, _src, _m in events_of(testbed, node)]
        assert reasons == [("MigReconfigureDraining", "Normal"), ("MigReconfigureVerified", "Normal")], (node, reasons)
        assert node_view(testbed, node)["labels"][STATE] == "success"
    failed = events_of(testbed, bad)
    assert [(r, t) for r, t, _s, _m in failed] == [("MigReconfigureDraining", "Normal"), ("MigReconfigureFailed", "Warning")]
    assert bad in failed[-1][3] and "MIG Manager reported failed" in failed[-1][3]
    described = testbed.kubectl("describe", "node", good).stdout
    assert "MigReconfigureVerified" in described and "gpufleet" in described, described[-2000:]


@pytest.fixture
def short_dir():
    """An empty directory with a short path, removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="gf-disk-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_on_small_disk(runner, disk, book, nodes, variables=None, fill_first=False):
    """ansible-playbook ``book`` (JSON callback) in a mount namespace of its own where ``disk`` is a 1 MiB tmpfs, also
    its TMPDIR (the role keeps the progress record in a temporary file). ``fill_first``: full before the run starts.
    Returns the process and the tmpfs as this process reaches it (through the child's root in procfs). ``disk``'s path is short:
    ansible's local RPC server puts a Unix socket in TMPDIR (at most 107 bytes of path)."""
    fill = 'dd if=/dev/zero of="$TMPDIR/filler" bs=4k 2>/dev/null; ' if fill_first else ""
    script = 'mount -t tmpfs -o size=1m gpufleet-small-disk "$TMPDIR" && %sexec "$@"' % fill
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    cmd += playbook.command(book, inventory=runner.inventory(nodes), extra_vars=variables)
    proc = subprocess.Popen(cmd, env=dict(runner.env(), TMPDIR=str(disk)), cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, Path(os.sep, "proc", str(proc.pid), "root") / str(disk).lstrip(os.sep)


def fill(disk):
    """Write into the tmpfs until it is full (ENOSPC)."""
    with open(disk / "filler", "ab") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_a_full_disk_for_the_progress_record_never_fails_a_node(testbed, gpu_cluster, add_gpu_node, runner, short_dir):
    node = add_gpu_node("pg-disk", "H100-80GB-HBM3", 1, faults=["slow"])
    wait_advertised(testbed, node)
    variables = dict(profile="all-1g.10gb", mig_reconfigure_nodes=[node], mig_reconfigure_lock_name=unique_name("lock"))
    proc, disk = run_on_small_disk(runner, short_dir, PLAYBOOK, [node], variables)
    try:
        # MIG Manager holds the node pending (the slow fault); the record has been written by then.
        testbed.wait_for(lambda: node_view(testbed, node)["labels"].get(STATE) == "pending", 120, "pending")
        testbed.wait_for(lambda: any(disk.glob("mig-rollout-progress-*.json")), 30, "the progress record")
        record = next(disk.glob("mig-rollout-progress-*.json")).name
        fill(disk)
    except AssertionError as exc:
        proc.kill()
        out, err = proc.communicate(timeout=60)
        raise AssertionError("%s\n%s" % (exc, PlaybookResult(proc.returncode, out, err).explain())) from None
    out, err = proc.communicate(timeout=420)
    result = PlaybookResult(proc.returncode, out, err)
    assert result.rc == 0, result.explain()
    row = rows_of(result)[node]
    assert row["result"] == "reconfigured", row
    view = node_view(testbed, node)
    assert view["labels"][STATE] == "success" and view["labels"][CONFIG] == "all-1g.10gb", view["labels"]
    assert view["unschedulable"] is False and PRIOR_ANNOTATION not in view["annotations"], view
    errors = [h["progress_error"] for task in result.tasks() for h in (task.get("hosts") or {}).values()
              if h.get("progress_error")]
    assert len(errors) == 1, result.explain()
    assert record in errors[0] and "write(s) failed, the last with: No space left on device" in errors[0], errors


def test_a_full_disk_at_the_start_is_refused_before_any_change(testbed, gpu_cluster, add_gpu_node, runner, short_dir):
    """The first write of the record fails: nothing is changed. (The role's temporary record never meets this:
    Python's tempfile passes over a TMPDIR it cannot write a byte to, so the module is called with the file.)"""
    node = add_gpu_node("pg-full", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    before = node_view(testbed, node)
    record = short_dir / "rollout.json"
    book = runner.workdir / "rollout-on-full-disk.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "roll", "gpufleet.gpu_operator.mig_rollout": {
            "phase": "apply", "nodes": [node], "config": "all-1g.10gb", "progress_file": str(record)}}]}]))
    proc, _disk = run_on_small_disk(runner, short_dir, book, [], fill_first=True)
    out, err = proc.communicate(timeout=420)
    result = PlaybookResult(proc.returncode, out, err)
    assert result.rc != 0, result.explain()
    task = result.task("roll")
    assert task["failed"] and not task["changed"], task
    assert task["msg"] == ("progress_file %s: the progress record cannot be written (No space left on device); "
                           "no node was changed" % record), task
    assert "Traceback" not in out + err
    assert node_view(testbed, node) == before
