# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Follow an async mig_rollout: print each node's step as it changes, return the rollout's result at the end.

Why an action and not an ``until`` loop over async_status: a retried task prints only "FAILED - RETRYING", never
what changed, and one task per poll would print a task banner every few seconds. Lines displayed by an action
go from Ansible's worker process to the terminal at once (ansible-core's display queue), and AWX records them
in the job's output as they arrive.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.reconfigure.progress import progress_lines

display = Display()

ASYNC_KEYS = ("ansible_job_id", "started", "finished", "results_file", "erased")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _valid, args = self.validate_argument_spec(argument_spec=dict(
            jid=dict(type="str", required=True),
            path=dict(type="str", required=True),
            interval=dict(type="float", default=2.0),
            prefix=dict(type="str", default="MIG rollout"),
        ))
        if args["interval"] <= 0:
            raise AnsibleActionFail("interval must be a positive number of seconds, got %s" % args["interval"])
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        record = None
        printed = 0
        while True:
            status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                          module_args={"jid": args["jid"], "_async_dir": async_dir})
            latest = self.read_record(args["path"], task_vars)
            if latest is not None:
                for line in progress_lines(record, latest):
                    display.display("%s: %s" % (args["prefix"], line))
                    printed += 1
                record = latest
            if status.get("finished") or "finished" not in status:  # done, or the job cannot be found
                break
            time.sleep(args["interval"])
        if status.get("finished"):
            self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                 module_args={"jid": args["jid"], "mode": "cleanup", "_async_dir": async_dir})
        result.update(dict((k, v) for k, v in status.items() if k not in ASYNC_KEYS))
        result["progress"] = dict(record or {}, lines_printed=printed)
        return result

    def read_record(self, path, task_vars):
        """The progress record as the module last replaced it, or None while it does not exist yet."""
        if getattr(self._connection, "transport", None) == "local":  # the role's case: no module run per poll
            try:
                with open(path) as handle:
                    return json.load(handle)
            except (OSError, ValueError):
                return None
        slurped = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path},
                                       task_vars=task_vars)
        if slurped.get("failed") or "content" not in slurped:
            return None
        try:
            return json.loads(base64.b64decode(slurped["content"]).decode("utf-8"))
        except ValueError:
            return None
