"""Product code and docs cite public sources (NVIDIA's docs and repositories, upstream issues) or docs/ of this
repository, never files outside it: no section numbers ("§3.5") or names of the engineers' reference notes.

tests/ is not scanned: test data may live outside the repository (../shared/nvidia)."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The paths the collection ships or documents (the collection's shipped paths).
SCANNED = ("plugins", "roles", "docs", "awx", "README.md", "playbooks", "inventories")
PATTERN = re.compile(
    r"§[0-9]|shared/reference|reference §|user-pain|ansible-ecosystem\.md|nvidia-gpu-operator-and-mig\.md|nvidia-real-behaviour"
)
SKIPPED_DIRS = {"__pycache__"}


def _files():
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for dirpath, dirnames, filenames in os.walk(str(path)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("."))
            for filename in sorted(filenames):
                yield Path(dirpath) / filename


def external_citations(files, root=ROOT):
    """['file:line: text'] for every line of ``files`` that matches PATTERN (binary files are skipped)."""
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                hits.append("%s:%d: %s" % (path.relative_to(root), number, line.strip()))
    return hits


def test_pattern_catches_each_form():
    for text in ("labels (§3.5)", "see reference §2", "user-pain.md 1.3", "ansible-ecosystem.md", "../shared/reference/x",
                 "nvidia-gpu-operator-and-mig.md", "nvidia-real-behaviour.md"):
        assert PATTERN.search(text), text
    for text in ("NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go", "docs/report.md", "NVIDIA/gpu-operator#2833"):
        assert not PATTERN.search(text), text


def test_finder_names_file_and_line(tmp_path):
    (tmp_path / "docs").mkdir()
    planted = tmp_path / "docs" / "planted.md"
    planted.write_text("fine line\nGFD labels (§6.2)\n", encoding="utf-8")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00 \xa7")
    assert external_citations([planted, binary], root=tmp_path) == ["docs/planted.md:2: GFD labels (§6.2)"]


def test_scan_covers_the_shipped_tree():
    files = list(_files())
    names = {str(p.relative_to(ROOT)) for p in files}
    assert "README.md" in names
    assert any(n.startswith("plugins/module_utils/") and n.endswith(".py") for n in names)
    assert any(n.startswith("roles/") and n.endswith(".yml") for n in names)
    assert any(n.startswith("docs/") and n.endswith(".md") for n in names)


def test_no_citation_of_files_outside_the_repository():
    hits = external_citations(_files())
    assert not hits, "cite NVIDIA's public docs/source or a doc in docs/ instead:\n" + "\n".join(hits)
