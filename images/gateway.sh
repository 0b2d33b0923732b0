#!/usr/bin/env bash
# Builds sandgate/gateway:<version>, the image deploy/ and the Helm chart run, from
# images/gateway.Dockerfile (FROM scratch, so no registry; the classic builder, so no
# BuildKit): a static sandgate binary, this machine's CA certificates, and a nonroot user
# (65532). `make gateway-image` builds the binary static (CGO_ENABLED=0) and calls this.
# Push it to a registry your cluster pulls from, or load it into each node's containerd
# (`docker save sandgate/gateway:<version> | ctr -n k8s.io images import -`).
#
# usage: images/gateway.sh [version] [sandgate binary]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=${1:-$(cat "$HERE/../VERSION")}
GATEWAY=${2:-$HERE/../bin/sandgate}
CA_BUNDLE=${SANDGATE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
TAG=sandgate/gateway:$VERSION
if [ ! -x "$GATEWAY" ]; then
	echo "images/gateway.sh: $GATEWAY is missing; run \`make gateway-image\`" >&2
	exit 1
fi
if command -v file >/dev/null && ! file "$GATEWAY" | grep -q 'statically linked'; then
	# An image without libc runs only a static binary.
	echo "images/gateway.sh: $GATEWAY is not statically linked (build it with CGO_ENABLED=0)" >&2
	exit 1
fi
if [ ! -s "$CA_BUNDLE" ]; then
	echo "images/gateway.sh: no CA bundle at $CA_BUNDLE (install ca-certificates or set SANDGATE_CA_BUNDLE)" >&2
	exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The build context holds exactly what the image carries.
install -m 0755 "$GATEWAY" "$dir/sandgate"
mkdir -p "$dir/rootfs/etc/ssl/certs" "$dir/home"
install -m 0644 "$CA_BUNDLE" "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
echo 'sandgate:x:65532:65532:sandgate:/var/lib/sandgate:/sbin/nologin' >"$dir/rootfs/etc/passwd"
echo 'sandgate:x:65532:' >"$dir/rootfs/etc/group"
chmod 0644 "$dir/rootfs/etc/passwd" "$dir/rootfs/etc/group"
mkdir -m 1777 "$dir/rootfs/tmp"
DOCKER_BUILDKIT=0 docker build -q --build-arg "VERSION=$VERSION" -f "$HERE/gateway.Dockerfile" -t "$TAG" "$dir" >/dev/null
echo "images: built $TAG"
