#!/usr/bin/env bash
# Builds the cluster lab's Kubernetes components from the pinned Go modules
# in tests/lab/components (etcd, kube-apiserver, kube-controller-manager,
# kube-proxy and kubectl, with the version ldflags set so that /version
# tells the truth), tests/lab/coredns (CoreDNS with the stock Corefile's
# plugins) and tests/lab/kubelet-api (the nodes' kubelet API, for
# `kubectl exec`). The binaries are cached under $STRAIT_LAB_CACHE (default
# ~/.cache/strait-lab), keyed on the three modules: a warm run builds
# nothing. Prints the folder holding the binaries.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
components="$here/components"
cache="${STRAIT_LAB_CACHE:-$HOME/.cache/strait-lab}"
coredns="$here/coredns"
kubelet_api="$here/kubelet-api"
key="$(sha256sum "$components/go.mod" "$components/go.sum" "$coredns/go.mod" "$coredns/go.sum" "$coredns/main.go" \
    "$kubelet_api/go.mod" "$kubelet_api/go.sum" "$kubelet_api/main.go" | sha256sum | cut -c1-16)"
bin="$cache/bin-$key"
commands=(etcd kube-apiserver kube-controller-manager kube-proxy kubectl coredns kubelet-api)
if [ -d "$bin" ] && for c in "${commands[@]}"; do [ -x "$bin/$c" ] || exit 1; done; then
    echo "$bin"
    exit 0
fi
export GOPATH="$cache/gopath" GOMODCACHE="$cache/gopath/pkg/mod" GOCACHE="$cache/gocache"
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local
version="$(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$components/go.mod")"
minor="$(echo "$version" | cut -d. -f2)"
v=k8s.io/component-base/version
staging="$bin.partial"
rm -rf "$staging"
mkdir -p "$staging"
cd "$components"
# -pgo=off: kube-apiserver ships a profile whose use slows the build.
go build -pgo=off -trimpath \
    -ldflags "-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
    -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl
go build -pgo=off -trimpath -ldflags "-s -w" -o "$staging/etcd" go.etcd.io/etcd/server/v3
cd "$coredns"
go build -trimpath -ldflags "-s -w" -o "$staging/coredns" .
cd "$kubelet_api"
go build -trimpath -ldflags "-s -w" -o "$staging/kubelet-api" .
mv "$staging" "$bin"
# Binaries of other pins are not used again.
find "$cache" -maxdepth 1 -name 'bin-*' ! -name "$(basename "$bin")" -exec rm -rf {} +
echo "$bin"
