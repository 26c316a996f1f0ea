#!/usr/bin/env bash
# ansible-test needs the collection at ansible_collections/<ns>/<name>; run it on a fresh copy of
# the tracked and new files, with the local Python (ANSIBLE_TEST_PYTHON, by default the version of the python3 first on PATH; no containers). The
# ansible-test run is the one first on PATH (the main venv's, or an ansible-core versions venv: mk/ansible-versions.mk).
set -euo pipefail
export ANSIBLE_TEST_PYTHON=${ANSIBLE_TEST_PYTHON:-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d "$root/build/sanity.XXXXXX" 2>/dev/null || { mkdir -p "$root/build"; mktemp -d "$root/build/sanity.XXXXXX"; })
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpufleet/gpu_operator
mkdir -p "$dest"
cd "$root"
# ansible-test fetches its pip bootstrap from a host these machines cannot reach: provide it locally.
pip_version=$(python - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
import os
print(get_venv_packages(NativePythonConfig(version=os.environ["ANSIBLE_TEST_PYTHON"], path="python3"))["pip"])
PY
)
mkdir -p ~/.ansible/test/cache
cp tests/sanity/get_pip_bootstrap.py ~/.ansible/test/cache/"get_pip_${pip_version//./_}.py"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents -P {} "$dest/" 2>/dev/null || true
cd "$dest"
git init -q . && git add -A >/dev/null 2>&1
# shellcheck disable=SC2086  # SANITY_ARGS holds several options
ansible-test sanity --python "$ANSIBLE_TEST_PYTHON" --requirements --color no ${SANITY_ARGS:-}
