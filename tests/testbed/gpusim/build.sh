#!/usr/bin/env bash
# Build the simulated NVML library (libnvidia-ml.so.1) from src/*.c into a cache dir keyed by the
# sources' hash, and print that dir (put it on LD_LIBRARY_PATH). A present build is not rebuilt.
#   tests/testbed/gpusim/build.sh          build if needed, print the dir
#   tests/testbed/gpusim/build.sh path     print the dir only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
CC=${CC:-gcc}
hash=$(cat "$here"/src/*.c "$here/build.sh" | sha256sum | cut -c1-16)
out="$CACHE_ROOT/gpusim/$hash"
if [ "${1:-}" = path ]; then echo "$out"; exit 0; fi
if [ ! -f "$out/libnvidia-ml.so.1" ]; then
  command -v "$CC" >/dev/null || { echo "gpusim build: $CC not found (apt-get install gcc)" >&2; exit 1; }
  mkdir -p "$out"
  tmp=$(mktemp "$out/.libnvidia-ml.XXXXXX")
  # -fvisibility=hidden: only EXPORT-marked NVML symbols are visible, so pynvml sees FUNCTION_NOT_FOUND for the rest.
  "$CC" -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-format-truncation -fPIC -shared -fvisibility=hidden -pthread \
    -Wl,-soname,libnvidia-ml.so.1 -o "$tmp" "$here"/src/*.c
  chmod 0755 "$tmp" && mv -f "$tmp" "$out/libnvidia-ml.so.1"
  ln -sfn libnvidia-ml.so.1 "$out/libnvidia-ml.so"
fi
echo "$out"
