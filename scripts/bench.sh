#!/usr/bin/env bash
# `make bench`: every hot-path benchmark; each figure is printed beside its raw baseline
# from the same run (sub-benchmarks named sandgate…/raw-…/direct-…). Benchmarks that
# start hundreds of containers run fewer iterations than the cheap ones.
# `make bench-quick` (--quick): only the Docker figures of bench/results.json, with fewer
# iterations (at most 15 minutes on a 2-core machine).
#
# Benchmarks hand their figures over with testenv.RecordFigure, which appends to
# $SANDGATE_BENCH_FIGURES; at the end scripts/benchreport turns that file into
# bench/results.json, prints the one table of figure, baseline, ratio and target, and
# rewrites the generated table of docs/PERFORMANCE.md.
set -uo pipefail
cd "$(dirname "$0")/.."
export SANDGATE_E2E_BIN=$PWD/bin
QUICK=0
[[ ${1:-} == --quick ]] && QUICK=1
mkdir -p bench
export SANDGATE_BENCH_FIGURES=$PWD/bench/figures.jsonl
: >"$SANDGATE_BENCH_FIGURES"
FAST=${BENCHTIME:-200x}
filter() { grep -E '^(Benchmark|ok|FAIL|---|pkg:)|panic|figure ' || true; }
e2e() { # e2e <title> <benchmark regexp> <benchtime>
	echo "== $1 ($3)"
	go test -count=1 -run '^$' -bench "$2" -benchtime "$3" -timeout 30m ./test/e2e/ 2>&1 | filter
}
if ((QUICK)); then
	e2e "gateway end to end: command round trip" 'TrueRoundTrip' 300x
	e2e "gateway end to end: 100 MiB upload and download" 'Transfer100MiB' 5x
	e2e "gateway end to end: preview small responses" 'PreviewSmallResponse' 2s
	e2e "gateway end to end: creates and claims" 'ColdCreate|PoolClaim' 10x
	e2e "gateway end to end: 50 creates 8 at a time" 'CreateThroughput50x8' 1x
	e2e "gateway end to end: batches of 100" 'Batch100' 1x
	e2e "the E2B door beside the OpenSandbox door" 'E2BDoor' 10x
	echo "== admission with N sandboxes owned (200x)"
	go test -count=1 -run '^$' -bench 'Admission' -benchtime 200x -timeout 30m ./gateway/ 2>&1 | filter
else
	unit_pkgs=$(go list ./... | grep -v -e /test/e2e -e /test/k8s | while read -r p; do
		d=${p#github.com/sandgate/sandgate}
		d=.${d}
		grep -qs '^func Benchmark' "$d"/*_test.go && echo "$p"
	done)
	echo "== unit benchmarks ($FAST)"
	go test -count=1 -p 1 -run '^$' -bench . -benchtime "$FAST" -timeout 30m $unit_pkgs 2>&1 | filter
	e2e "gateway end to end: request paths" 'TrueRoundTrip|PluginAudit|Egress|VaultHTTPS|AgentTransfer|StdoutStream|CodeOnePlusOne|AgentCode' "$FAST"
	e2e "gateway end to end: 100 MiB upload and download" 'Transfer100MiB' 10x
	e2e "gateway end to end: throughput and latency of preview and API requests" 'Preview|APIWithPolicy|APIObserved' 3s
	e2e "gateway end to end: creates and claims" 'ColdCreate|PoolClaim' 10x
	e2e "gateway end to end: 50 creates 8 at a time" 'CreateThroughput50x8' 3x
	e2e "gateway end to end: batches of 100" 'Batch100' 1x
	e2e "the E2B door beside the OpenSandbox door" 'E2BDoor' 30x
	e2e "gateway end to end: snapshot, fork of 10, resume on access" 'BenchmarkState$' 1x
	e2e "gateway end to end: faults: a burst of 20 expiries, proxied calls through a 15s Redis outage, takeover of a killed gateway's work" 'ExpiryBurst20|RedisOutage15s|GatewayTakeover' 1x
	echo "== Kubernetes runtime on the local control plane: batches of 100 and 1000, warm and cold (1x)"
	go test -count=1 -run '^$' -bench 'K8sBatch' -benchtime 1x -timeout 45m ./test/k8s/ 2>&1 | filter
	echo "== Kubernetes runtime on the real node: create and claim to the first command, a batch of 20 answered, beside plain pods to Ready (3x)"
	go test -count=1 -run '^$' -bench 'RealNode' -benchtime 3x -timeout 30m ./test/k8s/ 2>&1 | filter
fi
echo
echo "== figures (bench/results.json)"
go run ./scripts/benchreport -in "$SANDGATE_BENCH_FIGURES" -out bench/results.json -doc docs/PERFORMANCE.md
