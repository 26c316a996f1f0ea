#!/usr/bin/env bash
# Build NVIDIA's real GPU Operator controller and extract, from the same source, the Helm chart
# (deployments/gpu-operator) and what the operator image holds at /opt/gpu-operator (assets' content, manifests/,
# the CRD files; NVIDIA's docker/Dockerfile). One build per release:
#   v26.7.0  the production pin: offline from NVIDIA's release tarball beside the checkout
#            (../shared/nvidia/src/gpu-operator-v26.7.0.tar.gz, `git archive` of the tag with its vendor/ tree;
#            GPUFLEET_NVIDIA_DIR moves ../shared/nvidia), GOFLAGS=-mod=vendor GOPROXY=off, link flags as its Makefile.
#            Cache keyed by the tarball's sha256 (first 12 hex digits): ${GPUFLEET_CACHE}/nvidia/<sha>/
#   v25.3.4  from the Go module proxy (github.com/NVIDIA/gpu-operator@v0.0.0-20250917190837-d73a0086a6ba, the only
#            version it serves). Cache keyed by the module version: ${GPUFLEET_CACHE}/testbed/gpu-operator-<version>/
# Each cache folder holds bin/gpu-operator, chart/gpu-operator, opt/gpu-operator and VERSION;
# tests/testbed/operator.py bind-mounts opt/gpu-operator at /opt/gpu-operator in a private mount namespace and runs the
# build whose chart is installed.
# Usage: build-operator.sh [all|build RELEASE|path [RELEASE]|chart [RELEASE]|version|releases]
#   all builds every release; path/chart print a release's cache folder/chart (default: the production pin) without
#   building; version prints the production pin; releases lists the releases.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NVIDIA_DIR=${GPUFLEET_NVIDIA_DIR:-$REPO/../shared/nvidia}
CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
PRODUCTION_RELEASE=v26.7.0
RELEASES="v25.3.4 v26.7.0"
MODULE=github.com/NVIDIA/gpu-operator
# v25.3.4 as a module pseudo-version (the chart appVersion of its deployments/gpu-operator is devel-ubi8).
MODULE_VERSION_v25_3_4=v0.0.0-20250917190837-d73a0086a6ba

# shellcheck source=tests/testbed/build-lib.sh
. "$HERE/build-lib.sh"

WORK=""
trap 'rm -rf "$WORK"' EXIT

tarball_of() { echo "$NVIDIA_DIR/src/gpu-operator-$1.tar.gz"; }

dir_of() {
  case "$1" in
    v25.3.4) echo "${GPU_OPERATOR_DIR:-$CACHE_ROOT/testbed/gpu-operator-$MODULE_VERSION_v25_3_4}" ;;
    v26.7.0)
      local t; t=$(tarball_of "$1")
      [ -f "$t" ] || { echo "build-operator.sh: NVIDIA's source tarball $t is missing (see docs/testbed.md)" >&2; exit 1; }
      echo "$CACHE_ROOT/nvidia/$(sha256sum "$t" | cut -c1-12)" ;;
    *) echo "build-operator.sh: unknown GPU Operator release '$1' (known: $RELEASES)" >&2; exit 2 ;;
  esac
}

complete() {
  [ -x "$1/bin/gpu-operator" ] && [ -f "$1/chart/gpu-operator/Chart.yaml" ] && [ -d "$1/opt/gpu-operator/manifests" ]
}

# extract SRC DIR: the chart and the image's /opt/gpu-operator layout from source tree SRC into DIR
extract() {
  local src=$1 dir=$2 crd
  rm -rf "$dir/chart.tmp" "$dir/opt.tmp"
  mkdir -p "$dir/chart.tmp" "$dir/opt.tmp/gpu-operator"
  cp -R "$src/deployments/gpu-operator" "$dir/chart.tmp/gpu-operator"
  cp -R "$src/assets/." "$dir/opt.tmp/gpu-operator/"
  cp -R "$src/manifests" "$dir/opt.tmp/gpu-operator/manifests"
  for crd in nvidia.com_clusterpolicies.yaml nvidia.com_nvidiadrivers.yaml nvidia.com_gpuclusters.yaml; do
    if [ -f "$src/deployments/gpu-operator/crds/$crd" ]; then cp "$src/deployments/gpu-operator/crds/$crd" "$dir/opt.tmp/gpu-operator/"; fi
  done
  cp "$src/deployments/gpu-operator/charts/node-feature-discovery/crds/nfd-api-crds.yaml" "$dir/opt.tmp/gpu-operator/"
  # The module cache is read-only: make the copies writable (so a later rm -rf works).
  chmod -R u+w "$dir/chart.tmp" "$dir/opt.tmp"
  rm -rf "$dir/chart" "$dir/opt"
  mv "$dir/chart.tmp" "$dir/chart"
  mv "$dir/opt.tmp" "$dir/opt"
}

build_module() {
  local release=$1 dir=$2 version=$MODULE_VERSION_v25_3_4 src
  go_module_env
  say "gpu-operator $release: downloading module $MODULE@$version"
  src=$(go mod download -json "$MODULE@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$src/deployments/gpu-operator" ] || { say "no chart in module dir '$src'"; exit 1; }
  if [ ! -x "$dir/bin/gpu-operator" ]; then
    say "gpu-operator $release: building the controller (a few minutes on 2 cores)"
    mkdir -p "$dir/bin"
    # cgo is off like the other testbed binaries; go install builds the module with its own go.mod/go.sum.
    CGO_ENABLED=0 GOBIN="$dir/bin.tmp" go install -trimpath -ldflags "-s -w" "$MODULE/cmd/gpu-operator@$version"
    mv "$dir/bin.tmp/gpu-operator" "$dir/bin/gpu-operator"
    rmdir "$dir/bin.tmp"
  fi
  say "gpu-operator $release: extracting chart, assets and manifests"
  extract "$src" "$dir"
  printf '%s %s\n' "$MODULE@$version" "$release" > "$dir/VERSION"
}

build_tarball() {
  local release=$1 dir=$2 tarball src commit info
  tarball=$(tarball_of "$release")
  export GOTOOLCHAIN=local GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=0
  [ -n "$WORK" ] || WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-operator.XXXXXX")
  say "gpu-operator $release: extracting $(basename "$tarball")"
  tar -xzf "$tarball" -C "$WORK"
  src="$WORK/gpu-operator-$release"
  commit=$(zcat "$tarball" | git get-tar-commit-id || true)
  if [ ! -x "$dir/bin/gpu-operator" ]; then
    say "gpu-operator $release: building the controller (offline, -mod=vendor; minutes on 2 cores)"
    rm -rf "$dir/bin.tmp"; mkdir -p "$dir/bin.tmp"
    info=$(sed -n 's/^module //p' "$src/go.mod")/internal/info
    # NVIDIA's Makefile (cmd-gpu-operator): CGO_ENABLED=0 go build -ldflags "-s -w -X info.gitCommit -X info.version".
    (cd "$src" && go build -trimpath -ldflags "-s -w -X $info.gitCommit=$commit -X $info.version=$release" \
      -o "$dir/bin.tmp/" ./cmd/gpu-operator)
    mkdir -p "$dir/bin"
    mv "$dir/bin.tmp/gpu-operator" "$dir/bin/gpu-operator"
    rmdir "$dir/bin.tmp"
  fi
  say "gpu-operator $release: extracting chart, assets and manifests"
  extract "$src" "$dir"
  printf '%s %s %s\n' "$(basename "$tarball")" "$release" "$commit" > "$dir/VERSION"
}

build() {
  local release=$1 dir
  dir=$(dir_of "$release")
  lock_cache_dir "$dir"
  if complete "$dir"; then
    say "gpu-operator $release: cached in $dir"
  else
    case "$release" in
      v25.3.4) build_module "$release" "$dir" ;;
      *) build_tarball "$release" "$dir" ;;
    esac
    say "gpu-operator $release: ready in $dir"
  fi
  exec 9>&-
}

case "${1:-all}" in
  all) for r in $RELEASES; do build "$r"; done ;;
  build)
    [ $# -eq 2 ] || { echo "usage: $0 build RELEASE" >&2; exit 2; }
    build "$2"; dir_of "$2" ;;
  path) dir_of "${2:-$PRODUCTION_RELEASE}" ;;
  chart) echo "$(dir_of "${2:-$PRODUCTION_RELEASE}")/chart/gpu-operator" ;;
  version) echo "$PRODUCTION_RELEASE" ;;
  releases) echo "$RELEASES" ;;
  *) echo "usage: $0 [all|build RELEASE|path [RELEASE]|chart [RELEASE]|version|releases]" >&2; exit 2 ;;
esac
