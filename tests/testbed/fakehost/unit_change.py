"""What a host's kubelet.service going down or up does to its Node, for the fake systemd's ``--on-change`` hook.

  python tests/testbed/fakehost/unit_change.py <request-dir> <unit> <active|inactive>

What the real one is: when NVIDIA's MIG Manager stops kubelet.service for a MIG mode change (WITH_SHUTDOWN_HOST_GPU_CLIENTS),
the node stops posting status and the control plane marks it NotReady; when it starts kubelet.service again, the node
posts Ready. Here the agents play kubelet's status (tests/testbed/agents/nvidia_mig.py ``kubelet_requests``): this hook
leaves ``<request-dir>/kubelet-<state>`` for them and waits (up to WAIT_SECONDS) until they have taken it, so the
node's condition has changed before systemd's job returns, as a stopped kubelet is down before the stop job is done.
Other units change nothing outside the unit table.
"""

import os
import sys
import time
from pathlib import Path

KUBELET_UNIT = "kubelet.service"
WAIT_SECONDS = 30.0


def request_path(request_dir, state):
    return Path(request_dir) / ("kubelet-%s" % state)


def main(argv):
    if len(argv) != 3 or argv[2] not in ("active", "inactive"):
        sys.stderr.write("usage: unit_change <request-dir> <unit> <active|inactive>\n")
        return 2
    request_dir, unit, state = argv
    if unit != KUBELET_UNIT:
        return 0
    path = request_path(request_dir, state)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state + "\n")
    os.replace(tmp, path)
    deadline = time.monotonic() + WAIT_SECONDS
    while path.exists():
        if time.monotonic() > deadline:
            sys.stderr.write("unit_change: nobody took %s in %ss (are the agents running?)\n" % (path, WAIT_SECONDS))
            return 1
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
