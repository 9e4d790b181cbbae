#!/usr/bin/env bash
# Builds kuota-cluster (the control plane, kubectl and helm) once per source hash into a cache outside the
# repository and prints the binary's path.
# Everything is compiled here from the Go module proxy; nothing prebuilt is downloaded. Go keeps its own module
# and build caches (GOMODCACHE, GOCACHE), so a rebuild after a small change takes seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KUOTA_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kuota-cluster}"
if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: the Go toolchain (go) is not on PATH; kuota's end-to-end tests need it to build the control plane" >&2
  exit 3
fi
hash="$(cd "$here" && { go version; cat go.mod go.sum ./*.go kwok-stages.yaml build.sh; } | sha256sum | cut -c1-16)"
out="$cache/$hash/kuota-cluster"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
if [[ ! -x "$out" ]]; then
  mkdir -p "$cache/$hash"
  version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  minor="$(echo "$version" | cut -d. -f2)"
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  # `kuota-cluster helm version` reports the helm module's version, as upstream's release builds set it.
  helm_version="$(cd "$here" && go list -m -f '{{.Version}}' helm.sh/helm/v4)"
  ldflags="$ldflags -X helm.sh/helm/v4/internal/version.version=$helm_version"
  echo "build.sh: building kuota-cluster ($version) into $out; the first build takes a while" >&2
  (cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" .)
  mv "$out.tmp" "$out"
fi
echo "$out"
