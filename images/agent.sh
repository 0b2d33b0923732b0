#!/usr/bin/env bash
# Builds sandgate/agent:<version>, the image the Kubernetes runtime's init container
# copies the agent from and its egress sidecar runs: nothing but the static
# bin/sandbox-agent at /sandbox-agent, from images/agent.Dockerfile (FROM scratch, so no
# registry; the classic builder, so no BuildKit). Push or load it where the cluster's nodes pull from
# (`docker save sandgate/agent:<version> | ctr -n k8s.io images import -`, `kind load`,
# or a registry tag), and point SANDGATE_K8S_AGENT_IMAGE at it when it is not the default.
#
# usage: images/agent.sh [version] [agent binary]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERSION=${1:-$(cat "$HERE/../VERSION")}
AGENT=${2:-$HERE/../bin/sandbox-agent}
TAG=sandgate/agent:$VERSION
if [ ! -x "$AGENT" ]; then
	echo "images/agent.sh: $AGENT is missing; run \`make build\` first" >&2
	exit 1
fi
if ! file "$AGENT" 2>/dev/null | grep -q 'statically linked'; then
	# An image without libc runs only a static binary.
	if command -v file >/dev/null; then
		echo "images/agent.sh: $AGENT is not statically linked (build it with CGO_ENABLED=0)" >&2
		exit 1
	fi
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The build context holds the binary alone, so nothing else of the tree reaches the image.
install -m 0755 "$AGENT" "$dir/sandbox-agent"
DOCKER_BUILDKIT=0 docker build -q --build-arg "VERSION=$VERSION" -f "$HERE/agent.Dockerfile" -t "$TAG" "$dir" >/dev/null
echo "images: built $TAG"
