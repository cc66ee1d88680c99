#!/usr/bin/env bash
# Build a real Kubernetes control plane from pinned Go modules (issue 22):
#   kube-apiserver, etcd, kube-scheduler, kube-controller-manager (k8s/go.mod: wrapper module that
#   requires k8s.io/kubernetes and replaces each ./staging module with its published v0.x release;
#   etcd's server module v3.6.x is the one k8s.io/kubernetes itself pins, so it shares the module),
#   and KWOK's controller (sigs.k8s.io/kwok/cmd/kwok, built with `go install pkg@version`: its
#   go.mod has no replaces).
# Into .cache/k8s/<k8s>-<etcd>-<kwok>/ (or $LLM_INFRA_K8S_CACHE/<...>); a binary already there is
# skipped, so a second run does nothing. Usage: k8s/build.sh [binary ...] (default: all five).
# Needs Go >= the `go` line of k8s/go.mod (1.24.0; KWOK v0.7.0 also asks 1.24.0) and the Go module
# proxy. Honours GO, GOFLAGS, GOMODCACHE, GOCACHE; e.g. on a shared 2-core machine:
#   GOFLAGS=-p=1 nice -n 19 k8s/build.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
go=${GO:-go}
kwok_version=v0.7.0

# Versions come from the wrapper's go.mod, so the cache key cannot drift from what is built.
mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
k8s_version=$(mod_version k8s.io/kubernetes)
etcd_version=$(mod_version go.etcd.io/etcd/server/v3)
if [[ -z $k8s_version || -z $etcd_version ]]; then
    echo "build.sh: cannot read the k8s.io/kubernetes / etcd versions from $here/go.mod" >&2
    exit 1
fi
out=${LLM_INFRA_K8S_CACHE:-$root/.cache/k8s}/$k8s_version-$etcd_version-$kwok_version

# Prebuilt binaries instead: $LLM_INFRA_K8S_BIN_DIR (what llm_infra/control_plane.py then uses).
if [[ -n ${LLM_INFRA_K8S_BIN_DIR:-} ]]; then
    for name in etcd kube-apiserver; do
        if [[ ! -x $LLM_INFRA_K8S_BIN_DIR/$name ]]; then
            echo "build.sh: LLM_INFRA_K8S_BIN_DIR=$LLM_INFRA_K8S_BIN_DIR has no $name" >&2
            exit 1
        fi
    done
    echo "k8s: using the prebuilt binaries in LLM_INFRA_K8S_BIN_DIR=$LLM_INFRA_K8S_BIN_DIR; nothing to build"
    exit 0
fi

k8s_minor=${k8s_version#v1.}
k8s_minor=${k8s_minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version"
kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version"

export CGO_ENABLED=0
# -modcacherw: a module cache that `rm -rf` can remove; -trimpath: no local paths in the binaries.
export GOFLAGS="${GOFLAGS:-} -modcacherw -trimpath -buildvcs=false"
# The machine's own Go (no silent toolchain download); it must satisfy go.mod's `go` line.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

build_one() {
    local name=$1 tmp start
    if [[ -x $out/$name ]]; then
        echo "k8s: $name already built in $out"
        return 0
    fi
    mkdir -p "$out"
    tmp=$(mktemp -d "$out/.build-$name.XXXXXX")
    start=$SECONDS
    echo "k8s: building $name ..."
    case $name in
    kube-apiserver | kube-controller-manager | kube-scheduler)
        (cd "$here" && "$go" build -ldflags "$k8s_ldflags" -o "$tmp/$name" "k8s.io/kubernetes/cmd/$name")
        ;;
    etcd)
        (cd "$here" && "$go" build -ldflags "$etcd_ldflags" -o "$tmp/$name" go.etcd.io/etcd/server/v3)
        ;;
    kwok)
        # Outside the wrapper module: `go install pkg@version` resolves KWOK's own go.mod.
        (cd "$tmp" && GOBIN="$tmp" "$go" install -ldflags "$kwok_ldflags" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version")
        ;;
    *)
        echo "build.sh: unknown binary $name" >&2
        rm -rf "$tmp"
        return 1
        ;;
    esac
    mv "$tmp/$name" "$out/$name" # atomic: a half-built binary never sits in $out
    rm -rf "$tmp"
    echo "k8s: built $name in $((SECONDS - start)) s"
}

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    # kube-apiserver first: it is the one the tests need.
    targets=(kube-apiserver etcd kube-scheduler kube-controller-manager kwok)
fi
for name in "${targets[@]}"; do
    build_one "$name"
done
echo "k8s: binaries in $out"
