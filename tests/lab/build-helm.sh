#!/usr/bin/env bash
# Builds the Helm CLI from the pinned Go module in tests/lab/helm (the one
# the chart tests and the lab's Helm install run), cached under
# $STRAIT_LAB_CACHE (default ~/.cache/strait-lab) and keyed on that module:
# a warm run builds nothing. Apart from tests/lab/build.sh so that a new
# Helm pin rebuilds Helm alone. Prints the path of the binary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="$here/helm"
cache="${STRAIT_LAB_CACHE:-$HOME/.cache/strait-lab}"
key="$(sha256sum "$module/go.mod" "$module/go.sum" "$module/tools.go" | sha256sum | cut -c1-16)"
dir="$cache/helm-$key"
if [ -x "$dir/helm" ]; then
    echo "$dir/helm"
    exit 0
fi
export GOPATH="$cache/gopath" GOMODCACHE="$cache/gopath/pkg/mod" GOCACHE="$cache/gocache"
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local
version="$(sed -n 's/^require helm.sh\/helm\/v4 \(v[0-9.]*\)$/\1/p' "$module/go.mod")"
staging="$dir.partial"
rm -rf "$staging"
mkdir -p "$staging"
cd "$module"
# The version Helm reports, as its release builds set it.
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
    -o "$staging/helm" helm.sh/helm/v4/cmd/helm
mv "$staging" "$dir"
find "$cache" -maxdepth 1 -name 'helm-*' ! -name "$(basename "$dir")" -exec rm -rf {} +
echo "$dir/helm"
