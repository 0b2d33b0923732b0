#!/usr/bin/env bash
# timed.sh PHASE COMMAND…: runs COMMAND and then prints how long PHASE took (and its exit
# status when it failed), so that `make run`, `make test` and CI logs show where their
# time goes (docs/DEVELOPING.md holds the cold and warm figures).
set -uo pipefail
phase=$1
shift
start=$EPOCHREALTIME
"$@"
status=$?
elapsed=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
if ((status)); then
	printf 'phase %-36s %7ss  (failed: exit %d)\n' "$phase" "$elapsed" "$status" >&2
else
	printf 'phase %-36s %7ss\n' "$phase" "$elapsed" >&2
fi
exit "$status"
