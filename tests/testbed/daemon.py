"""Run a testbed process in the background through a pidfile: start, stop, status.

Shared by the CLIs of the simulated GPU Operator agents (``python -m tests.testbed.agents``) and of the
smoke runtime (``python -m tests.testbed.sandbox.smoke_runtime``). ``start`` runs the process detached, in
its own session, with its output appended to the log file next to the pidfile (``<pidfile stem>.log``);
``stop`` sends SIGTERM and, after a grace period, SIGKILL.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def read_pid(pidfile):
    try:
        return int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None


def reexec_with_library_dir(lib_dir, module):
    """Re-exec ``python -m <module>`` with ``lib_dir`` first on LD_LIBRARY_PATH, unless it is there already.

    The dynamic loader reads LD_LIBRARY_PATH only at process start, so the simulated libnvidia-ml.so.1
    cannot be put on it later. Does nothing without ``lib_dir``.
    """
    if not lib_dir:
        return
    lib_dir = str(Path(lib_dir).resolve())
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if lib_dir in paths:
        return
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([lib_dir] + paths))
    os.execve(sys.executable, [sys.executable, "-m", module] + sys.argv[1:], env)


def start(what, argv, pidfile):
    """Start ``argv`` in the background unless the pidfile names a live process; 1 if it exits at once."""
    pidfile = Path(pidfile)
    pid = read_pid(pidfile)
    if pid and alive(pid):
        print("%s already running (pid %d)" % (what, pid))
        return 0
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    log_path = pidfile.with_suffix(".log")
    log = open(log_path, "ab")  # pylint: disable=consider-using-with  # child keeps it
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    pidfile.write_text("%d\n" % proc.pid)
    time.sleep(1.0)
    if proc.poll() is not None:
        print("%s exited at once (rc %s); see %s" % (what, proc.returncode, log_path))
        return 1
    print("%s started (pid %d, log %s)" % (what, proc.pid, log_path))
    return 0


def stop(what, pidfile, grace_seconds):
    """SIGTERM the process the pidfile names, SIGKILL it after ``grace_seconds``; removes the pidfile."""
    pidfile = Path(pidfile)
    pid = read_pid(pidfile)
    if not pid or not alive(pid):
        print("%s not running" % what)
        pidfile.unlink(missing_ok=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    print("%s stopped (pid %d)" % (what, pid))
    return 0


def status(what, pidfile):
    """0 when the process the pidfile names runs, else 3 (as ``service ... status``)."""
    pid = read_pid(pidfile)
    running = bool(pid and alive(pid))
    print("%s %s" % (what, "running (pid %d)" % pid if running else "not running"))
    return 0 if running else 3
