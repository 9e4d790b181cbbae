#!/usr/bin/env bash
# Moves testing/cluster to another Kubernetes release: `./update-kubernetes.sh v1.37.3`.
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with folders of its own
# repository, so a module that requires it must replace each of them with its published tag, v0.MINOR.PATCH.
# The list is read from that release's own go.mod (through the Go module proxy), not written by hand.
set -euo pipefail
cd "$(dirname "$0")"
version="${1:?usage: update-kubernetes.sh vMAJOR.MINOR.PATCH}"
staging_version="v0.${version#v1.}"
gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
modules="$(sed -n '/^replace (/,/^)/p' "$gomod" | awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}')"
{
  sed '/^replace (/,/^)/d' go.mod | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
  echo
  echo "replace ("
  for module in $modules; do
    # Only modules published at this tag can be replaced (sample-* are examples nobody publishes).
    if go list -m -json "$module@$staging_version" >/dev/null 2>&1; then
      printf '\t%s => %s %s\n' "$module" "$module" "$staging_version"
    fi
  done
  echo ")"
} > go.mod.new
mv go.mod.new go.mod
go mod edit -require="k8s.io/kubernetes@$version"
go mod tidy
echo "update-kubernetes.sh: k8s.io/kubernetes $version, staging modules at $staging_version; run build.sh" >&2
