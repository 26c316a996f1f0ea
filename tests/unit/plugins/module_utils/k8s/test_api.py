"""KubeOps turns the typed client's keyword arguments (as kubernetes.watch.Watch passes them) into API query names."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.api import query_params


def test_watch_arguments_become_api_query_names():
    given = {"watch": True, "resource_version": "42", "timeout_seconds": 30, "allow_watch_bookmarks": True,
             "field_selector": "metadata.name=n1"}
    assert query_params(given) == [("watch", "true"), ("resourceVersion", "42"), ("timeoutSeconds", 30),
                                   ("allowWatchBookmarks", "true"), ("fieldSelector", "metadata.name=n1")]


def test_unset_values_are_left_out_and_false_is_spelled_for_the_api():
    assert query_params({"label_selector": None, "tail_lines": 100, "grace_period_seconds": 0, "watch": False}) == [
        ("tailLines", 100), ("gracePeriodSeconds", 0), ("watch", "false")]


def test_unknown_names_pass_through():
    assert query_params({"limit": 5}) == [("limit", 5)]
