#!/usr/bin/env bash
# Builds sandgate/code-interpreter:VERSION without a registry: a Debian bookworm minbase
# root filesystem made by debootstrap, with Python, Jupyter Server, ipykernel, numpy,
# pandas and matplotlib from Debian's own packages, imported into Docker with
# `docker import`. The sandbox-agent binary is NOT baked in: the runtime injects it.
#
# The rootfs tarball is cached under /var/cache/sandgate (outside the repository) so that
# a rebuild after `docker rmi` costs one import, not one debootstrap. Nothing is done when
# the image already exists.
#
# Usage: images/code-interpreter.sh VERSION
set -euo pipefail

version="${1:?usage: $0 VERSION}"
image="sandgate/code-interpreter:${version}"
mirror="${SANDGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite="bookworm"
cache_dir="${SANDGATE_IMAGE_CACHE:-/var/cache/sandgate}"
# The tarball name carries the package set, so changing the list below invalidates it.
base_packages="bash,coreutils,python3,ca-certificates,curl,procps"
extra_packages="python3-ipykernel jupyter-server python3-numpy python3-pandas python3-matplotlib"
package_hash="$(printf '%s|%s|%s' "$suite" "$base_packages" "$extra_packages" | sha256sum | cut -c1-12)"
tarball="${cache_dir}/code-interpreter-${suite}-${package_hash}.tar"

log() { printf 'code-interpreter: %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
	log "$image exists, skipping"
	exit 0
fi

if [[ ! -s "$tarball" ]]; then
	if ! command -v debootstrap >/dev/null 2>&1; then
		log "installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
	fi
	mkdir -p "$cache_dir"
	work="$(mktemp -d "${cache_dir}/build.XXXXXX")"
	rootfs="${work}/rootfs"
	cleanup() {
		# Unmount whatever is still mounted inside the chroot before removing it.
		for m in "$rootfs/proc" "$rootfs/sys" "$rootfs/dev/pts"; do
			mountpoint -q "$m" 2>/dev/null && umount -l "$m" || true
		done
		rm -rf "$work"
	}
	trap cleanup EXIT

	log "debootstrap $suite minbase from $mirror"
	debootstrap --variant=minbase --include="$base_packages" "$suite" "$rootfs" "$mirror" >"${work}/debootstrap.log" 2>&1 || {
		tail -n 40 "${work}/debootstrap.log" >&2
		exit 1
	}

	log "installing $extra_packages"
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
		sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/* /var/tmp/*'
	rm -f "$rootfs/usr/sbin/policy-rc.d"
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
