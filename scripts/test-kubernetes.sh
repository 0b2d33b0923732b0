#!/usr/bin/env bash
# test-kubernetes.sh ARTIFACTS READY PACKAGE…: `make test`'s Kubernetes lane, run by
# scripts/test.sh beside the other packages' tests. It builds the Kubernetes binaries and
# Helm (niced, so that the tests running beside it come first), waits until the file
# READY exists (the foreground has made the binaries and images the suites need), then
# tests PACKAGE… one at a time. The build's output goes to ARTIFACTS/build-k8s-helm.log;
# the tests' to ARTIFACTS/go-test-k8s.{log,json,times.tsv}.
set -uo pipefail
cd "$(dirname "$0")/.."
artifacts=$1 ready=$2
shift 2
if ! nice -n 10 make --no-print-directory -j2 k8s helm >"$artifacts/build-k8s-helm.log" 2>&1; then
	echo "make test: building the Kubernetes binaries or Helm failed: $artifacts/build-k8s-helm.log" >"$artifacts/go-test-k8s.log"
	exit 1
fi
while [ ! -e "$ready" ]; do sleep 2; done
report=$PWD/bin/testreport
scripts/timed.sh "go test $*" bash -c 'set -o pipefail; report=$1; shift; go test -json -count=1 -p 1 -timeout 30m "$@" 2>&1 |
	tee "$0.json" | "$report" -times "$0.times.tsv"' "$artifacts/go-test-k8s" "$report" "$@" >"$artifacts/go-test-k8s.log" 2>&1
