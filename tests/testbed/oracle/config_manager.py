"""NVIDIA's config-manager (k8s-device-plugin v0.20.0 ``cmd/config-manager``) choosing a node's device-plugin config.

In the device-plugin DaemonSet the GPU Operator renders, config-manager watches its node's
``nvidia.com/device-plugin.config`` label and points ``CONFIG_FILE_DST`` (a symlink) at the chosen file of the
ConfigMap mounted at ``CONFIG_FILE_SRCDIR``, or at /dev/null for an empty config (no sharing); it exits on an error.
``choose`` runs that binary as the sidecar does (``ONESHOT=false``, no signal) against a real API server and a real
Node, and reads its answer from the symlink it made. The sidecar is used rather than the one-shot init container:
with ``ONESHOT=true`` the program reads the label before its informer has listed the node, so a one-shot run can
act on an unset label whatever the node carries.

Never imports product code (plugins/**).
"""

import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.testbed import oracle

NODE_LABEL = "nvidia.com/device-plugin.config"
DONE = ("Successfully updated to", "Already configured")


def _decided(log, label_value):
    """Whether the sidecar has acted on ``label_value``: its "Label change detected" line for that value is
    followed by an outcome line."""
    marker = "Label change detected: %s=%s\n" % (NODE_LABEL, label_value or "")
    at = log.rfind(marker)
    return at >= 0 and any(done in log[at:] for done in DONE)


def choose(kubeconfig, node_name, configs, label_value, default="", fallback="empty", timeout=30):
    """(key or None, error or None): the config NVIDIA's config-manager gives node ``node_name`` (which must exist
    and carry ``label_value`` in NODE_LABEL, or not carry it when None) from ``configs`` ({key: text}), under
    DEFAULT_CONFIG=``default`` and FALLBACK_STRATEGIES=``fallback``. None with no error is the empty config."""
    with tempfile.TemporaryDirectory(prefix="config-manager-") as tmp:
        srcdir = Path(tmp) / "available-configs"
        srcdir.mkdir()
        for key, text in configs.items():
            (srcdir / key).write_text(text)
        dst = Path(tmp) / "config.yaml"
        log_path = Path(tmp) / "log"
        env = dict(os.environ, ONESHOT="false", KUBECONFIG=str(kubeconfig), NODE_NAME=node_name,
                   NODE_LABEL=NODE_LABEL, CONFIG_FILE_SRCDIR=str(srcdir), CONFIG_FILE_DST=str(dst),
                   DEFAULT_CONFIG=default or "", FALLBACK_STRATEGIES=fallback, SEND_SIGNAL="false")
        with open(log_path, "w") as log:
            proc = subprocess.Popen([oracle.binary("config-manager")], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                exited = proc.poll() is not None
                text = log_path.read_text()
                if exited or _decided(text, label_value):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("config-manager made no choice for label %r within %ds:\n%s"
                                       % (label_value, timeout, text))
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
        if exited:
            errors = [line.split("] ", 1)[-1] for line in text.splitlines() if line.startswith("E")]
            return None, (errors[-1] if errors else "config-manager exited %d:\n%s" % (proc.returncode, text))
        target = os.readlink(dst)
        return (None if target == os.devnull else Path(target).name), None
