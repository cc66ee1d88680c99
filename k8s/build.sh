#!/usr/bin/env bash
# Build a real Kubernetes control plane and the operators we deploy from pinned Go modules (issue 22):
#   kube-apiserver, etcd, kube-scheduler, kube-controller-manager (k8s/go.mod: wrapper module that
#   requires k8s.io/kubernetes and replaces each ./staging module with its published v0.x release;
#   etcd's server module v3.6.x is the one k8s.io/kubernetes itself pins, so it shares the module),
#   and, with `go install pkg@version` (their go.mod files have no replace directives): KWOK's
#   controller (sigs.k8s.io/kwok/cmd/kwok), the Kubeflow training operator v1
#   (github.com/kubeflow/training-operator/cmd/training-operator.v1) and the KubeRay operator
#   (github.com/ray-project/kuberay/ray-operator, main package at the module root), and Kueue's controller
#   (sigs.k8s.io/kueue/cmd/kueue: its own graph, k8s.io modules v0.35) into a folder of its own beside
#   the others (kueue-build-dir of --versions), so that adding or bumping it rebuilds nothing else.
# The versions (pinned in llm_infra/versions.py) and the folder come from `python -m llm_infra.rehearsal.control_plane
# --versions`: .cache/k8s/<k8s>-<etcd>-<kwok>-training-operator-<v>-kuberay-<v>/ (or under
# $LLM_INFRA_K8S_CACHE), each operator's CRDs (from its own module) into crds/<operator>/ there; a
# binary already there is skipped, so a second run does nothing.
# Usage: k8s/build.sh [binary ...] (default: all eight).
# Needs Go >= 1.26, the highest `go` line of the modules built (k8s/go.mod and KWOK v0.7.0: 1.24.0;
# KubeRay v1.7.0: 1.26.0, its fallback v1.6.0: 1.25.0; Kueue v0.17.0: 1.25.0), python3 (stdlib only; $PYTHON), and the Go module
# proxy. Honours GO, PYTHON, GOFLAGS, GOMODCACHE, GOCACHE, GOPROXY; e.g. on a shared 2-core machine:
#   GOFLAGS=-p=1 nice -n 19 k8s/build.sh
# A module version the proxy will not serve can come from a git checkout of its tag instead:
# k8s/module_from_git.sh (the result is checked against sum.golang.org).
# KubeRay: when the pinned version cannot be built (this module proxy refuses v1.7.0's zip with a 403;
# or a Go older than its `go` line), the next-best real one, `kuberay-operator-fallback` of --versions
# (v1.6.0), is built instead, with its own CRDs, into the same folder, and one line says so and why. The
# binary's Go build info records which version it is (`go version -m`; control_plane.built_version), and
# every later run tries the pinned one again and replaces the fallback once it can be downloaded.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
go=${GO:-go}

# One place for the versions: llm_infra/versions.py; for the folder name: llm_infra/rehearsal/control_plane.py.
declare -A version
while read -r name value; do
    version[$name]=$value
done < <(cd "$root" && "${PYTHON:-python3}" -m llm_infra.rehearsal.control_plane --versions)
out=${version[build-dir]:?build.sh: no build-dir from python -m llm_infra.rehearsal.control_plane --versions}

# k8s.io/kubernetes and etcd are built from k8s/go.mod: it must pin what the folder name says.
mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
for pair in k8s:k8s.io/kubernetes etcd:go.etcd.io/etcd/server/v3; do
    name=${pair%%:*} module=${pair#*:}
    if [[ $(mod_version "$module") != "${version[$name]}" ]]; then
        echo "build.sh: $here/go.mod pins $module $(mod_version "$module"), llm_infra/versions.py" \
            "says ${version[$name]}; regenerate go.mod with k8s/gen_gomod.sh or fix the constant" >&2
        exit 1
    fi
done

# Prebuilt binaries instead: $LLM_INFRA_K8S_BIN_DIR (what llm_infra/rehearsal/control_plane.py then uses).
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

k8s_version=${version[k8s]}
k8s_minor=${k8s_version#v1.}
k8s_minor=${k8s_minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-${version[etcd]}"
kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${version[kwok]}"
# The two operators have no version variable to set: KubeRay's version is a constant in its source
# (utils.KUBERAY_VERSION), the training operator prints none.

export CGO_ENABLED=0
# -modcacherw: a module cache that `rm -rf` can remove; -trimpath: no local paths in the binaries.
export GOFLAGS="${GOFLAGS:-} -modcacherw -trimpath -buildvcs=false"
# The machine's own Go (no silent toolchain download); it must satisfy each go.mod's `go` line.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

# Outside the wrapper module: `go install pkg@version` resolves the module's own go.mod.
go_install() {
    local tmp=$1 name=$2 ldflags=$3 pkg=$4 built
    if ! (cd "$tmp" && GOBIN="$tmp" "$go" install -ldflags "$ldflags" "$pkg"); then
        echo "build.sh: go install $pkg failed. If the module proxy refused the version" \
            "(\"403 ... This module version is not available\"), put it into the module cache from a git" \
            "checkout of its tag with k8s/module_from_git.sh (checked against sum.golang.org), then rerun." >&2
        return 1
    fi
    built=$(basename "${pkg%@*}")
    if [[ $built != "$name" ]]; then
        mv "$tmp/$built" "$tmp/$name"
    fi
}

# Why MODULE@VERSION cannot be downloaded, on one line (go's own error); nothing when it can.
download_error() {
    local dir=$1 spec=$2 json
    if json=$(cd "$dir" && "$go" mod download -json "$spec" 2>"$dir/download.err"); then
        return 0
    fi
    "${PYTHON:-python3}" -c 'import json, sys; print(" ".join(json.load(sys.stdin)["Error"].split()))' <<<"$json" \
        2>/dev/null || tr -s '\n\t' '  ' <"$dir/download.err"
}

# The version of the module a Go binary was built from (its build info's `mod` line).
built_version() { "$go" version -m "$1" 2>/dev/null | awk '$1 == "mod" {print $3; exit}'; }

# An operator's CRDs from its own module at the version built (already in the module cache), into
# $tmp/crds: llm_infra/rehearsal/control_plane.py applies them before it starts the operator.
copy_crds() {
    local tmp=$1 module=$2 dir file
    shift 2
    dir=$(cd "$tmp" && "$go" mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    mkdir "$tmp/crds"
    for file in "$@"; do
        install -m 0644 "$dir/$file" "$tmp/crds/"
    done
}

# A build that fails leaves no half-built folder behind.
building=""
trap 'if [[ -n $building ]]; then rm -rf "$building"; fi' EXIT

# KubeRay's operator at version $2 into $1 (the main package is the module root), with its CRDs.
# Its RayCluster, RayJob and RayService controllers always start; RayCronJob's is behind a feature gate.
kuberay_module=github.com/ray-project/kuberay/ray-operator
build_kuberay() {
    go_install "$1" kuberay-operator "-s -w" "$kuberay_module@$2" &&
        copy_crds "$1" "$kuberay_module@$2" config/crd/bases/ray.io_{rayclusters,rayjobs,rayservices}.yaml
}
fallbacks="" # what the last line repeats

build_one() {
    local name=$1 tmp start module why out=$out
    if [[ $name == kueue ]]; then
        out=${version[kueue-build-dir]}
    fi
    if [[ -x $out/$name ]]; then
        if [[ -z ${version[$name-fallback]:-} || $(built_version "$out/$name") != "${version[$name-fallback]}" ]]; then
            echo "k8s: $name already built in $out"
            return 0
        fi
        # The fallback: kept only while the pinned version still cannot be downloaded.
        tmp=$(mktemp -d)
        why=$(download_error "$tmp" "$kuberay_module@${version[$name]}")
        rm -rf "$tmp"
        if [[ -n $why ]]; then
            echo "k8s: FALLBACK: $name ${version[$name-fallback]} already built in $out, not the pinned" \
                "${version[$name]}, which still cannot be downloaded: $why"
            fallbacks+=" $name ${version[$name-fallback]} (pinned ${version[$name]} not buildable)"
            return 0
        fi
        echo "k8s: the pinned $name ${version[$name]} can be downloaded now: it replaces the fallback" \
            "${version[$name-fallback]} in $out"
    fi
    mkdir -p "$out"
    tmp=$(mktemp -d "$out/.build-$name.XXXXXX")
    building=$tmp
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
        go_install "$tmp" "$name" "$kwok_ldflags" "sigs.k8s.io/kwok/cmd/kwok@${version[kwok]}"
        ;;
    training-operator)
        # Only the PyTorchJob controller runs (control_plane.py: --enable-scheme=pytorchjob), so only its CRD.
        module=github.com/kubeflow/training-operator@${version[training-operator]}
        go_install "$tmp" "$name" "-s -w" "${module%@*}/cmd/training-operator.v1@${module#*@}"
        copy_crds "$tmp" "$module" manifests/base/crds/kubeflow.org_pytorchjobs.yaml
        ;;
    kuberay-operator)
        why=$(download_error "$tmp" "$kuberay_module@${version[$name]}")
        if [[ -z $why ]] && ! build_kuberay "$tmp" "${version[$name]}"; then
            why="go install $kuberay_module@${version[$name]} failed (its output above)"
        fi
        if [[ -n $why ]]; then
            echo "k8s: FALLBACK: $name ${version[$name-fallback]} (the newest release the proxy serves below it," \
                "with its own CRDs) instead of the pinned ${version[$name]}, which cannot be built: $why" \
                "(k8s/module_from_git.sh can supply ${version[$name]}; the next k8s/build.sh then replaces the fallback)"
            rm -rf "${tmp:?}"/*
            build_kuberay "$tmp" "${version[$name-fallback]}"
            fallbacks+=" $name ${version[$name-fallback]} (pinned ${version[$name]} not buildable)"
        fi
        ;;
    kueue)
        # Its CRDs and webhook manifests come from the same module too: `make crds` copies them (pinned by
        # sha256, llm_infra/rehearsal/crds.py), so they need no build.
        go_install "$tmp" "$name" "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version[kueue]}" \
            "sigs.k8s.io/kueue/cmd/kueue@${version[kueue]}"
        ;;
    *)
        echo "build.sh: unknown binary $name" >&2
        return 1
        ;;
    esac
    if [[ -d $tmp/crds ]]; then # before the binary: a binary in $out means its CRDs are there too
        mkdir -p "$out/crds"
        rm -rf "${out:?}/crds/$name"
        mv "$tmp/crds" "$out/crds/$name"
    fi
    mv "$tmp/$name" "$out/$name" # atomic: a half-built binary never sits in $out
    rm -rf "$tmp"
    building=""
    echo "k8s: built $name in $((SECONDS - start)) s"
}

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    # kube-apiserver first: it is the one the tests need.
    targets=(kube-apiserver etcd kube-scheduler kube-controller-manager kwok training-operator kuberay-operator kueue)
fi
for name in "${targets[@]}"; do
    build_one "$name"
done
echo "k8s: binaries in $out and ${version[kueue-build-dir]}${fallbacks:+; FALLBACK:$fallbacks (see above)}"
