#!/usr/bin/env bash
# The build half of `make run`: the gateway and agent (with the console) beside the
# default image (sandgate/base), each phase with its time. Everything else `make run`
# needs is built by the gateway once it serves (scripts/run.sh). Both logs are kept in
# .sandgate/.
set -euo pipefail
umask 077 # the logs are the user's alone, like everything under .sandgate
cd "$(dirname "$0")/.."
VERSION=$(cat VERSION)
phase() { printf 'make run: %-44s %4ss\n' "$1" "$2"; }
(umask 077 && mkdir -p .sandgate)
chmod 700 .sandgate

t0=$SECONDS
# The gateway `make run` serves is local Docker's: built without the Kubernetes runtime,
# whose client is the largest part of a first compile (docs/DEVELOPING.md); `make
# build` builds it all in.
make --no-print-directory build GOTAGS=sandgate_nokubernetes >.sandgate/build.log 2>&1 &
build_pid=$!
images/build.sh "$VERSION" base >.sandgate/images.log 2>&1 &
images_pid=$!
build_ok=0 images_ok=0
wait "$build_pid" || build_ok=$?
phase "go build (local Docker) + console (beside the base image)" $((SECONDS - t0))
wait "$images_pid" || images_ok=$?
phase "base image sandgate/base:$VERSION" $((SECONDS - t0))
if ((build_ok)); then
	tail -30 .sandgate/build.log >&2
	echo "make run: the build failed (.sandgate/build.log)" >&2
	exit 1
fi
if ((images_ok)); then
	tail -30 .sandgate/images.log >&2
	echo "make run: the base image failed (.sandgate/images.log)" >&2
	exit 1
fi

