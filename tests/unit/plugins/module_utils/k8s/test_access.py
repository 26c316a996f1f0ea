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
