#!/usr/bin/env bash
# The container registry sandgate's image pull tests run on loopback: the reference
# registry (github.com/distribution/distribution/v3 cmd/registry), built from source
# through the Go module proxy at the version test/registry/go.mod pins, and cached outside
# the repository like the Kubernetes binaries (scripts/k8s.sh).
#
#   scripts/registry.sh build   build it unless cached; print the binary's path
#
# Environment:
#   SANDGATE_REGISTRY_CACHE  where it is cached (default /var/cache/sandgate/registry/<version>)
#
# The tests (test/e2e TestImagePull*, test/k8s TestRealNodeImagePullSecret) run it
# themselves on 127.0.0.1 with htpasswd auth and a storage directory of their own, and
# stop it in t.Cleanup.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODDIR="$ROOT/test/registry"
VERSION=$(awk '$1 == "require" && $2 == "github.com/distribution/distribution/v3" {print $3}' "$MODDIR/go.mod")
CACHE=${SANDGATE_REGISTRY_CACHE:-/var/cache/sandgate/registry/$VERSION}

# shellcheck source=lib/cached-go-tool.sh
. "$ROOT/scripts/lib/cached-go-tool.sh"

build() { build_cached_go_tool "registry" "$MODDIR" github.com/distribution/distribution/v3/cmd/registry "$CACHE" "$VERSION"; }

case "${1:-}" in
build) build ;;
*)
	echo "usage: $0 build" >&2
	exit 2
	;;
esac
