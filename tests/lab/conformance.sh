#!/usr/bin/env bash
# Runs the upstream MCS conformance suite (sigs.k8s.io/mcs-api, conformance/)
# against the running cluster lab (tests/lab/lab.sh up), unmodified.
#
#   tests/lab/conformance.sh MCS_API_CHECKOUT [REPORT_DIR] [-- SUITE_FLAGS...]
#
# MCS_API_CHECKOUT is a checkout of kubernetes-sigs/mcs-api at the tag to
# run (docs/conformance.md names the one used): the Go module proxy does
# not serve the conformance module, so it cannot be pinned in go.mod like
# the lab's other components. Its dependencies come from the proxy. The
# test binary is cached under $STRAIT_LAB_CACHE, keyed on the checkout's
# conformance/ folder. The hello service is deployed in c3 (net-b) and
# imported by c1 and c2 (net-a): contexts c3,c1,c2. The report (JSON and
# JUnit) goes to REPORT_DIR (default /tmp/strait-lab/conformance).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
checkout="$(cd "${1:?usage: $0 MCS_API_CHECKOUT [REPORT_DIR] [-- SUITE_FLAGS...]}" && pwd)"
shift
state="${STRAIT_LAB_DIR:-/tmp/strait-lab}"
report="$state/conformance"
if [ $# -gt 0 ] && [ "$1" != -- ]; then report="$1"; shift; fi
[ "${1:-}" != -- ] || shift
[ -e "$state/up" ] || { echo "the lab is not up: tests/lab/lab.sh up" >&2; exit 1; }
cache="${STRAIT_LAB_CACHE:-$HOME/.cache/strait-lab}"
key="$(cd "$checkout" && find conformance go.mod go.sum -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
binary="$cache/mcs-conformance-$key.test"
if [ ! -x "$binary" ]; then
    export GOPATH="$cache/gopath" GOMODCACHE="$cache/gopath/pkg/mod" GOCACHE="$cache/gocache"
    export GOFLAGS=-mod=readonly GOTOOLCHAIN=local
    (cd "$checkout/conformance" && go test -c -o "$binary.partial" .)
    mv "$binary.partial" "$binary"
fi
mkdir -p "$report"
cd "$report"
"$binary" -test.timeout 90m \
    -kubeconfig "$state/all.kubeconfig" -contexts c3,c1,c2 \
    -organization Strait -project strait -version "$("$(cat "$state/strait-bin")" --version | awk '{print $2}')" \
    -ginkgo.v -ginkgo.json-report "$report/report.json" -ginkgo.junit-report "$report/junit.xml" \
    "$@"
