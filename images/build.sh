#!/usr/bin/env bash
# Builds sandgate's sandbox images without a registry: sandgate/base from a Debian bookworm
# minbase rootfs by debootstrap, then `docker import`; the others from sandgate/base's
# rootfs with packages added (images/code-interpreter.sh, images/e2b.sh), side by side.
# Each image is skipped when it is already present.
# The rootfs tarballs are cached outside the repo (SANDGATE_CACHE, default /var/cache/sandgate).
set -euo pipefail
# Usage: images/build.sh [VERSION] [base]   (base: only sandgate/base, what `make run`
# needs before it serves; the rest it builds in the background, see scripts/run.sh)
VERSION=${1:-$(cat "$(dirname "$0")/../VERSION")}
ONLY=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${SANDGATE_CACHE:-/var/cache/sandgate}
MIRROR=${SANDGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"

# build_rootfs NAME PACKAGES: debootstrap into a temp dir and pack it into $CACHE/NAME.tar.
build_rootfs() {
	local name=$1 packages=$2 tarball="$CACHE/$1-rootfs.tar"
	if [ -s "$tarball" ]; then
		echo "images: reusing cached rootfs $tarball"
		return
	fi
	local dir
	dir=$(mktemp -d "$CACHE/$name.XXXXXX")
	trap 'rm -rf "$dir"' RETURN
	if ! command -v debootstrap >/dev/null 2>&1; then
		echo "images: installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
	fi
	echo "images: debootstrap $name (bookworm minbase + $packages)…"
	debootstrap --variant=minbase --include="$packages" bookworm "$dir" "$MIRROR" >"$CACHE/$name-debootstrap.log" 2>&1 || {
		tail -20 "$CACHE/$name-debootstrap.log" >&2
		exit 1
	}
	chroot "$dir" apt-get clean
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/tmp/*
	tar -C "$dir" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
}

# import_image NAME TAG: docker import the cached rootfs unless the tag exists.
import_image() {
	local name=$1 tag=$2
	if docker image inspect "$tag" >/dev/null 2>&1; then
		echo "images: $tag present"
		return
	fi
	docker import --change 'CMD ["/bin/bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' --change 'WORKDIR /root' \
		"$CACHE/$name-rootfs.tar" "$tag" >/dev/null
	echo "images: imported $tag"
}

BASE_PACKAGES=bash,coreutils,python3,ca-certificates,curl,procps,iproute2
if [[ $ONLY == base ]]; then
	if ! docker image inspect "sandgate/base:$VERSION" >/dev/null 2>&1; then
		build_rootfs base "$BASE_PACKAGES"
		import_image base "sandgate/base:$VERSION"
	else
		echo "images: sandgate/base:$VERSION present"
	fi
	exit 0
fi

# The other images are each made from sandgate/base's root filesystem, so once it exists
# two chains build side by side: the code interpreter, then what is made from it (the
# name OpenSandbox's SDKs default to, the E2B door's code interpreter template); and the
# E2B door's base template. Each image prints its time (scripts/timed.sh), and each
# chain's lines carry the chain's name so that the two stay readable.
TIMED="$HERE/../scripts/timed.sh"
"$TIMED" "image sandgate/base" "$HERE/build.sh" "$VERSION" base

code_interpreter_chain() {
	# The code interpreter image (Jupyter) is built by its own script when present, and
	# tagged under the name OpenSandbox's code-interpreter SDKs default to
	# (SANDGATE_OPENSANDBOX_ALIAS=off skips it).
	[ -x "$HERE/code-interpreter.sh" ] || return 0
	"$TIMED" "image sandgate/code-interpreter" "$HERE/code-interpreter.sh" "$VERSION" &&
		"$TIMED" "image opensandbox alias" "$HERE/opensandbox-alias.sh" "$VERSION" &&
		"$TIMED" "image sandgate/e2b-code-interpreter" "$HERE/e2b.sh" "$VERSION" code-interpreter
}
e2b_base_chain() {
	"$TIMED" "image sandgate/e2b-base" "$HERE/e2b.sh" "$VERSION" base
}

# prefixed NAME FUNCTION: FUNCTION's output, each line led by [NAME].
prefixed() {
	"$2" 2>&1 | sed -u "s/^/[$1] /" >&2
}

prefixed code-interpreter code_interpreter_chain &
code_interpreter_pid=$!
prefixed e2b-base e2b_base_chain &
e2b_base_pid=$!
failed=0
wait "$code_interpreter_pid" || failed=1
wait "$e2b_base_pid" || failed=1
exit "$failed"
