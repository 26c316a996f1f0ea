#!/usr/bin/env bash
# Build NVIDIA's GPU Feature Discovery and a device-plugin config checker from the Go module
# github.com/NVIDIA/k8s-device-plugin (the proxy refuses `go install pkg@version` for it because its go.mod has
# replace directives, so a small wrapper module requires it and builds the packages).
# Cached outside the repository beside the other testbed binaries, keyed by the module version and the checker's source:
#   ${GPUFLEET_CACHE}/testbed/k8s-device-plugin-<version>/bin/gpu-feature-discovery
#   ${GPUFLEET_CACHE}/testbed/k8s-device-plugin-<version>/dpconfig-<sha>/dpconfig
# GFD needs cgo (go-nvml dlopens libnvidia-ml.so.1; the tests put the simulated one on LD_LIBRARY_PATH).
# Usage: build-gfd.sh [all|path|gfd|dpconfig|version]
set -euo pipefail

DP_MODULE=${DP_MODULE:-github.com/NVIDIA/k8s-device-plugin}
DP_VERSION=${DP_VERSION:-v0.18.0}

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
DIR=${GFD_DIR:-$CACHE_ROOT/testbed/k8s-device-plugin-$DP_VERSION}
CHECKER_SRC=$HERE/oracle/dpconfig/main.go
CHECKER_SHA=$(sha256sum "$CHECKER_SRC" | cut -c1-12)
GFD=$DIR/bin/gpu-feature-discovery
CHECKER=$DIR/dpconfig-$CHECKER_SHA/dpconfig

# shellcheck source=tests/testbed/build-lib.sh
. "$(dirname "$0")/build-lib.sh"

case "${1:-all}" in
  path) echo "$DIR"; exit 0 ;;
  gfd) [ -x "$GFD" ] || "$0" all >/dev/null; echo "$GFD"; exit 0 ;;
  dpconfig) [ -x "$CHECKER" ] || "$0" all >/dev/null; echo "$CHECKER"; exit 0 ;;
  version) echo "$DP_VERSION"; exit 0 ;;
  all) ;;
  *) echo "usage: $0 [all|path|gfd|dpconfig|version]" >&2; exit 2 ;;
esac

lock_cache_dir "$DIR"
go_module_env

if [ -x "$GFD" ] && [ -x "$CHECKER" ]; then
  say "k8s-device-plugin $DP_VERSION: gpu-feature-discovery and dpconfig cached"
  echo "$DIR"; exit 0
fi

# The wrapper module: requires k8s-device-plugin at the pinned version; the checker is its main package.
W=$DIR/wrapper
if [ ! -f "$W/go.sum" ] || ! grep -q "$DP_MODULE $DP_VERSION" "$W/go.mod" 2>/dev/null; then
  say "k8s-device-plugin $DP_VERSION: resolving the module in a wrapper module"
  rm -rf "$W"; mkdir -p "$W"
  cp "$CHECKER_SRC" "$W/main.go"
  (cd "$W" && go mod init gpufleet.test/nvidia-oracle >/dev/null 2>&1 && go get "$DP_MODULE@$DP_VERSION" && go mod tidy)
fi
cp "$CHECKER_SRC" "$W/main.go"

if [ ! -x "$GFD" ]; then
  say "k8s-device-plugin $DP_VERSION: building gpu-feature-discovery (cgo; a few minutes on 2 cores)"
  mkdir -p "$DIR/bin"
  (cd "$W" && CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$GFD.tmp" "$DP_MODULE/cmd/gpu-feature-discovery")
  mv "$GFD.tmp" "$GFD"
fi
if [ ! -x "$CHECKER" ]; then
  say "k8s-device-plugin $DP_VERSION: building the device-plugin config checker (dpconfig)"
  rm -rf "$DIR"/dpconfig-*; mkdir -p "$(dirname "$CHECKER")"
  (cd "$W" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CHECKER.tmp" .)
  mv "$CHECKER.tmp" "$CHECKER"
fi
printf '%s@%s\n' "$DP_MODULE" "$DP_VERSION" > "$DIR/VERSION"
say "k8s-device-plugin $DP_VERSION: ready in $DIR"
echo "$DIR"
