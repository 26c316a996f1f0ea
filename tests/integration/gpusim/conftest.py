# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Helpers of the simulated-NVML tests: the code their subprocesses start with, and running a snippet."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import textwrap

# pynvml as ``n``, and err(fn, *args): the NVMLError value the call raises, 0 when it succeeds.
NVML_PRELUDE = """
import pynvml as n
def err(fn, *args):
    try:
        fn(*args)
    except n.NVMLError as e:
        return e.value
    return 0
"""


def run_snippet(host, code, prelude=NVML_PRELUDE):
    """Run ``prelude`` and the dedented ``code`` in a subprocess that sees ``host``; the last ``emit()``ed value."""
    return host.run_python(prelude + textwrap.dedent(code)).result
