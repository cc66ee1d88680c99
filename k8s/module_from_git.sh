#!/usr/bin/env bash
# Put one module version into the Go module cache from a git checkout of its tag, for a module
# proxy that refuses that version's zip (this machine's proxy answers "403 ... This module version is
# not available" for github.com/ray-project/kuberay/ray-operator v1.7.0, though it serves the .info,
# the .mod and older releases). Go itself makes the zip and checks it against sum.golang.org (through
# the proxy), so what lands in the cache is byte-for-byte the published release or nothing.
# Usage: k8s/module_from_git.sh github.com/OWNER/REPO[/SUBDIR]@vX.Y.Z GIT_DIR
#   e.g. k8s/module_from_git.sh github.com/ray-project/kuberay/ray-operator@v1.7.0 ~/src/kuberay/.git
# GIT_DIR (a clone, bare or not) needs the tag (SUBDIR/vX.Y.Z) and that commit's SUBDIR tree; no
# network. Honours GO, GOMODCACHE, GOFLAGS; then run k8s/build.sh as usual (with the same GOMODCACHE).
# Without it k8s/build.sh builds KubeRay's fallback release (llm_infra/versions.py,
# KUBERAY_FALLBACK_VERSION) and says so; once the pinned version is in the module cache, the next
# k8s/build.sh replaces that fallback with it.
set -euo pipefail

spec=${1:?usage: k8s/module_from_git.sh MODULE@VERSION GIT_DIR}
git_dir=$(cd "${2:?usage: k8s/module_from_git.sh MODULE@VERSION GIT_DIR}" && pwd)
go=${GO:-go}
module=${spec%@*} version=${spec#*@}
IFS=/ read -r host owner repo subdir <<<"$module"
if [[ $host != github.com || -z $repo || $version == "$spec" ]]; then
    echo "module_from_git.sh: want github.com/OWNER/REPO[/SUBDIR]@VERSION, got $spec" >&2
    exit 1
fi
if [[ $("$go" env GOSUMDB) == off ]]; then
    echo "module_from_git.sh: GOSUMDB=off: refusing, the checksum database is what proves the zip" >&2
    exit 1
fi
tag=${subdir:+$subdir/}$version
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo_dir=$work/repo run_dir=$work/run
mkdir "$repo_dir" "$run_dir"

# A one-commit repository with the tag's module tree, and the repository's LICENSE when the module
# folder has none (Go's module zip of a subfolder adds it). Only file content counts in the h1: hash.
git -C "$git_dir" archive --format=tar "$tag" ${subdir:+"$subdir"} | tar -x -C "$repo_dir"
if [[ -n $subdir && ! -e $repo_dir/$subdir/LICENSE ]] && git -C "$git_dir" cat-file -e "$tag:LICENSE" 2>/dev/null; then
    git -C "$git_dir" show "$tag:LICENSE" >"$repo_dir/LICENSE"
fi
git_repo=(git -C "$repo_dir" -c user.name=module_from_git -c user.email=none -c commit.gpgsign=false)
"${git_repo[@]}" init -q
"${git_repo[@]}" add -A
"${git_repo[@]}" commit -q -m "$spec"
"${git_repo[@]}" tag "$tag"

# Fetch it "direct" (git) from that repository instead of github.com; GONOSUMDB and GOPRIVATE stay
# empty, so the checksum database still vouches for the result.
cd "$run_dir" # outside any module
GOPRIVATE='' GONOSUMDB='' GONOPROXY="$host/$owner/$repo" GOFLAGS="${GOFLAGS:-} -modcacherw" \
    GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.file://$repo_dir.insteadOf" GIT_CONFIG_VALUE_0="https://$host/$owner/$repo" \
    "$go" mod download -json "$spec" | tee "$run_dir/download.json"
if grep -q '"Error"' "$run_dir/download.json"; then
    exit 1
fi
echo "module_from_git.sh: $spec is in the module cache, its hash checked against sum.golang.org"
