#!/usr/bin/env bash
# Make (once) a minimal Debian root filesystem with debootstrap and cache it as a tarball; print the tarball path.
# Molecule's create step extracts a fresh copy per run, so warm runs cost seconds, not a debootstrap.
# Usage: build-rootfs.sh [SUITE]   (env: GPUFLEET_DEBIAN_MIRROR, GPUFLEET_CACHE)
set -euo pipefail
suite="${1:-bookworm}"
# The Debian archive the machine's own apt sources use (deb822 "URIs:" or one-line "deb" entries; not the security
# archive), so the rootfs comes from a mirror known to be reachable; deb.debian.org when none is found.
host_debian_mirror() {
  grep -h -E '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
      2>/dev/null \
    | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1}' \
    | grep -E '/debian/?$' | grep -v -- '-security' | head -n 1 || true
}
mirror="${GPUFLEET_DEBIAN_MIRROR:-$(host_debian_mirror)}"
mirror="${mirror:-http://deb.debian.org/debian}"
# python3 + python3-apt: Ansible modules run inside the chroot; systemd: unit enablement is checked for real;
# initramfs-tools + kmod: the nouveau blacklist handler rebuilds a real initramfs config;
# containerd: a real runtime config for the toolkit role; gnupg: apt keyring handling.
include="python3,python3-apt,systemd,initramfs-tools,kmod,containerd,gnupg"
key="$(printf '%s|%s|%s' "${suite}" "${mirror}" "${include}" | sha256sum | cut -c1-12)"
cache="${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}/molecule/rootfs"
tarball="${cache}/${suite}-minbase-${key}.tar.gz"
if [[ ! -s "${tarball}" ]]; then
  [[ "$(id -u)" == 0 ]] || { echo "build-rootfs: debootstrap needs root" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "build-rootfs: debootstrap not installed (make molecule-deps)" >&2; exit 1; }
  mkdir -p "${cache}"
  work="$(mktemp -d "${cache}/.work-XXXXXX")"
  # debootstrap mounts /proc and /sys inside the target itself; make sure nothing stays mounted on any exit.
  cleanup() {
    for m in $(findmnt -rn -o TARGET | grep -F "${work}/" | sort -r); do umount -l "${m}" || true; done
    rm -rf --one-file-system "${work}"
  }
  trap cleanup EXIT
  echo "build-rootfs: debootstrap --variant=minbase ${suite} from ${mirror}" >&2
  nice -n 10 debootstrap --variant=minbase --include="${include}" "${suite}" "${work}/tree" "${mirror}" >&2
  # Keep downloaded .debs out of the image: the scenarios bind a shared apt archive cache instead.
  rm -f "${work}/tree/var/cache/apt/archives/"*.deb
  tar -C "${work}/tree" --numeric-owner -czf "${work}/rootfs.tar.gz" .
  mv "${work}/rootfs.tar.gz" "${tarball}"
fi
echo "${tarball}"
