# shellcheck shell=bash
# Shared by the testbed build scripts (sourced): progress lines, and one build at a time per cache folder.

say() { printf '[testbed-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# lock_cache_dir DIR: create DIR and hold its build lock (fd 9) until the script exits, so parallel test sessions
# wait for one build instead of racing it.
lock_cache_dir() {
  mkdir -p "$1"
  exec 9>"$1/.build.lock"
  flock 9
}

# Go modules built from the module proxy: the local toolchain only, and go.mod updated as needed.
go_module_env() { export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false"; }
