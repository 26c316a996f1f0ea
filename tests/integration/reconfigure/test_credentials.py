"""Credentials never reach the output: a kubeconfig given as content (token inside) to the modules."""

import yaml


def test_kubeconfig_content_never_reaches_the_output(testbed, testbed_node, automation_kubeconfig, runner):
    content = yaml.safe_load(open(str(automation_kubeconfig)).read())
    token = content["users"][0]["user"]["token"]
    assert len(token) > 20
    node = testbed_node("creds").metadata.name
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "plan with the kubeconfig as content", "register": "planned",
         "gpufleet.gpu_operator.mig_rollout": {"phase": "plan", "nodes": [node], "config": "all-1g.10gb",
                                               "kubeconfig": content}},
        {"name": "a failing call with it", "ignore_errors": True,
         "gpufleet.gpu_operator.gpu_drain": {"name": node + "-missing", "kubeconfig": content}},
        {"name": "the lock with it", "gpufleet.gpu_operator.mig_rollout_lock": {
            "holder": "creds-test", "name": "creds-test", "state": "absent", "kubeconfig": content}}]}]
    path = runner.workdir / "creds.yml"
    path.write_text(yaml.safe_dump(play))
    result = runner.playbook(path, [])
    # The calls really used that kubeconfig (the environment's K8S_AUTH_KUBECONFIG is the same identity, so
    # the plan naming the node and the drain naming the missing node show the calls got through).
    planned = result.task("plan with the kubeconfig as content")
    assert not planned.get("failed"), result.explain()
    assert [p["node"] for p in planned["plan"]] == [node]
    failing = result.task("a failing call with it")
    assert failing.get("failed") and node + "-missing" in failing["msg"]
    for text in (result.stdout, result.stderr):
        assert token not in text
