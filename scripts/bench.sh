#!/usr/bin/env bash
# `make bench`: every hot-path benchmark; each figure is printed beside its raw baseline
# from the same run (sub-benchmarks named sandgate…/raw-…/direct-…). Benchmarks that
# start hundreds of containers run fewer iterations than the cheap ones.
set -uo pipefail
cd "$(dirname "$0")/.."
export SANDGATE_E2E_BIN=$PWD/bin
FAST=${BENCHTIME:-200x}
filter() { grep -E '^(Benchmark|ok|FAIL|---|pkg:)|panic' || true; }
unit_pkgs=$(go list ./... | grep -v -e /test/e2e -e /test/k8s | while read -r p; do
	d=${p#github.com/sandgate/sandgate}
	d=.${d}
	grep -qs '^func Benchmark' "$d"/*_test.go && echo "$p"
done)
echo "== unit benchmarks ($FAST)"
go test -count=1 -p 1 -run '^$' -bench . -benchtime "$FAST" -timeout 30m $unit_pkgs 2>&1 | filter
echo "== gateway end to end: request paths ($FAST)"
go test -count=1 -run '^$' -bench 'TrueRoundTrip|PluginAudit|Egress|VaultHTTPS|AgentTransfer|StdoutStream|CodeOnePlusOne|AgentCode' -benchtime "$FAST" -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== gateway end to end: throughput and latency of preview and API requests (3s each)"
go test -count=1 -run '^$' -bench 'Preview|APIWithPolicy|APIObserved' -benchtime 3s -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== gateway end to end: creates and claims (10x)"
go test -count=1 -run '^$' -bench 'ColdCreate|PoolClaim' -benchtime 10x -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== gateway end to end: snapshot, fork of 10, resume on access (1x)"
go test -count=1 -run '^$' -bench 'BenchmarkState$' -benchtime 1x -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== gateway end to end: batches of 100 (1x)"
go test -count=1 -run '^$' -bench 'Batch100' -benchtime 1x -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== gateway end to end: faults: a burst of 20 expiries, proxied calls through a 15s Redis outage, takeover of a killed gateway's work (1x)"
go test -count=1 -run '^$' -bench 'ExpiryBurst20|RedisOutage15s|GatewayTakeover' -benchtime 1x -timeout 30m ./test/e2e/ 2>&1 | filter
echo "== Kubernetes runtime on the local control plane: batches of 100 and 1000, warm and cold (1x)"
go test -count=1 -run '^$' -bench 'K8sBatch' -benchtime 1x -timeout 45m ./test/k8s/ 2>&1 | filter
