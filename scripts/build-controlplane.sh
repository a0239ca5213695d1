#!/usr/bin/env bash
# Builds the real control plane from its Go modules: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl (k8s.io/kubernetes), and Kueue's manager (sigs.k8s.io/kueue), at the
# versions in controlplane/versions.env. Each component is cached by what built it (its go.mod,
# go.sum and sources, this script, the Go version) in $CACHE/<component>-<version>-<hash>/, so a
# second run builds nothing; $CACHE/bin holds the binaries of the last build (the folder
# `fleetval cluster up` reads), with versions.json and Kueue's release manifests rendered by kubectl's
# kustomize from the Kueue module's own config/default.
#
# Usage: scripts/build-controlplane.sh          build what is not cached; print the times
#        scripts/build-controlplane.sh --pin    rewrite the go.mod files from versions.env (then commit go.mod/go.sum)
# CACHE: $FLEETVAL_CONTROLPLANE_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/fleetval/controlplane.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/controlplane
cache=${FLEETVAL_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetval/controlplane}
# shellcheck source=/dev/null
source "$src/versions.env"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

command -v go >/dev/null || { echo "error: Go is not installed (the control plane is built from its Go modules)" >&2; exit 1; }

k8s_staging_version() { echo "v0.${KUBERNETES_VERSION#v1.}"; }  # v1.34.4 -> v0.34.4

pin() {
  (cd "$src/etcd" && go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" && GOFLAGS= go mod tidy)
  (cd "$src/kueue" && go mod edit -require="sigs.k8s.io/kueue@$KUEUE_VERSION" && GOFLAGS= go mod tidy)
  (
    cd "$src/kubernetes"
    go mod edit -require="k8s.io/kubernetes@$KUBERNETES_VERSION"
    # k8s.io/kubernetes points its staging modules at local folders: pin each at the matching v0.x.
    for m in $(go mod edit -json | python3 -c 'import json,sys; print("\n".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))'); do
      go mod edit -replace="$m=$m@$(k8s_staging_version)"
    done
    GOFLAGS= go mod tidy
  )
  echo "pinned: etcd $ETCD_VERSION, kubernetes $KUBERNETES_VERSION, kueue $KUEUE_VERSION (commit controlplane/*/go.mod and go.sum)"
}

check_pins() {  # go.mod must say what versions.env says
  local bad=""
  grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION\$" "$src/etcd/go.mod" || bad="$bad etcd"
  grep -q "sigs.k8s.io/kueue $KUEUE_VERSION\$" "$src/kueue/go.mod" || bad="$bad kueue"
  grep -q "^require k8s.io/kubernetes $KUBERNETES_VERSION\$" "$src/kubernetes/go.mod" || bad="$bad kubernetes"
  if grep -E '=> k8s.io/' "$src/kubernetes/go.mod" | grep -vq " $(k8s_staging_version)\$"; then bad="$bad kubernetes-staging"; fi
  if [ -n "$bad" ]; then
    echo "error: controlplane/versions.env and the go.mod of:$bad disagree; run $0 --pin" >&2
    exit 1
  fi
}

key_of() {  # what built a component: its module files, this script, the Go version
  (cd "$src/$1" && cat go.mod go.sum ./*.go; cat "$root/scripts/build-controlplane.sh"; go version) | sha256sum | cut -c1-12
}

if [ "${1:-}" = "--pin" ]; then pin; exit 0; fi
check_pins
mkdir -p "$cache"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
seconds_since() { local ms=$(( $(now_ms) - $1 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
total_start=$(now_ms)
built=""

build() {  # build COMPONENT VERSION PACKAGE... (binaries land in $cache/COMPONENT-VERSION-KEY)
  local component=$1 version=$2; shift 2
  local dir="$cache/$component-$version-$(key_of "$component")"
  dirs[$component]=$dir
  if [ -f "$dir/.complete" ]; then return; fi
  local start tmp ldflags=()
  start=$(now_ms)
  tmp=$(mktemp -d "$cache/.build-$component.XXXXXX")
  case $component in
  kubernetes)
    local minor=${version#v1.}; minor=${minor%%.*}
    local x=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      x="$x -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    ldflags=(-ldflags "-s -w$x") ;;
  kueue) ldflags=(-ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version") ;;
  *) ldflags=(-ldflags "-s -w") ;;
  esac
  echo "controlplane: building $component $version (go build $*)" >&2
  (cd "$src/$component" && go mod download && go build -trimpath "${ldflags[@]}" -o "$tmp/" "$@")
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  # Older builds of this component go: the cache holds one per component.
  find "$cache" -maxdepth 1 -name "$component-*" ! -path "$dir" -exec rm -rf {} +
  echo "controlplane: $component $version built in $(seconds_since "$start") s" >&2
  built="$built $component"
}

declare -A dirs
build etcd "$ETCD_VERSION" .
build kubernetes "$KUBERNETES_VERSION" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue
etcd_dir=${dirs[etcd]} k8s_dir=${dirs[kubernetes]} kueue_dir=${dirs[kueue]}

if [ ! -s "$kueue_dir/kueue-manifests.yaml" ]; then
  # Kueue's release manifests are its config/default rendered by kustomize (kubectl's, built above).
  kueue_src=$(cd "$src/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  "$k8s_dir/kubectl" kustomize "$kueue_src/config/default" >"$kueue_dir/kueue-manifests.yaml.tmp"
  mv "$kueue_dir/kueue-manifests.yaml.tmp" "$kueue_dir/kueue-manifests.yaml"
fi

bin=$cache/bin
mkdir -p "$bin"
ln -sfn "$etcd_dir/etcd" "$bin/etcd"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do ln -sfn "$k8s_dir/$b" "$bin/$b"; done
ln -sfn "$kueue_dir/kueue" "$bin/kueue"
ln -sfn "$kueue_dir/kueue-manifests.yaml" "$bin/kueue-manifests.yaml"
printf '{"etcd": "%s", "kubernetes": "%s", "kueue": "%s"}\n' "$ETCD_VERSION" "$KUBERNETES_VERSION" "$KUEUE_VERSION" >"$bin/versions.json"

took=$(seconds_since "$total_start")
if [ -n "$built" ]; then
  echo "controlplane: built$built in $took s; binaries in $bin"
else
  echo "controlplane: every component cached ($took s); binaries in $bin"
fi
