#!/usr/bin/env bash
# Build NVIDIA's real GPU Operator controller from its Go module and extract, from the same module, the
# Helm chart (deployments/gpu-operator), the run-time assets (assets/) and manifests (manifests/).
# Cached outside the repository beside the other testbed binaries, keyed by the module version:
#   ${GPUFLEET_CACHE}/testbed/gpu-operator-<version>/{bin/gpu-operator,chart/gpu-operator,opt/gpu-operator}
# opt/gpu-operator is what the controller expects at /opt/gpu-operator (assets' content + manifests/);
# tests/testbed/operator.py bind-mounts it there in a private mount namespace.
# Module = NVIDIA GPU Operator release v25.3.4 (the only version the Go module proxy serves).
# Usage: build-operator.sh [all|path|version]
set -euo pipefail

GPU_OPERATOR_MODULE=${GPU_OPERATOR_MODULE:-github.com/NVIDIA/gpu-operator}
GPU_OPERATOR_VERSION=${GPU_OPERATOR_VERSION:-v0.0.0-20250917190837-d73a0086a6ba}
# The release this pseudo-version is (chart appVersion of the module's deployments/gpu-operator).
GPU_OPERATOR_RELEASE=${GPU_OPERATOR_RELEASE:-v25.3.4}

CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
DIR=${GPU_OPERATOR_DIR:-$CACHE_ROOT/testbed/gpu-operator-$GPU_OPERATOR_VERSION}

# shellcheck source=tests/testbed/build-lib.sh
. "$(dirname "$0")/build-lib.sh"

case "${1:-all}" in
  path) echo "$DIR"; exit 0 ;;
  version) echo "$GPU_OPERATOR_RELEASE"; exit 0 ;;
  all) ;;
  *) echo "usage: $0 [all|path|version]" >&2; exit 2 ;;
esac

lock_cache_dir "$DIR"
go_module_env

if [ -x "$DIR/bin/gpu-operator" ] && [ -f "$DIR/chart/gpu-operator/Chart.yaml" ] \
    && [ -d "$DIR/opt/gpu-operator/manifests" ]; then
  say "gpu-operator $GPU_OPERATOR_RELEASE: cached"
  echo "$DIR"; exit 0
fi

say "gpu-operator $GPU_OPERATOR_RELEASE: downloading module $GPU_OPERATOR_MODULE@$GPU_OPERATOR_VERSION"
src=$(go mod download -json "$GPU_OPERATOR_MODULE@$GPU_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$src/deployments/gpu-operator" ] || { say "no chart in module dir '$src'"; exit 1; }

if [ ! -x "$DIR/bin/gpu-operator" ]; then
  say "gpu-operator $GPU_OPERATOR_RELEASE: building the controller (a few minutes on 2 cores)"
  mkdir -p "$DIR/bin"
  # cgo is off like the other testbed binaries; go install builds the module with its own go.mod/go.sum.
  CGO_ENABLED=0 GOBIN="$DIR/bin.tmp" go install -trimpath -ldflags "-s -w" \
    "$GPU_OPERATOR_MODULE/cmd/gpu-operator@$GPU_OPERATOR_VERSION"
  mv "$DIR/bin.tmp/gpu-operator" "$DIR/bin/gpu-operator"
  rmdir "$DIR/bin.tmp"
fi

say "gpu-operator $GPU_OPERATOR_RELEASE: extracting chart, assets and manifests"
rm -rf "$DIR/chart.tmp" "$DIR/opt.tmp"
mkdir -p "$DIR/chart.tmp" "$DIR/opt.tmp/gpu-operator"
# The module cache is read-only: copy, then make the copies writable (so a later rm -rf works).
cp -R "$src/deployments/gpu-operator" "$DIR/chart.tmp/gpu-operator"
# The operator image's layout (its Dockerfile): assets' content at /opt/gpu-operator, manifests beside them.
cp -R "$src/assets/." "$DIR/opt.tmp/gpu-operator/"
cp -R "$src/manifests" "$DIR/opt.tmp/gpu-operator/manifests"
cp "$src/deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml" \
  "$src/deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml" \
  "$src/deployments/gpu-operator/charts/node-feature-discovery/crds/nfd-api-crds.yaml" "$DIR/opt.tmp/gpu-operator/"
chmod -R u+w "$DIR/chart.tmp" "$DIR/opt.tmp"
rm -rf "$DIR/chart" "$DIR/opt"
mv "$DIR/chart.tmp" "$DIR/chart"
mv "$DIR/opt.tmp" "$DIR/opt"
printf '%s %s\n' "$GPU_OPERATOR_MODULE@$GPU_OPERATOR_VERSION" "$GPU_OPERATOR_RELEASE" > "$DIR/VERSION"
say "gpu-operator $GPU_OPERATOR_RELEASE: ready in $DIR"
echo "$DIR"
