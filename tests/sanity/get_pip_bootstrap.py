"""Stand-in for ansible-test's get-pip bootstrap script.

ansible-test downloads get-pip.py from ci-files.testing.ansible.com, which is not reachable from
these machines; this does the same job with the interpreter's bundled ensurepip and then lets
pip (from PyPI, which is reachable) install the requested versions.
"""
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args)
