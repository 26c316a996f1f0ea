# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""mig_rollout's controller side: while the module rolls nodes, print each node's step as it changes.

One module call runs a whole window of nodes for many minutes. When the module runs on the controller (the
mig_reconfigure role delegates it to localhost), this action starts it in a thread of the worker process and
meanwhile reads the progress record the module keeps (its ``progress_file``), printing one line per change.
Why not ``async`` + an async_status loop: an async job is detached from the playbook (a cancelled AWX job or a
killed ansible-playbook would leave it rolling nodes), and a retried task prints only "FAILED - RETRYING", never
what changed. Lines displayed by an action go from the worker to the terminal at once (ansible-core's display
queue), and AWX records them in the job's output as they arrive.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile
import threading

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.progress import progress_lines

display = Display()

PREFIX = "MIG rollout"


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        wrap_async = self._task.async_val and not self._connection.has_native_async
        args = dict(self._task.args)
        try:
            interval = float(args.get("progress_interval", 2.0))
        except (TypeError, ValueError):
            interval = 0.0  # the module reports the bad value
        follow = (args.get("phase", "apply") in ("apply", "release") and not self._play_context.check_mode
                  and not wrap_async and interval > 0 and getattr(self._connection, "transport", None) == "local")
        if follow:
            result = merge_hash(result, self.run_following(args, interval, task_vars))
        else:
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def run_following(self, args, interval, task_vars):
        made = None
        if not args.get("progress_file"):
            handle, made = tempfile.mkstemp(prefix="mig-rollout-progress-", suffix=".json")
            os.close(handle)
            args["progress_file"] = made
        outcome = {}

        def run_module():
            try:
                outcome["result"] = self._execute_module(module_args=args, task_vars=task_vars)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the task's own thread below
                outcome["error"] = exc

        worker = threading.Thread(target=run_module, name="mig_rollout")
        worker.daemon = True
        worker.start()
        record = None
        try:
            while True:
                worker.join(interval)
                record = self.show_changes(args["progress_file"], record)
                if not worker.is_alive():
                    break
        finally:
            if made:
                try:
                    os.unlink(made)
                except OSError:
                    pass
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    @staticmethod
    def show_changes(path, record):
        """Print what changed since ``record``; returns the record read (the old one while there is none yet)."""
        try:
            with open(path) as handle:
                latest = json.load(handle)
        except (OSError, ValueError):  # not written yet (the empty file made above), or none at all
            return record
        for line in progress_lines(record, latest):
            display.display("%s: %s" % (PREFIX, line))
        return latest
