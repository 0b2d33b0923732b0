#!/usr/bin/env bash
# The Helm command the chart's tests (deploy/helm_test.go) lint, render and install
# deploy/helm/sandgate with: helm.sh/helm/v4 cmd/helm, built from source through the Go
# module proxy at the version test/helm/go.mod pins, and cached outside the repository
# like the Kubernetes binaries (scripts/k8s.sh).
#
#   scripts/helm.sh build   build it unless cached; print the binary's path
#
# Environment:
#   SANDGATE_HELM_CACHE  where it is cached (default /var/cache/sandgate/helm/<version>)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODDIR="$ROOT/test/helm"
VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" {print $3}' "$MODDIR/go.mod")
CACHE=${SANDGATE_HELM_CACHE:-/var/cache/sandgate/helm/$VERSION}

# shellcheck source=lib/cached-go-tool.sh
. "$ROOT/scripts/lib/cached-go-tool.sh"

# The version helm prints (and checks a chart's kubeVersion against) comes from ldflags.
build() { build_cached_go_tool "helm" "$MODDIR" helm.sh/helm/v4/cmd/helm "$CACHE" "$VERSION" "-X helm.sh/helm/v4/internal/version.version=$VERSION"; }

case "${1:-}" in
build) build ;;
*)
	echo "usage: $0 build" >&2
	exit 2
	;;
esac
