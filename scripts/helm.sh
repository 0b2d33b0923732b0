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

log() { echo "helm: $*" >&2; }

build() {
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.lock"
	flock 9
	if [ -x "$CACHE/helm" ] && [ "$(cat "$CACHE/helm.version" 2>/dev/null)" = "$VERSION" ]; then
		echo "$CACHE/helm"
		return
	fi
	log "building helm.sh/helm/v4 cmd/helm $VERSION (a few minutes the first time)"
	local start tmp
	start=$(date +%s)
	tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
	# The version helm prints (and checks a chart's kubeVersion against) comes from ldflags.
	if ! (cd "$MODDIR" && GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -mod=mod" \
		go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION" \
		-o "$tmp/helm" helm.sh/helm/v4/cmd/helm) >&2; then
		rm -rf "$tmp"
		log "building helm failed"
		exit 1
	fi
	mv "$tmp/helm" "$CACHE/helm"
	echo "$VERSION" >"$CACHE/helm.version"
	rm -rf "$tmp"
	log "built $CACHE/helm in $(($(date +%s) - start))s"
	echo "$CACHE/helm"
}

case "${1:-}" in
build) build ;;
*)
	echo "usage: $0 build" >&2
	exit 2
	;;
esac
