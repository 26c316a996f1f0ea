"""What Galaxy and an installed collection need from the tree: a README per role naming every input of its
argument spec, playbooks under playbooks/ with names that are valid FQCN parts, dependencies with upper bounds."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_names_every_input(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    missing = [name for name in spec["argument_specs"]["main"]["options"] if "`%s`" % name not in readme]
    assert not missing, "roles/%s/README.md does not name %s" % (role, missing)
    assert "## Example" in readme


def test_playbook_names_are_fqcn_parts():
    names = [p.stem for p in (ROOT / "playbooks").glob("*.yml")]
    assert {"site", "mig_reconfigure", "report"} <= set(names)
    assert all(re.match(r"^[a-z_][a-z0-9_]*$", n) for n in names), names


def test_dependencies_have_upper_bounds_and_real_urls():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    for name, spec in galaxy["dependencies"].items():
        assert ">=" in spec and "<" in spec.replace("<=", ""), "%s: %s has no upper bound" % (name, spec)
    for key in ("repository", "documentation", "issues"):
        assert galaxy[key].startswith("https://github.com/gpufleet/gpu_operator"), galaxy[key]
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    # The claimed range is the ansible-core releases the tests run on (requirements/dev.txt, mk/ansible-versions.mk),
    # and holds the one running this test.
    from ansible.release import __version__
    from packaging.specifiers import SpecifierSet

    claimed = SpecifierSet(runtime["requires_ansible"])
    assert __version__ in claimed, __version__
    makefile = (ROOT / "mk" / "ansible-versions.mk").read_text()
    tested = re.search(r"^ANSIBLE_CORE_VERSIONS := (.+)$", makefile, re.M).group(1).split()
    # The main venv's ansible 14 is ansible-core 2.21; the versions venvs add 2.19 and 2.20.
    dev = (ROOT / "requirements" / "dev.txt").read_text()
    assert re.search(r"^ansible==14\.", dev, re.M), "requirements/dev.txt does not pin ansible 14 (ansible-core 2.21)"
    minors = sorted({".".join(v.split(".")[:2]) for v in tested} | {"2.21"})
    assert minors == ["2.19", "2.20", "2.21"], minors
    assert all(v in claimed for v in tested) and "2.19.0" in claimed
    assert "2.22.0" not in claimed and "2.18.99" not in claimed
    for minor in minors:  # ansible-test reads the ignore file of its own version
        assert (ROOT / "tests" / "sanity" / ("ignore-%s.txt" % minor)).is_file(), minor


def requirement_lines(relpath):
    """The requirement lines of a pip requirements file, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in (ROOT / relpath).read_text().splitlines())
    return [line for line in lines if line]


def range_problems(lines):
    """Lines of a declared requirements file that are not a range with both bounds (a pin, or an open end)."""
    from packaging.requirements import Requirement

    problems = []
    for line in lines:
        operators = set(spec.operator for spec in Requirement(line).specifier)
        if operators & {"==", "==="} or not operators & {">=", ">", "~="} or not operators & {"<", "<=", "~="}:
            problems.append(line)
    return problems


def test_range_check_refuses_pins_and_open_ends():
    assert range_problems(["kubernetes==37.0.2", "a>=1", "b<2", "c", "d>=1,<2", "e~=1.2", "f===1"]) == [
        "kubernetes==37.0.2", "a>=1", "b<2", "c", "f===1"]


def test_declared_python_requirements_are_ranges_holding_the_tested_pins():
    """What a collection declares (requirements/runtime.txt, and meta/ee-requirements.txt that ansible-builder reads
    through meta/execution-environment.yml) are ranges; the exact versions the venvs use are constraints inside them."""
    from packaging.requirements import Requirement

    runtime = requirement_lines("requirements/runtime.txt")
    assert runtime == requirement_lines("meta/ee-requirements.txt")
    assert not range_problems(runtime), range_problems(runtime)
    ee_meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert ee_meta["dependencies"]["python"] == "meta/ee-requirements.txt"
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert not {"meta", "meta/ee-requirements.txt", "meta/ee-bindep.txt"} & set(galaxy["build_ignore"])
    declared = dict((Requirement(line).name.lower(), Requirement(line).specifier) for line in runtime)
    pins = [Requirement(line) for line in requirement_lines("requirements/constraints.txt")]
    assert {"kubernetes", "nvidia-ml-py"} <= set(pin.name.lower() for pin in pins)
    for pin in pins:
        version = next(iter(pin.specifier)).version
        assert version in declared[pin.name.lower()], "%s is outside %s%s" % (pin, pin.name, declared[pin.name.lower()])


def test_execution_environment_installs_a_supported_ansible_core():
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    definition = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    wanted = Requirement(definition["dependencies"]["ansible_core"]["package_pip"])
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert wanted.name == "ansible-core"
    assert wanted.specifier == SpecifierSet(runtime["requires_ansible"]), wanted


def test_changelog_records_the_galaxy_version_and_ships():
    """galaxy.yml's version is a release of changelogs/changelog.yaml (antsibull-changelog), CHANGELOG.rst shows it, and
    the build keeps both."""
    import fnmatch

    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    changes = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
    assert galaxy["version"] in changes["releases"], sorted(changes["releases"])
    release = changes["releases"][galaxy["version"]]
    assert release["changes"].get("release_summary") and release.get("release_date")
    assert "v%s\n" % galaxy["version"] in (ROOT / "CHANGELOG.rst").read_text()
    for path in ("CHANGELOG.rst", "changelogs/changelog.yaml", "changelogs/config.yaml"):
        assert not [p for p in galaxy["build_ignore"] if fnmatch.fnmatch(path, p) or path.startswith(p + "/")], path
