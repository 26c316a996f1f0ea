#!/usr/bin/env bash
# Lifecycle of one Molecule instance: a Debian root filesystem reached with Ansible's chroot connection.
#   rootfs.sh up   DIR TARBALL APT_CACHE   extract a fresh copy, mount /proc, bind the shared apt archive cache
#   rootfs.sh down DIR                     unmount everything below DIR, then delete DIR
# Only paths below DIR are ever mounted or removed; the host's own /etc, /dev and /proc are never written.
set -euo pipefail

mounts_below() {  # deepest first, so nested mounts come off before their parents
  findmnt -rn -o TARGET | awk -v d="$1/" 'index($0, d) == 1' | sort -r
}

down() {
  local dir="$1"
  [[ -d "${dir}" ]] || return 0
  local m
  for m in $(mounts_below "${dir}"); do umount "${m}" || umount -l "${m}"; done
  if [[ -n "$(mounts_below "${dir}")" ]]; then
    echo "rootfs: still mounted below ${dir}, refusing to delete it" >&2
    exit 1
  fi
  # --one-file-system: even a mount missed above can never be descended into.
  rm -rf --one-file-system "${dir}"
}

up() {
  local dir="$1" tarball="$2" apt_cache="$3"
  [[ -s "${tarball}" ]] || { echo "rootfs: no tarball at ${tarball}" >&2; exit 1; }
  down "${dir}"
  mkdir -p "${dir}" "${apt_cache}/partial"
  tar -C "${dir}" --numeric-owner -xzf "${tarball}"
  mount -t proc proc "${dir}/proc"
  mount --bind "${apt_cache}" "${dir}/var/cache/apt/archives"
  # Name resolution for apt inside the chroot: a copy of the host's resolver config (read, never written).
  cp -L /etc/resolv.conf "${dir}/etc/resolv.conf"
  # Package scripts must not start services: nothing runs systemd inside a chroot (see policy-rc.d(8) in sysv-rc docs).
  printf '#!/bin/sh\nexit 101\n' > "${dir}/usr/sbin/policy-rc.d"
  chmod 0755 "${dir}/usr/sbin/policy-rc.d"
}

case "${1:-}" in
  up) shift; [[ $# -eq 3 ]] || { echo "usage: rootfs.sh up DIR TARBALL APT_CACHE" >&2; exit 2; }; up "$@" ;;
  down) shift; [[ $# -eq 1 ]] || { echo "usage: rootfs.sh down DIR" >&2; exit 2; }; down "$1" ;;
  *) echo "usage: rootfs.sh up|down ..." >&2; exit 2 ;;
esac
