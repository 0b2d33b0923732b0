#!/usr/bin/env bash
# `make test`: every Go test — unit tests, Rego tests (run by policy's Go tests), netns
# egress tests and the end-to-end suite against real Docker and Redis — with the binaries
# that `make build` just produced.
set -euo pipefail
cd "$(dirname "$0")/.."
export SANDGATE_E2E_BIN=$PWD/bin
mkdir -p test/e2e/artifacts
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
# Packages run one at a time: the e2e, agent and egress suites each start containers and
# namespaces, and two cores are better spent on one of them at a time.
# Each package prints its own time (`ok <package> <seconds>`); the phase line, the whole.
scripts/timed.sh "go test ./..." bash -c 'set -o pipefail; go test -count=1 -p 1 -timeout 75m ./... 2>&1 | tee test/e2e/artifacts/go-test.log'
