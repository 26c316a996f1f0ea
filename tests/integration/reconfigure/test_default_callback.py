"""What a user sees from a shell, with Ansible's default stdout callback (the other tests read the json callback): the
plan and the fleet summary of mig-reconfigure.yml print as tables, one row per printed line, each column starting
where its header does, with this repository's callback_result_format (yaml) and with Ansible's (json)."""

import textwrap

import yaml

from tests.integration.reconfigure.conftest import PLAYBOOK
from tests.integration.reconfigure.test_rollout import rollout_vars, wait_advertised
from tests.integration.reconfigure.test_strand import assert_aligned_table
from tests.support import playbook as ansible_playbook
from tests.testbed.pytest_cluster import unique_name

PLAN_COLUMNS = ["node", "model", "current", "target", "evict", "budgets", "reset/reboot", "status"]
SUMMARY_COLUMNS = ["node", "model", "before", "after", "evicted", "back", "duration", "result"]


def printed_msg(stdout, task):
    """``task``'s ``msg`` as the default callback printed it: the result after ``=>``, YAML (this repository's
    ansible.cfg: callback_result_format = yaml) or JSON (Ansible's default), each a list of lines."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TASK [") and task in line)
    result = next(i for i in range(start + 1, len(lines)) if "=> " in lines[i] or lines[i].endswith("=>"))
    block = [lines[result].split("=>", 1)[1]]
    for line in lines[result + 1:]:
        if not line.strip() or line.startswith(("TASK [", "PLAY ")):
            break
        block.append(line)
    return yaml.safe_load(block[0] + "\n" + textwrap.dedent("\n".join(block[1:])))["msg"]


def run_default_callback(runner, node, extra, check, result_format):
    env = dict(runner.env(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT=result_format)
    proc = ansible_playbook.run(PLAYBOOK, inventory=runner.inventory([node], name="default-callback.yml"),
                                extra_vars=extra, check=check, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_plan_and_the_summary_print_as_tables_under_the_default_callback(
        testbed, gpu_cluster, add_gpu_node, runner):
    node = add_gpu_node("rc-callback", "H100-80GB-HBM3", 1)
    wait_advertised(testbed, node)
    extra = dict(rollout_vars(unique_name("lock")), profile="all-1g.10gb")
    plan = printed_msg(run_default_callback(runner, node, extra, True, "yaml"), "Show the plan")
    assert_aligned_table(plan, PLAN_COLUMNS, [node])
    stdout = run_default_callback(runner, node, dict(extra, mig_reconfigure_lock_name=unique_name("lock")), False, "json")
    summary = printed_msg(stdout, "Show the fleet summary")
    assert_aligned_table(summary, SUMMARY_COLUMNS, [node])
    assert summary[1].split()[-1] == "reconfigured", summary
