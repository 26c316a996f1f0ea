#!/usr/bin/env bash
# Build the testbed's real Kubernetes control plane, etcd, kwok and helm from Go modules.
# Binaries are cached outside the repository, keyed by version; a present binary is not rebuilt.
# Recipe and its risks: shared/reference/k8s-testbed-from-go-modules.md (§1.2 wrapper module, §2 etcd, §8).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}

CACHE_ROOT=${GPUFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet}
BIN=${TESTBED_BIN:-$CACHE_ROOT/testbed/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-helm-$HELM_VERSION/bin}
mkdir -p "$BIN"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

say() { printf '[testbed-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
have() { [ -x "$BIN/$1" ]; }

staging=v0.${K8S_VERSION#v1.}
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

build_kube() {
  if have kube-apiserver && have kube-controller-manager && have kube-scheduler && have kubectl; then
    say "kubernetes $K8S_VERSION: cached"; return
  fi
  say "kubernetes $K8S_VERSION: resolving wrapper module"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  printf 'module local/k8sbuild\n\ngo 1.26.0\n' > go.mod
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  while read -r g; do go mod edit -godebug="$g"; done < <(sed -n 's/^godebug[[:space:]]*//p' "$upstream_mod")
  while read -r m; do
    go mod edit -replace="$m=$m@$staging"
  done < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$upstream_mod")
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local tools=()
  for c in "${cmds[@]}"; do tools+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
  go get -tool "${tools[@]}"
  go mod tidy
  local ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldflags+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "${cmds[@]}"; do
    if have "$c"; then continue; fi
    say "kubernetes $K8S_VERSION: building $c (several minutes on 2 cores)"
    go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$BIN/$c.tmp" "$BIN/$c"
  done
}

build_etcd() {
  if have etcd; then say "etcd $ETCD_VERSION: cached"; return; fi
  say "etcd $ETCD_VERSION: building"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  printf 'module local/etcdbuild\n\ngo 1.26.0\n' > go.mod
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_kwok() {
  if have kwok && have kwokctl; then say "kwok $KWOK_VERSION: cached"; return; fi
  say "kwok $KWOK_VERSION: building kwok and kwokctl"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
}

build_helm() {
  if have helm; then say "helm $HELM_VERSION: cached"; return; fi
  say "helm $HELM_VERSION: building"
  local major=${HELM_VERSION%%.*}
  GOBIN="$BIN" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
}

# Fail loudly if version stamping broke: Helm checks charts' kubeVersion against the server's gitVersion.
check_versions() {
  "$BIN/kube-apiserver" --version | grep -qx "Kubernetes $K8S_VERSION" \
    || { say "kube-apiserver reports '$("$BIN/kube-apiserver" --version)', expected Kubernetes $K8S_VERSION"; exit 1; }
  "$BIN/helm" version --short | grep -q "^$HELM_VERSION" \
    || { say "helm reports '$("$BIN/helm" version --short)', expected $HELM_VERSION"; exit 1; }
}

case "${1:-all}" in
  path) echo "$BIN"; exit 0 ;;
esac
# One build per binaries directory at a time (concurrent `make` runs would race on the .tmp files).
exec 9>"$BIN/.build.lock"
flock 9
case "${1:-all}" in
  all) build_kwok; build_helm; build_etcd; build_kube; check_versions ;;
  *) "build_$1" ;;
esac
say "binaries ready in $BIN"
echo "$BIN"
