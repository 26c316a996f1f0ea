"""The execution environment definition: valid ansible-builder v3, and its build context really carries the
collection and what the collection needs. No container engine here: `ansible-builder create` writes the
context without one, and `ansible-builder introspect` is the step the image build runs to collect deps."""

import os
import re
import subprocess

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.join(ROOT, ".venv", "bin")


def run(*cmd, cwd=ROOT, env=None):
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, "%s failed:\n%s%s" % (" ".join(cmd), proc.stdout, proc.stderr)
    return proc.stdout


def requirement_names(lines):
    return {re.split(r"[<>=!~ ;#\[]", line.strip(), 1)[0].lower() for line in lines
            if line.strip() and not line.lstrip().startswith("#")}


def test_definition_passes_builder_schema_and_creates_context(tmp_path):
    from ansible_builder.ee_schema import validate_schema

    with open(os.path.join(ROOT, "execution-environment.yml")) as handle:
        definition = yaml.safe_load(handle)
    validate_schema(definition)  # raises DefinitionError naming the bad key
    assert definition["version"] == 3

    context = tmp_path / "context"
    run(os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
        "-c", str(context), "--output-filename", "Containerfile")
    containerfile = (context / "Containerfile").read_text()
    assert definition["dependencies"]["ansible_core"]["package_pip"] in containerfile and "ansible-runner" in containerfile
    assert re.search(r"get\.helm\.sh/\$\{tarball\}\.sha256sum", containerfile), "helm is not fetched and checked"
    assert "sha256sum -c" in containerfile
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert {"source": "./gpu_operator", "type": "dir"} in requirements["collections"]
    collection = context / "_build" / "gpu_operator"
    for needed in ("galaxy.yml", "meta/runtime.yml", "meta/execution-environment.yml",
                   "plugins/inventory/gpu_nodes.py", "plugins/module_utils/k8s/client.py"):
        assert (collection / needed).is_file(), "EE build context lacks %s" % needed


def test_collection_dependencies_are_found_by_builder_introspection(tmp_path):
    context = tmp_path / "context"
    run(os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(context))
    # The galaxy stage of the image build: install the collection from the context directory.
    # The image build has no ansible.cfg of ours; under `make` ANSIBLE_CONFIG points at the checkout's, whose
    # collections_path already holds gpufleet.gpu_operator, and ansible-galaxy would then skip the install.
    installed = tmp_path / "collections"
    image_env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    image_env["ANSIBLE_COLLECTIONS_PATH"] = str(installed)
    run(os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(installed),
        "./gpu_operator", cwd=str(context / "_build"), env=image_env)
    assert (installed / "ansible_collections" / "gpufleet" / "gpu_operator" / "galaxy.yml").is_file() or \
        (installed / "ansible_collections" / "gpufleet" / "gpu_operator" / "MANIFEST.json").is_file(), \
        "ansible-galaxy installed nothing into %s" % installed
    # The builder stage: what introspection collects is what pip and bindep install into the image.
    found = yaml.safe_load(run(os.path.join(BIN, "ansible-builder"), "introspect", "--sanitize", str(installed))
                           .split("---", 1)[1])
    python = requirement_names(found["python"])
    assert {"kubernetes", "nvidia-ml-py"} <= python, "introspection found %r in %s: %r" % (
        found, installed, sorted(str(p.relative_to(installed)) for p in installed.rglob("meta/*")))
    assert {"tar", "gzip", "ca-certificates"} <= requirement_names(found["system"])


def test_ee_python_requirements_match_runtime_requirements():
    """meta/ee-requirements.txt ships in the collection (requirements/ does not); they must not drift apart."""
    def pins(path):
        with open(os.path.join(ROOT, path)) as handle:
            return {line.split("#", 1)[0].strip() for line in handle if line.split("#", 1)[0].strip()}

    assert pins("meta/ee-requirements.txt") == pins("requirements/runtime.txt")
