#!/usr/bin/env bash
# Builds sandgate/code-interpreter:VERSION without a registry: sandgate/base's root
# filesystem (the tarball images/build.sh cached, else one `docker export`ed from the
# image) with Jupyter Server, ipykernel, numpy, pandas and matplotlib from Debian's own
# packages installed in a chroot, imported into Docker with `docker import`. Starting
# from the base's root filesystem spares a debootstrap of its own. The sandbox-agent
# binary is NOT baked in: the runtime injects it.
#
# The rootfs tarball is cached under /var/cache/sandgate (outside the repository) so that
# a rebuild after `docker rmi` costs one import, not one package installation. Nothing is
# done when the image already exists.
#
# Usage: images/code-interpreter.sh VERSION
set -euo pipefail

version="${1:?usage: $0 VERSION}"
here=$(cd "$(dirname "$0")" && pwd)
image="sandgate/code-interpreter:${version}"
mirror="${SANDGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite="bookworm"
cache_dir="${SANDGATE_IMAGE_CACHE:-/var/cache/sandgate}"
# Where images/build.sh caches the base's root filesystem.
base_tarball="${SANDGATE_CACHE:-/var/cache/sandgate}/base-rootfs.tar"
extra_packages="python3-ipykernel jupyter-server python3-numpy python3-pandas python3-matplotlib"

log() { printf 'code-interpreter: %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
	log "$image exists, skipping"
	exit 0
fi
mkdir -p "$cache_dir"

# base_source: the base's cached root filesystem; else one exported from
# sandgate/base:VERSION, which is built first when it is missing.
base_source() {
	if [[ ! -s "$base_tarball" ]]; then
		"$here/build.sh" "$version" base >&2
	fi
	if [[ -s "$base_tarball" ]]; then
		echo "$base_tarball"
		return
	fi
	local exported="$cache_dir/base-export-$version.tar" id
	if [[ ! -s "$exported" ]]; then
		log "exporting sandgate/base:$version"
		id=$(docker create "sandgate/base:$version" /bin/true)
		docker export "$id" >"$exported.$$.tmp" && mv "$exported.$$.tmp" "$exported"
		docker rm -f "$id" >/dev/null
	fi
	echo "$exported"
}

source_tarball=$(base_source)
# The tarball name carries the base's root filesystem, the package set and this script,
# so that a change to any of them makes a new one (images/e2b.sh takes the newest
# code-interpreter-bookworm-*.tar).
package_hash="$(printf '%s|%s|%s|%s' "$suite" "$(sha256sum <"$source_tarball" | cut -c1-16)" "$extra_packages" \
	"$(sha256sum <"$0" | cut -c1-16)" | sha256sum | cut -c1-12)"
tarball="${cache_dir}/code-interpreter-${suite}-${package_hash}.tar"

if [[ ! -s "$tarball" ]]; then
	work="$(mktemp -d "${cache_dir}/build.XXXXXX")"
	rootfs="${work}/rootfs"
	cleanup() {
		# Unmount whatever is still mounted inside the chroot before removing it.
		mountpoint -q "$rootfs/proc" 2>/dev/null && umount -l "$rootfs/proc" || true
		rm -rf "$work"
	}
	trap cleanup EXIT

	log "unpacking $source_tarball"
	mkdir -p "$rootfs"
	tar -C "$rootfs" --numeric-owner -xf "$source_tarball"

	log "installing $extra_packages from $mirror"
	# apt needs the host's resolver and the mirror; the base's own files go back after.
	cp -a "$rootfs/etc/resolv.conf" "$work/resolv.conf" 2>/dev/null || : >"$work/resolv.conf"
	cp -a "$rootfs/etc/apt/sources.list" "$work/sources.list" 2>/dev/null || : >"$work/sources.list"
	rm -f "$rootfs/etc/resolv.conf"
	cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
	printf 'deb %s %s main\n' "$mirror" "$suite" >"$rootfs/etc/apt/sources.list"
	mount -t proc proc "$rootfs/proc"
	# Keep daemons from starting inside the chroot during package installation.
	printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
	chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
	chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
		sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $extra_packages" \
		>"${work}/apt.log" 2>&1 || {
		tail -n 40 "${work}/apt.log" >&2
		exit 1
	}
	chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/* /var/tmp/*'
	rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
	cp -a "$work/resolv.conf" "$rootfs/etc/resolv.conf"
	cp -a "$work/sources.list" "$rootfs/etc/apt/sources.list"
	umount -l "$rootfs/proc"

	# Smoke-check the interpreter stack before caching it.
	chroot "$rootfs" /usr/bin/python3 -c 'import ipykernel, jupyter_server, numpy, pandas, matplotlib' || {
		log "python stack incomplete in rootfs"
		exit 1
	}

	log "caching rootfs at $tarball"
	tar -C "$rootfs" --numeric-owner -cf "${tarball}.tmp" .
	mv "${tarball}.tmp" "$tarball"
fi

log "importing $image"
docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'WORKDIR /root' \
	--change 'CMD ["/bin/bash"]' \
	- "$image" <"$tarball" >/dev/null
log "built $image"
