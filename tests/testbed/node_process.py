"""A process the testbed runs for one simulated node (NVIDIA's MIG Manager, NVIDIA's device plugin, their helpers):
started in a session of its own, with stdout and stderr appended to a log file, and stopped with its whole process
group, so the mount-namespace wrappers (`unshare`, `/bin/sh`) and what they exec go together."""

import datetime
import os
import signal
import subprocess
import threading


def spawn(command, log_path, env=None, cwd=None, cri_path=None):
    """Start `command` as a process-group leader, its output appended to `log_path`. With `cri_path`, each line also
    goes there in the CRI log format a container runtime writes (`<RFC 3339 time> stdout F <line>`), which kwok serves
    to `kubectl logs` for the pod the process plays."""
    if cri_path is None:
        with open(log_path, "ab") as log:
            return subprocess.Popen(command, env=env, cwd=cwd, stdout=log,  # pylint: disable=consider-using-with
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,  # pylint: disable=consider-using-with
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    threading.Thread(target=_copy_output, args=(proc.stdout, log_path, cri_path), daemon=True,
                     name="output-%d" % proc.pid).start()
    return proc


def _copy_output(stream, log_path, cri_path):
    with stream, open(log_path, "ab") as log, open(cri_path, "ab") as cri:
        for line in iter(stream.readline, b""):
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
            log.write(line)
            cri.write(b"%s stdout F %s\n" % (now, line.rstrip(b"\n")))
            log.flush()
            cri.flush()


def stop_group(proc, grace):
    """SIGTERM to `proc`'s process group, SIGKILL after `grace` seconds; nothing if it has already exited."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGCONT)  # a stopped (paused) group handles SIGTERM only once it runs again
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _resume(pgid):
    try:
        os.killpg(pgid, signal.SIGCONT)
    except ProcessLookupError:
        pass


class NodeProcess:
    """The main process of a node's program (`proc`) and its log (`log_path`)."""

    proc = None
    log_path = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self, seconds):
        """The process group gets no CPU for `seconds` (SIGSTOP, then SIGCONT), as on a starved node or in a frozen
        cgroup; it then goes on where it was."""
        if not self.running():
            return
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        timer = threading.Timer(seconds, _resume, args=(pgid,))
        timer.daemon = True
        timer.start()

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
