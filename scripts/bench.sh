#!/usr/bin/env bash
# `make bench`: every hot-path benchmark; each figure is printed beside its raw baseline
# from the same run (sub-benchmarks named sandgate/…, raw-…/direct-…).
set -euo pipefail
cd "$(dirname "$0")/.."
export SANDGATE_E2E_BIN=$PWD/bin
BENCHTIME=${BENCHTIME:-30x}
pkgs=$(go list ./... | while read -r p; do
	d=${p#github.com/sandgate/sandgate/}
	[ "$d" = "$p" ] && d=.
	grep -qs '^func Benchmark' "$d"/*_test.go && echo "$p"
done)
go test -count=1 -p 1 -run '^$' -bench . -benchtime "$BENCHTIME" -timeout 60m $pkgs 2>&1 |
	grep -E '^(Benchmark|ok|FAIL|---|pkg:)|p50|panic' || true
