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
    # The main venv's ansible 12 is ansible-core 2.19; the versions venvs add 2.20 and 2.21.
    minors = ["2.19"] + sorted({".".join(v.split(".")[:2]) for v in tested})
    assert minors == ["2.19", "2.20", "2.21"], minors
    assert all(v in claimed for v in tested) and "2.19.0" in claimed
    assert "2.22.0" not in claimed and "2.18.99" not in claimed
    for minor in minors:  # ansible-test reads the ignore file of its own version
        assert (ROOT / "tests" / "sanity" / ("ignore-%s.txt" % minor)).is_file(), minor
