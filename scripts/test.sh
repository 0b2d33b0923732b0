#!/usr/bin/env bash
# `make test`: every Go test — unit tests, Rego tests (run by policy's Go tests), netns
# egress tests, the end-to-end suite against real Docker and Redis, and the Kubernetes
# suite on a local control plane — with the binaries built here first.
#
# What each suite needs is built as early as it can be, side by side:
#   - the gateway and agent binaries, the images, the WASM examples and the registry that
#     the main suites need, and, beside them, what every package's tests import, compiled
#     by `go vet ./...` with both cores into the build cache (`go test -p 1` would compile
#     it one package at a time);
#   - in the background, at a lower CPU priority, the Kubernetes binaries and Helm, which
#     only `test/k8s` and `deploy` use: on a fresh machine they are the longest builds, so
#     the other packages are tested while they still build, and those two packages last.
set -euo pipefail
cd "$(dirname "$0")/.."
export SANDGATE_E2E_BIN=$PWD/bin
# The tests build as the binaries do (static, no cgo), so that they share the compiled
# packages of the build cache instead of compiling the dependency tree a second time.
export CGO_ENABLED=0
artifacts=test/e2e/artifacts
mkdir -p "$artifacts"
make=(make --no-print-directory)

# The packages that need the Kubernetes binaries or Helm.
late_packages=(./deploy ./test/k8s)

# The Kubernetes lane, in the background (scripts/test-kubernetes.sh): the Kubernetes
# binaries and Helm, then, once the binaries and images of the foreground are made too,
# the tests of the packages that need them (a control plane and a node of their own,
# beside the other packages' tests). It runs in a session of its own, so that stopping
# `make test` stops all of it; its output goes to logs printed at the end.
# scripts/testreport prints each `go test -json` as plain `go test` would, with the
# slowest tests last, and writes every test's time (go-test*.times.tsv).
go build -o bin/testreport ./scripts/testreport
foreground_ready=$artifacts/.foreground-built
rm -f "$foreground_ready"
setsid scripts/test-kubernetes.sh "$artifacts" "$foreground_ready" "${late_packages[@]}" &
late_lane=$!
stop_late_lane() {
	rm -f "$foreground_ready"
	if kill -0 "$late_lane" 2>/dev/null; then
		kill -TERM -- "-$late_lane" 2>/dev/null || true
	fi
}
trap stop_late_lane EXIT

# Foreground: what the main suites need, and the tests' imports compiled beside it. A
# finding of vet's is printed, not fatal here: `go test` reports what breaks a test.
compile_log=$artifacts/compile-test-imports.log
scripts/timed.sh "compile test imports (go vet ./...)" go vet ./... >"$compile_log" 2>&1 &
compile_imports=$!
"${make[@]}" -j4 build images plugins registry
wait "$compile_imports" || true
cat "$compile_log" >&2

# The JavaScript SDK client suite (test/e2e TestSDKJS runs it) uses the SDK version its
# package-lock.json pins, installed afresh.
scripts/timed.sh "npm ci test/sdk-js" sh -c 'cd test/sdk-js && npm ci --no-audit --no-fund'
# The E2B JavaScript SDK client suite (TestSDKE2BJS), likewise.
scripts/timed.sh "npm ci test/sdk-e2b-js" sh -c 'cd test/sdk-e2b-js && npm ci --no-audit --no-fund'
# The Python SDK client suite (TestSDKPy) uses the packages its requirements.txt pins, in
# a venv of its own (test/sdk-py/.venv), made afresh when the pins changed.
scripts/timed.sh "venv test/sdk-py" test/sdk-py/install.sh
# The E2B Python SDK client suite (TestSDKE2BPy), likewise (test/sdk-e2b-py/.venv).
scripts/timed.sh "venv test/sdk-e2b-py" test/sdk-e2b-py/install.sh

touch "$foreground_ready"

# Two lanes of packages, side by side, each testing its packages one at a time:
#   - the engine lane: the packages whose tests start containers, networks and network
#     namespaces on the machine's engine and host (the e2e suite, the Docker runtime, the
#     agent's and the enforcer's Docker and netns suites). They share the engine's agent
#     volumes, helper image, spare namespace holders and the sandgate networks, so they
#     never run at the same time as each other;
#   - the unit lane: every other package (Redis, the in-process runtime, Rego, WASM,
#     processes), none of which touches the engine.
# The e2e suite mostly waits on the engine and the sandboxes (load average about 1 on
# its own), so the unit lane's CPU work fits beside it. Each package prints its own time
# (`ok <package> <seconds>`); each lane's phase line, its whole. The engine lane prints as
# it goes; the unit lane's output (go-test-unit.log) is printed once both are done.
engine_packages=(./test/e2e ./runtimes/docker ./sandbox-agent ./sandbox-agent/egress)
except=()
for p in "${late_packages[@]}" "${engine_packages[@]}"; do
	except+=(-e "$(go list "$p")")
done
mapfile -t unit_packages < <(go list ./... | grep -v -x -F "${except[@]}")
# lane NAME TIMEOUT PACKAGE…: `go test -json` of the packages through scripts/testreport,
# into $artifacts/go-test-NAME.{json,times.tsv,log}.
lane() {
	local name=$1 timeout=$2
	shift 2
	scripts/timed.sh "go test, $name lane ($# packages)" bash -c 'set -o pipefail; report=$1 timeout=$2; shift 2; go test -json -count=1 -p 1 -timeout "$timeout" "$@" 2>&1 |
	tee "$0.json" | "$report" -times "$0.times.tsv" | tee "$0.log"' "$artifacts/go-test-$name" "$PWD/bin/testreport" "$timeout" "$@"
}
status=0
lane unit 45m "${unit_packages[@]}" >/dev/null 2>"$artifacts/go-test-unit.phase" &
unit_lane=$!
lane engine 75m "${engine_packages[@]}" || status=$?
wait "$unit_lane" || status=1
cat "$artifacts/go-test-unit.log"
cat "$artifacts/go-test-unit.phase" >&2

wait "$late_lane" || status=1
grep '^phase ' "$artifacts/build-k8s-helm.log" >&2 || true
cat "$artifacts/go-test-k8s.log" >&2
exit "$status"
