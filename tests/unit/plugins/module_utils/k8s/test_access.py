"""The pure parts of the pre-flight checks: rules from the access option, their names, the review's body, the
connection's names, package requirements and the one-line summary."""

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s import access


def test_rules_are_one_per_verb_in_order_without_repeats():
    rules = access.rules_of([
        {"verbs": ["get", "patch"], "resource": "nodes"},
        {"verbs": ["create"], "resource": "pods/eviction", "namespace": "ml"},
        {"verbs": ["get"], "resource": "nodes"},
        {"verbs": ["update"], "resource": "leases", "group": "coordination.k8s.io", "namespace": "gpu-operator",
         "name": "gpufleet-mig-rollout"},
    ])
    assert [access.rule_name(rule) for rule in rules] == [
        "get nodes", "patch nodes", "create pods/eviction in namespace ml",
        "update leases.coordination.k8s.io gpufleet-mig-rollout in namespace gpu-operator"]


def test_the_review_asks_for_exactly_the_rule():
    rule = access.rules_of([{"verbs": ["create"], "resource": "pods/eviction", "namespace": "ml"}])[0]
    assert access.review_body(rule) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "subresource": "eviction",
                                        "group": "", "namespace": "ml"}}}
    cluster_wide = access.rules_of([{"verbs": ["list"], "resource": "nodes"}])[0]
    assert access.review_body(cluster_wide)["spec"]["resourceAttributes"] == {
        "verb": "list", "resource": "nodes", "group": ""}


def test_the_connection_is_named_a_path_as_given_and_a_mapping_never_shown(tmp_path):
    path = tmp_path / "kubeconfig"
    assert access.connection_names({"kubeconfig": str(path), "context": "prod"}) == {
        "kubeconfig": str(path), "context": "prod"}
    assert access.connection_names({"kubeconfig": {"users": [{"user": {"token": "t"}}]}}) == {
        "kubeconfig": "(mapping)", "context": None}
    assert access.connection_names({"host": "https://10.0.0.1:6443"}) == {"kubeconfig": None, "context": None}
    path.write_text("")
    assert access.connection_names({}, environ={"KUBECONFIG": str(path)})["kubeconfig"] == str(path)
    assert access.describe_connection({"kubeconfig": str(path), "context": "prod"}, "10.0.0.1:6443", "alice") == (
        "kubeconfig %s, context prod, API server 10.0.0.1:6443, user alice" % path)


def test_the_context_used_is_the_one_asked_for_else_the_kubeconfigs_current_one(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: lab, context: {cluster: c, user: u}}, {name: prod, context: {cluster: c, user: u}}]\n")
    assert access.connection_used({"kubeconfig": str(path)}) == {"kubeconfig": str(path), "context": "lab"}
    assert access.connection_used({"kubeconfig": str(path), "context": "prod"})["context"] == "prod"
    mapping = {"current-context": "lab", "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}],
               "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
               "users": [{"name": "u", "user": {"token": "t"}}]}
    assert access.connection_used({"kubeconfig": mapping}) == {"kubeconfig": "(mapping)", "context": "lab"}
    # A kubeconfig that cannot be read names no context (the client reports the error itself).
    assert access.connection_used({"kubeconfig": str(tmp_path / "missing")})["context"] is None
    assert access.connection_used({"host": "https://10.0.0.1:6443"}) == {"kubeconfig": None, "context": None}


def test_package_requirements_name_what_is_missing_or_too_old():
    versions = {"kubernetes": "29.0.0", "packaging": "24.1"}.get
    assert access.missing_packages(["kubernetes>=30.0.0", "packaging", "nvidia-ml-py", "not a requirement!"],
                                   version_of=versions) == [
        "kubernetes>=30.0.0 (29.0.0 installed)", "nvidia-ml-py (not installed)",
        "not a requirement! (not a package requirement)"]
    assert access.missing_packages(["kubernetes>=29"], version_of=versions) == []


def test_missing_executables_and_the_summary():
    on_path = {"helm": "/usr/bin/helm"}.get
    missing = access.missing_executables(["helm", "kubectl"], which=on_path)
    assert missing == ["kubectl"]
    assert access.summary(missing, ["kubernetes (not installed)"], ["create namespaces", "delete nodes"]) == (
        "executables not found on PATH: kubectl; Python packages missing: kubernetes (not installed); "
        "not allowed: create namespaces; delete nodes")
    assert access.summary([], [], []) == ""


# -- the directories a playbook will write ------------------------------------------------------------------------

def test_a_directory_is_fine_when_it_is_writable_or_can_be_created(tmp_path):
    assert access.directory_state(str(tmp_path)) == (True, None)
    assert access.directory_state(str(tmp_path / "new" / "deeper")) == (False, None)
    assert not (tmp_path / "new").exists(), "the check creates nothing"


def test_what_keeps_a_directory_from_being_written_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert access.directory_state(str(blocker)) == (True, "is a file, not a directory")
    assert access.directory_state(str(blocker / "sub" / "deeper")) == (False, "cannot be created: %s is a file" % blocker)
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    assert access.directory_state(str(link)) == (False, "is a broken symbolic link (to %s)" % (tmp_path / "gone"))
    assert access.directory_state(str(link / "sub"))[1] == "cannot be created: %s is a broken symbolic link" % link
    assert access.directory_state("") == (False, "is empty")
    assert access.directory_state("   ") == (False, "is empty")


def test_a_directory_this_user_cannot_write(tmp_path):
    read_only = tmp_path / "read-only"
    read_only.mkdir()

    def no_write(path, mode):
        return not str(path).startswith(str(read_only))

    exists, problem = access.directory_state(str(read_only), access=no_write)
    assert exists and problem.startswith("is a directory user ") and problem.endswith(" cannot write")
    exists, problem = access.directory_state(str(read_only / "reports"), access=no_write)
    assert not exists and problem.startswith("cannot be created: %s is a directory user " % read_only)


def test_check_directories_names_each_by_its_variable_and_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    checked = access.check_directories([{"path": str(blocker), "name": "gpu_report_dir"},
                                        {"path": str(tmp_path / "new")}, {"path": ""}])
    assert checked == [
        {"name": "gpu_report_dir", "path": str(blocker), "exists": True,
         "problem": "gpu_report_dir %s is a file, not a directory" % blocker},
        {"name": "directory", "path": str(tmp_path / "new"), "exists": False, "problem": None},
        {"name": "directory", "path": "", "exists": False, "problem": "directory is empty"}]
    assert access.summary(["helm"], [], [], ["gpu_report_dir /x is a file, not a directory"]) == (
        "gpu_report_dir /x is a file, not a directory; executables not found on PATH: helm")
