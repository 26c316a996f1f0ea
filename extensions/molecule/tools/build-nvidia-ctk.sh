#!/usr/bin/env bash
# Build NVIDIA's nvidia-ctk from its Go module at a pinned version into the cache and print the binary's path.
# The Molecule scenarios copy this real binary into the Debian root filesystems, because NVIDIA's package
# repositories cannot be reached from the test machines.
set -euo pipefail
NVIDIA_CTK_VERSION="${NVIDIA_CTK_VERSION:-v1.20.0}"   # toolkit version the GPU Operator v26.7.0 chart deploys
cache="${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}/molecule/nvidia-ctk/${NVIDIA_CTK_VERSION}"
bin="${cache}/nvidia-ctk"
if [[ ! -x "${bin}" ]]; then
  command -v go >/dev/null || { echo "build-nvidia-ctk: Go toolchain not found on PATH" >&2; exit 1; }
  mkdir -p "${cache}"
  echo "build-nvidia-ctk: building nvidia-ctk ${NVIDIA_CTK_VERSION} (one CPU, low priority)" >&2
  # One compile job at a time: CI machines are small and other builds run alongside.
  GOTOOLCHAIN=local GOBIN="${cache}.tmp" GOFLAGS="-p=1 -trimpath" GOMAXPROCS=1 nice -n 10 \
    go install "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@${NVIDIA_CTK_VERSION}" >&2
  mv "${cache}.tmp/nvidia-ctk" "${bin}"
  rmdir "${cache}.tmp"
fi
echo "${bin}"
