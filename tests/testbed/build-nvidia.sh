#!/usr/bin/env bash
# Build NVIDIA's programs offline from the release source tarballs beside the checkout
# (../shared/nvidia/src/<project>-<tag>.tar.gz, each `git archive` of the tag with its vendor/ tree; GPUFLEET_NVIDIA_DIR
# moves ../shared/nvidia): GOFLAGS=-mod=vendor, GOPROXY=off, cgo on (go-nvml dlopens libnvidia-ml.so.1; the tests put
# the simulated one on LD_LIBRARY_PATH), link flags as NVIDIA's Makefiles.
#   mig-parted         v0.15.0: nvidia-mig-manager, nvidia-mig-parted
#   k8s-device-plugin  v0.20.0: nvidia-device-plugin, config-manager, gpu-feature-discovery, and the device-plugin
#                               config checker tests/testbed/oracle/dpconfig built inside that module
# Cached outside the repository, keyed by the tarball's sha256 (first 12 hex digits); a present binary is not rebuilt:
#   ${GPUFLEET_CACHE}/nvidia/<sha>/bin/<program>        ${GPUFLEET_CACHE}/nvidia/<sha>/dpconfig-<source sha>/dpconfig
# Usage: build-nvidia.sh [all|mig-parted|k8s-device-plugin|bin PROGRAM|dpconfig|path PROJECT|version PROJECT]
#   bin PROGRAM prints the binary's path (building its project first if needed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NVIDIA_DIR=${GPUFLEET_NVIDIA_DIR:-$REPO/../shared/nvidia}
CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
MIG_PARTED_VERSION=${MIG_PARTED_VERSION:-v0.15.0}
DEVICE_PLUGIN_VERSION=${DEVICE_PLUGIN_VERSION:-v0.20.0}
CHECKER_SRC=$HERE/oracle/dpconfig/main.go

# shellcheck source=tests/testbed/build-lib.sh
. "$HERE/build-lib.sh"

WORK=""
trap 'rm -rf "$WORK"' EXIT

# project PROGRAM -> the project that builds it
project_of() {
  case "$1" in
    nvidia-mig-manager|nvidia-mig-parted) echo mig-parted ;;
    nvidia-device-plugin|config-manager|gpu-feature-discovery|dpconfig) echo k8s-device-plugin ;;
    *) echo "build-nvidia.sh: unknown program '$1'" >&2; exit 2 ;;
  esac
}
version_of() {
  case "$1" in
    mig-parted) echo "$MIG_PARTED_VERSION" ;;
    k8s-device-plugin) echo "$DEVICE_PLUGIN_VERSION" ;;
    *) echo "build-nvidia.sh: unknown project '$1'" >&2; exit 2 ;;
  esac
}
programs_of() {
  case "$1" in
    mig-parted) echo nvidia-mig-manager nvidia-mig-parted ;;
    k8s-device-plugin) echo nvidia-device-plugin config-manager gpu-feature-discovery ;;
  esac
}
tarball_of() {
  local t
  t="$NVIDIA_DIR/src/$1-$(version_of "$1").tar.gz"
  [ -f "$t" ] || { echo "build-nvidia.sh: NVIDIA's source tarball $t is missing (see docs/testbed.md)" >&2; exit 1; }
  echo "$t"
}
dir_of() { echo "$CACHE_ROOT/nvidia/$(sha256sum "$(tarball_of "$1")" | cut -c1-12)"; }
checker_of() { echo "$1/dpconfig-$(sha256sum "$CHECKER_SRC" | cut -c1-12)/dpconfig"; }

# complete PROJECT DIR: are all of PROJECT's binaries in DIR
complete() {
  local p
  for p in $(programs_of "$1"); do [ -x "$2/bin/$p" ] || return 1; done
  if [ "$1" = k8s-device-plugin ]; then [ -x "$(checker_of "$2")" ] || return 1; fi
}

build() {
  local project=$1 dir tarball version commit src work p missing=()
  dir=$(dir_of "$project"); tarball=$(tarball_of "$project"); version=$(version_of "$project")
  if complete "$project" "$dir"; then say "$project $version: cached in $dir"; return; fi
  lock_cache_dir "$dir"
  if complete "$project" "$dir"; then say "$project $version: cached in $dir"; return; fi
  export GOTOOLCHAIN=local GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=1
  # go-nvml wraps every NVML call, deprecated ones too: keep the compiler's deprecation notes out of the log.
  export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"
  [ -n "$WORK" ] || WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-nvidia.XXXXXX")
  work=$WORK
  say "$project $version: extracting $(basename "$tarball")"
  tar -xzf "$tarball" -C "$work"
  src="$work/$project-$version"
  commit=$(zcat "$tarball" | git get-tar-commit-id || true)
  local module info ldflags
  module=$(sed -n 's/^module //p' "$src/go.mod")
  info="$module/internal/info"
  mkdir -p "$dir/bin"
  for p in $(programs_of "$project"); do [ -x "$dir/bin/$p" ] || missing+=("./cmd/$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    ldflags="-s -w -X $info.version=$version -X $info.gitCommit=$commit"
    case "$project" in
      mig-parted) ldflags+=" -extldflags=-Wl,-z,lazy" ;;
      k8s-device-plugin) ldflags+=" '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files'" ;;
    esac
    say "$project $version: building ${missing[*]} (cgo, offline; minutes on 2 cores)"
    rm -rf "$dir/bin.tmp"; mkdir -p "$dir/bin.tmp"
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$dir/bin.tmp/" "${missing[@]}")
    for p in "${missing[@]}"; do mv "$dir/bin.tmp/${p#./cmd/}" "$dir/bin/"; done
    rmdir "$dir/bin.tmp"
  fi
  if [ "$project" = k8s-device-plugin ]; then
    local checker
    checker=$(checker_of "$dir")
    if [ ! -x "$checker" ]; then
      say "$project $version: building the device-plugin config checker (dpconfig) in the module"
      mkdir -p "$src/cmd/gpufleet-dpconfig"
      cp "$CHECKER_SRC" "$src/cmd/gpufleet-dpconfig/main.go"
      rm -rf "$dir"/dpconfig-*; mkdir -p "$(dirname "$checker")"
      (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$checker.tmp" ./cmd/gpufleet-dpconfig)
      mv "$checker.tmp" "$checker"
    fi
  fi
  printf '%s %s %s\n' "$(basename "$tarball")" "$version" "$commit" > "$dir/VERSION"
  say "$project $version: ready in $dir"
}

case "${1:-all}" in
  all) build mig-parted; build k8s-device-plugin ;;
  mig-parted|k8s-device-plugin) build "$1" ;;
  bin)
    [ $# -eq 2 ] || { echo "usage: $0 bin PROGRAM" >&2; exit 2; }
    proj=$(project_of "$2"); d=$(dir_of "$proj")
    [ -x "$d/bin/$2" ] || build "$proj" >&2
    echo "$d/bin/$2" ;;
  dpconfig)
    d=$(dir_of k8s-device-plugin)
    [ -x "$(checker_of "$d")" ] || build k8s-device-plugin >&2
    checker_of "$d" ;;
  path) [ $# -eq 2 ] || { echo "usage: $0 path PROJECT" >&2; exit 2; }; dir_of "$2" ;;
  version) [ $# -eq 2 ] || { echo "usage: $0 version PROJECT" >&2; exit 2; }; version_of "$2" ;;
  *) echo "usage: $0 [all|mig-parted|k8s-device-plugin|bin PROGRAM|dpconfig|path PROJECT|version PROJECT]" >&2; exit 2 ;;
esac
