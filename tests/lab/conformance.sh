#!/usr/bin/env bash
# Runs the upstream MCS conformance suite (sigs.k8s.io/mcs-api, conformance/)
# against the running cluster lab (tests/lab/lab.sh up), unmodified.
#
#   tests/lab/conformance.sh SUITE_BINARY [REPORT_DIR] [-- SUITE_FLAGS...]
#
# SUITE_BINARY is the suite's Go test binary, built by the user from a
# checkout of kubernetes-sigs/mcs-api as any Go test package is
# (docs/conformance.md names the tag and the step); this repository neither
# holds nor builds it. The hello service is deployed in c3 (net-b) and
# imported by c1 and c2 (net-a): contexts c3,c1,c2. The reports go to
# REPORT_DIR (default /tmp/strait-lab/conformance): Ginkgo's JSON and
# JUnit, and the suite's own report.yaml and report.html in
# SIG-Multicluster's format (Strait's name and version given below).
set -euo pipefail
binary="${1:?usage: $0 SUITE_BINARY [REPORT_DIR] [-- SUITE_FLAGS...]}"
shift
[ -x "$binary" ] || { echo "$binary: not an executable (build the suite first: docs/conformance.md)" >&2; exit 1; }
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
state="${STRAIT_LAB_DIR:-/tmp/strait-lab}"
report="$state/conformance"
if [ $# -gt 0 ] && [ "$1" != -- ]; then report="$1"; shift; fi
[ "${1:-}" != -- ] || shift
[ -e "$state/up" ] || { echo "the lab is not up: tests/lab/lab.sh up" >&2; exit 1; }
mkdir -p "$report"
cd "$report"
"$binary" -test.timeout 90m \
    -kubeconfig "$state/all.kubeconfig" -contexts c3,c1,c2 \
    -organization Strait -project strait -version "$("$(cat "$state/strait-bin")" --version | awk '{print $2}')" \
    -ginkgo.v -ginkgo.json-report "$report/report.json" -ginkgo.junit-report "$report/junit.xml" \
    "$@"
