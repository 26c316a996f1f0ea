"""gpu_preflight's directory check, which needs no cluster: a bad directory fails before any API call (the API
checks themselves are covered by tests/integration/modules/test_preflight_play.py and test_unreachable_api_server.py)."""

from .module_runner import run_module


def test_a_directory_that_is_a_file_fails_before_the_api_server_is_contacted(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    # No kubeconfig that works: had the module built a client, the failure would be the connection's.
    result = run_module(tmp_path, "gpu_preflight", kubeconfig=str(tmp_path / "missing-kubeconfig"),
                        directories=[{"path": str(blocker / "reports"), "name": "gpu_report_dir"}],
                        executables=["surely-not-on-path-gpufleet"])
    assert result["failed"] and result["changed"] is False
    assert result["msg"] == (
        "pre-flight: gpu_report_dir %s cannot be created: %s is a file; executables not found on PATH: "
        "surely-not-on-path-gpufleet; the API server was not contacted" % (blocker / "reports", blocker))
    assert result["directories"] == [{"name": "gpu_report_dir", "path": str(blocker / "reports"), "exists": False,
                                      "problem": "gpu_report_dir %s cannot be created: %s is a file"
                                                 % (blocker / "reports", blocker)}]
    assert "server" not in result


def test_directories_alone_without_the_api(tmp_path):
    result = run_module(tmp_path, "gpu_preflight", api=False,
                        directories=[{"path": str(tmp_path)}, {"path": str(tmp_path / "new")}])
    assert not result.get("failed"), result
    assert [(d["exists"], d["problem"]) for d in result["directories"]] == [(True, None), (False, None)]
    assert not (tmp_path / "new").exists()
    assert result["msg"] == "pre-flight: ok"
