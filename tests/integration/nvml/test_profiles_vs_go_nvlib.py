"""MIG profile names as the collection parses them (mig/profiles.py) against NVIDIA's parser: go-nvlib's, as
vendored in mig-parted v0.15.0 and run by mig-parted's config validation (pkg/types AssertValidMigProfileFormat).
tests/testbed/oracle/migprofile/main.go, built inside NVIDIA's mig-parted source, answers for each string whether
mig-parted accepts it and whether go-nvlib's parse equals ours. Over every profile of the catalog (GPU-instance
and compute-instance forms), every profile NVIDIA's default config names, and malformed strings."""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig import catalog, profiles
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import ProfileNameError

ROOT = Path(__file__).resolve().parents[3]
NVIDIA = Path(os.environ.get("GPUFLEET_NVIDIA_DIR") or ROOT.parent / "shared" / "nvidia")
TARBALL = NVIDIA / "src" / "mig-parted-v0.15.0.tar.gz"
SOURCE = ROOT / "tests" / "testbed" / "oracle" / "migprofile" / "main.go"
STATIC_CONFIGMAP = NVIDIA / "gpu-operator-v26.7.0" / "assets" / "state-mig-manager" / "0400_configmap.yaml"
CACHE = Path(os.environ.get("GPUFLEET_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "gpufleet")

# Strings mig-parted's format check accepts and the collection refuses, on purpose: each names no profile any GPU
# has, so the collection says so before anything changes instead of letting MIG Manager fail on the node.
STRICTER = {
    "1g.5gb+foo": "an attribute no GPU has (go-nvlib's format check takes any alphanumeric word)",
    "2c.1g.5gb": "more compute slices than GPU slices",
    "0g.5gb": "zero GPU slices",
    "1g.0gb": "zero memory",
    "01g.5gb": "a leading zero",
    "1g.05gb": "a leading zero",
}
MALFORMED = ["", "1g", "1g.5", "1g5gb", "g.5gb", "1g.5gb+", "1g.5gb-", "1g.5gb+me-me", "1g.5gb+me,me", "1g.5gb+,me",
             "1g.5gb+.me", "1g.5gb+me.", "1g.5gb+1me", "1c.2c.1g.5gb", "1g.5GB", "1G.5gb", " 1g.5gb", "1g.5gb ",
             "MIG 1g.5gb", "1g.5gb+me gfx", "1x.1g.5gb", "1c1g.5gb", "+1g.5gb"]


def _build():
    """The migprofile binary, built offline inside NVIDIA's mig-parted source (vendored go-nvlib) and cached by the
    tarball's and the program's sha256."""
    assert TARBALL.is_file(), "NVIDIA's mig-parted source is missing at %s" % TARBALL
    key = hashlib.sha256(TARBALL.read_bytes()).hexdigest()[:12]
    out_dir = CACHE / "nvidia" / key / ("migprofile-%s" % hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12])
    binary = out_dir / "migprofile"
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return str(binary)
        work = Path(tempfile.mkdtemp(prefix="gpufleet-migprofile."))
        try:
            with tarfile.open(TARBALL) as archive:
                archive.extractall(work, filter="data")
            (src,) = [p for p in work.iterdir() if p.is_dir()]
            (src / "cmd" / "gpufleet-migprofile").mkdir()
            shutil.copy(SOURCE, src / "cmd" / "gpufleet-migprofile" / "main.go")
            env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=vendor -buildvcs=false", GOPROXY="off",
                       CGO_ENABLED="1")
            proc = subprocess.run(["nice", "-n", "10", "go", "build", "-o", str(binary) + ".tmp",
                                   "./cmd/gpufleet-migprofile"], cwd=src, env=env, capture_output=True, text=True,
                                  timeout=900, check=False)
            assert proc.returncode == 0, "building migprofile failed:\n%s" % proc.stderr[-4000:]
            os.replace(str(binary) + ".tmp", binary)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return str(binary)


@pytest.fixture(scope="module")
def migprofile():
    return _build()


def _ours(text):
    try:
        parsed = profiles.parse_profile(text)
    except ProfileNameError:
        return None
    return {"c": parsed.c, "g": parsed.g, "gb": parsed.gb, "attrs": list(parsed.attrs), "negattrs": list(parsed.negattrs)}


def _ask(binary, strings):
    queries = [{"profile": s, "parsed": _ours(s)} for s in strings]
    proc = subprocess.run([binary], input=json.dumps(queries), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict((a["profile"], dict(a, ours=q["parsed"])) for a, q in zip(json.loads(proc.stdout), queries))


def _catalog_profiles():
    names = set()
    for model in catalog.all_models():
        for profile in model["profiles"]:
            names.add(profile["name"])
            parsed = profiles.parse_profile(profile["name"])
            for c in profiles.compute_slice_options(parsed.g):
                names.add(profiles.format_profile(parsed._replace(c=c)))
    return sorted(names)


def _nvidia_config_profiles():
    assert STATIC_CONFIGMAP.is_file(), "NVIDIA's default MIG ConfigMap is missing at %s" % STATIC_CONFIGMAP
    config = yaml.safe_load(yaml.safe_load(STATIC_CONFIGMAP.read_text())["data"]["config.yaml"])
    return sorted(set(p for entries in config["mig-configs"].values() for e in entries for p in e.get("mig-devices") or {}))


def test_every_catalog_and_nvidia_config_profile_parses_as_go_nvlib_parses_it(migprofile):
    strings = sorted(set(_catalog_profiles()) | set(_nvidia_config_profiles()))
    assert any(s.startswith("1c.") for s in strings) and "1g.24gb+me.all" in strings and "1g.24gb-me" in strings
    answers = _ask(migprofile, strings)
    wrong = dict((s, a) for s, a in answers.items() if not (a["valid"] and a["ours"] is not None and a["matches"]))
    assert wrong == {}


def test_malformed_strings_are_refused_by_both(migprofile):
    answers = _ask(migprofile, MALFORMED)
    assert dict((s, a) for s, a in answers.items() if a["valid"] or a["ours"] is not None) == {}


def test_where_the_collection_is_stricter_mig_parted_accepts_a_name_no_gpu_has(migprofile):
    answers = _ask(migprofile, sorted(STRICTER))
    assert dict((s, a) for s, a in answers.items() if not a["valid"] or a["ours"] is not None) == {}
