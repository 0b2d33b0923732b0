#!/usr/bin/env bash
# Regenerates the Go code of the envd protocol from the .proto files beside this script:
# *.pb.go (protoc-gen-go) and */*connect/*.connect.go (protoc-gen-connect-go). protoc is
# the one on PATH, else grpcio-tools' (python3 -m grpc_tools.protoc, installed into a
# virtualenv under the cache directory when missing); the plugins are built from the Go
# module proxy at the versions pinned below.
set -euo pipefail

PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_CONNECT_GO=connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1

spec="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/envd-protoc"
mkdir -p "$cache/bin"
GOBIN="$cache/bin" go install "$PROTOC_GEN_GO"
GOBIN="$cache/bin" go install "$PROTOC_GEN_CONNECT_GO"

if command -v protoc >/dev/null; then
	protoc=(protoc)
else
	if ! "$cache/venv/bin/python" -c 'import grpc_tools' 2>/dev/null; then
		python3 -m venv "$cache/venv"
		"$cache/venv/bin/pip" install --quiet grpcio-tools
	fi
	wkt="$("$cache/venv/bin/python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
	protoc=("$cache/venv/bin/python" -m grpc_tools.protoc "-I$wkt")
fi

cd "$spec"
"${protoc[@]}" -I. \
	--plugin=protoc-gen-go="$cache/bin/protoc-gen-go" \
	--plugin=protoc-gen-connect-go="$cache/bin/protoc-gen-connect-go" \
	--go_out=. --go_opt=paths=source_relative \
	--connect-go_out=. --connect-go_opt=paths=source_relative \
	process/process.proto filesystem/filesystem.proto
