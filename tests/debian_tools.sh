#!/usr/bin/env bash
# Real tools for the tests, from Debian's archive, without installing anything:
#   tests/debian_tools.sh SUITE PACKAGE[,PACKAGE...] FILE
# prints the absolute path of FILE (a path inside the packages, e.g. usr/bin/containerd) of the Debian
# packages as Debian SUITE has them (trixie, sid, ...; `host`: this machine's own release), unpacked
# together with dpkg-deb -x under $LLM_INFRA_DEBIAN_CACHE (default: <repo>/.cache/debian)/SUITE/PACKAGES/.
# Only the ordinary clients: apt-get update + apt-get download with lists of their own under
# SUITE/apt/ (the machine's apt sources and dpkg database are not touched, no root needed), then
# dpkg-deb. Once unpacked, a call prints the path without the network. When the packages carry
# shared libraries (systemd's tools need libsystemd-shared's), the path printed is a wrapper that sets
# LD_LIBRARY_PATH to them; other libraries come from the machine (exit 3 when it lacks some).
# Exit status: 0 the path is printed; 3 not possible on this machine (not Debian: no apt-get,
# dpkg-deb or Debian archive keyring, or shared libraries the file needs); 4 Debian's archive cannot be reached; 1 anything else (the
# package or the file is not in that suite). The reason is one line on stderr.
# Environment: LLM_INFRA_DEBIAN_CACHE, LLM_INFRA_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 SUITE PACKAGE[,PACKAGE...] FILE" >&2
  exit 1
fi
suite=$1 package=$2 file=${3#/}
IFS=, read -ra packages <<<"$package"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${LLM_INFRA_DEBIAN_CACHE:-$(dirname "$here")/.cache/debian}
mirror=${LLM_INFRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

cannot() {
  echo "debian_tools: $*" >&2
  exit 3
}
unreachable() {
  echo "debian_tools: $*" >&2
  exit 4
}
fail() {
  echo "debian_tools: $*" >&2
  exit 1
}

if [[ $suite == host ]]; then
  # shellcheck source=/dev/null
  suite=$(. /etc/os-release 2>/dev/null && [[ ${ID:-} == debian ]] && echo "${VERSION_CODENAME:-}") || true
  [[ -n $suite ]] || cannot "this machine is not Debian (/etc/os-release), so there is no host suite"
fi
dest=$cache/$suite/$package
unpacked=$dest/root

print() {
  [[ -e $unpacked/$file ]] || fail "$package from Debian $suite has no /$file"
  local libs
  libs=$(find "$unpacked" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) -printf '%h\n' | sort -u | paste -sd:)
  if [[ -z $libs ]]; then
    echo "$unpacked/$file"
    return
  fi
  local wrapper=$dest/bin/${file##*/} missing
  mkdir -p "$dest/bin"
  # shellcheck disable=SC2016 # $LD_LIBRARY_PATH and $@ are the wrapper's, expanded when it runs
  printf '#!/bin/sh\nLD_LIBRARY_PATH='"'%s'"'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec '"'%s'"' "$@"\n' \
    "$libs" "$unpacked/$file" >"$wrapper.new"
  chmod +x "$wrapper.new"
  mv "$wrapper.new" "$wrapper"
  missing=$(LD_LIBRARY_PATH=$libs ldd "$unpacked/$file" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd' ')
  [[ -z $missing ]] || cannot "/$file of Debian $suite's $package needs libraries this machine lacks: $missing"
  echo "$wrapper"
}

if [[ -f $dest/.done ]]; then
  print
  exit 0
fi

for tool in apt-get dpkg-deb flock; do
  command -v "$tool" >/dev/null || cannot "no $tool on this machine (not Debian); cannot get $package from Debian $suite"
done
[[ -r $keyring ]] || cannot "no Debian archive keyring ($keyring); cannot get $package from Debian $suite"

apt=$cache/$suite/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/state" "$dest"
exec 9>"$cache/$suite/.lock"
flock 9 # one download at a time per suite (tests may run in parallel)
if [[ -f $dest/.done ]]; then
  print
  exit 0
fi

echo "deb [signed-by=$keyring] $mirror $suite main" >"$apt/sources.list"
options=(
  -q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
  -o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists" -o Dir::State::status=/dev/null
  -o "Dir::Cache=$apt/cache" -o Acquire::Languages=none -o Acquire::Retries=1
  -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
)
if [[ $(id -u) == 0 ]]; then
  options+=(-o APT::Sandbox::User=root) # root: apt would hand the download to _apt, who cannot write here
fi

# Fresh lists each time a package is fetched: a suite like sid drops superseded .debs from its pool.
if ! log=$(apt-get "${options[@]}" update 2>&1) || [[ -z $(find "$apt/lists" -name '*_Packages*' -print -quit) ]]; then
  unreachable "cannot read Debian $suite's package lists from $mirror: $(grep -E '^(E|W):' <<<"$log" | head -1)"
fi
rm -rf "$dest"/*.deb "$unpacked"
versions=()
for pkg in "${packages[@]}"; do
  version=$(apt-cache "${options[@]}" policy "$pkg" | awk '$1 == "Candidate:" {print $2}')
  [[ -n $version && $version != "(none)" ]] || fail "Debian $suite has no package $pkg"
  if ! log=$(cd "$dest" && apt-get "${options[@]}" download "$pkg=$version" 2>&1); then
    if grep -qE 'Failed to fetch|Could not resolve|Temporary failure|Connection' <<<"$log"; then
      unreachable "cannot download $pkg $version from Debian $suite: $(grep -E '^(E|W):' <<<"$log" | head -1)"
    fi
    fail "apt-get download $pkg=$version (Debian $suite) failed: $(grep -E '^E:' <<<"$log" | head -1)"
  fi
  versions+=("$pkg=$version")
done
for deb in "$dest"/*.deb; do
  dpkg-deb -x "$deb" "$unpacked"
done
rm -rf "$dest"/*.deb "$apt/lists" "$apt/cache" # ~40 MB, and read afresh for the next download anyway
echo "${versions[*]}" >"$dest/.done"
print
