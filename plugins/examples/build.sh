#!/usr/bin/env bash
# Builds every plugin under plugins/examples (the examples and the
# deliberately bad ones used by the tests) into <dir>/<name>.wasm.
# Works from any directory; pass plugin names to build only those.
set -euo pipefail

examples="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$examples/../.."

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
	for dir in "$examples"/*/; do
		[ -f "$dir/main.go" ] && names+=("$(basename "$dir")")
	done
fi

for name in "${names[@]}"; do
	out="$examples/$name/$name.wasm"
	GOOS=wasip1 GOARCH=wasm ${GO:-go} build -buildmode=c-shared -trimpath -o "$out" "./plugins/examples/$name"
	printf 'built %s (%s bytes)\n' "${out#"$PWD"/}" "$(stat -c %s "$out")"
done
