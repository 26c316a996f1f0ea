"""No test is skipped or expected to fail: a skip counted as a pass hides a defect (docs/testing.md)."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Built from parts so this file does not match itself.
FORBIDDEN = re.compile(r"pytest\.(%s)|mark\.(%s)" % ("skip\\b|importorskip", "skip|skipif|xfail"))


def test_no_test_is_skipped_or_xfailed():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append("%s:%d: %s" % (path.relative_to(TESTS), number, line.strip()))
    assert not offenders, "tests that skip or xfail instead of failing:\n" + "\n".join(offenders)
