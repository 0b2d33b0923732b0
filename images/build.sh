#!/usr/bin/env bash
# Builds sandgate's sandbox images without a registry: a Debian bookworm minbase rootfs by
# debootstrap, then `docker import`. Each image is skipped when it is already present.
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
if ! docker image inspect "sandgate/base:$VERSION" >/dev/null 2>&1; then
	build_rootfs base "$BASE_PACKAGES"
	import_image base "sandgate/base:$VERSION"
else
	echo "images: sandgate/base:$VERSION present"
fi

[[ $ONLY == base ]] && exit 0

# The code interpreter image (Jupyter) is built by its own script when present.
if [ -x "$HERE/code-interpreter.sh" ]; then
	"$HERE/code-interpreter.sh" "$VERSION"
	# The same image under the name OpenSandbox's code-interpreter SDKs default to
	# (SANDGATE_OPENSANDBOX_ALIAS=off skips it).
	"$HERE/opensandbox-alias.sh" "$VERSION"
fi

# The images of the E2B door's templates (base and code-interpreter-v1).
"$HERE/e2b.sh" "$VERSION"
