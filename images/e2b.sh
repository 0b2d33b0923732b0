#!/usr/bin/env bash
# Builds the images sandgate's E2B door gives E2B's templates, without a registry:
#
#   sandgate/e2b-base:VERSION              template "base": sandgate/base's root filesystem
#                                          with sudo, git and node
#   sandgate/e2b-code-interpreter:VERSION  template "code-interpreter-v1": the code
#                                          interpreter's (Jupyter, numpy, pandas,
#                                          matplotlib) with the same additions
#
# Both have E2B's user: `user` (uid 1000) with the home /home/user and password-less sudo,
# and /home/user as their working directory. Each is made from the root filesystem of its
# source image (the tarball images/build.sh or images/code-interpreter.sh cached, else
# one `docker export`ed): unpacked, the
# packages installed in a chroot, packed and cached under /var/cache/sandgate, then
# `docker import`ed. Nothing is done for an image that exists.
#
# Usage: images/e2b.sh VERSION [base] [code-interpreter]   (no names: both)
set -euo pipefail

version="${1:?usage: $0 VERSION [base] [code-interpreter]}"
shift
wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=(base code-interpreter)
mirror="${SANDGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache_dir="${SANDGATE_IMAGE_CACHE:-${SANDGATE_CACHE:-/var/cache/sandgate}}"
# Where images/build.sh caches the base's root filesystem.
base_tarball="${SANDGATE_CACHE:-/var/cache/sandgate}/base-rootfs.tar"
extra_packages="sudo git nodejs"
log() { printf 'e2b images: %s\n' "$*" >&2; }

# source_tarball NAME: the cached root filesystem sandgate/NAME was imported from, or
# else one exported from the image.
source_tarball() {
	local found=""
	case "$1" in
	base) [[ -s "$base_tarball" ]] && found="$base_tarball" ;;
	code-interpreter) found=$(ls -t "$cache_dir"/code-interpreter-bookworm-*.tar 2>/dev/null | head -n 1) ;;
	esac
	if [[ -n "$found" ]]; then
		echo "$found"
		return
	fi
	local exported="$cache_dir/$1-export-$version.tar" id
	if [[ ! -s "$exported" ]]; then
		id=$(docker create "sandgate/$1:$version" /bin/true)
		docker export "$id" >"$exported.$$.tmp" && mv "$exported.$$.tmp" "$exported"
		docker rm -f "$id" >/dev/null
	fi
	echo "$exported"
}

# build NAME SOURCE: sandgate/e2b-NAME:VERSION from SOURCE's cached root filesystem.
build() {
	local name=$1 source=$2 image="sandgate/e2b-$1:$version"
	if docker image inspect "$image" >/dev/null 2>&1; then
		log "$image present"
		return
	fi
	local src
	src=$(source_tarball "$source")
	if [[ ! -s "$src" ]]; then
		log "no root filesystem of sandgate/$source: run images/build.sh first"
		exit 1
	fi
	local key tarball
	key=$(printf '%s|%s|%s' "$(basename "$src")" "$extra_packages" "$(sha256sum "$0" | cut -c1-12)" | sha256sum | cut -c1-12)
	tarball="$cache_dir/e2b-$name-$key.tar"
	if [[ ! -s "$tarball" ]]; then
		local work rootfs
		work=$(mktemp -d "$cache_dir/e2b-$name.XXXXXX")
		rootfs="$work/rootfs"
		# shellcheck disable=SC2064
		trap "mountpoint -q '$rootfs/proc' && umount -l '$rootfs/proc'; rm -rf '$work'" RETURN
		mkdir -p "$rootfs"
		tar -C "$rootfs" -xf "$src"
		log "installing $extra_packages into $name"
		cp /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
		printf 'deb %s bookworm main\n' "$mirror" >"$rootfs/etc/apt/sources.list"
		mount -t proc proc "$rootfs/proc"
		printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
		chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
		chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
			sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $extra_packages" \
			>"$work/apt.log" 2>&1 || {
			tail -n 40 "$work/apt.log" >&2
			exit 1
		}
		chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c '
			set -e
			useradd --create-home --uid 1000 --user-group --shell /bin/bash user
			printf "user ALL=(ALL:ALL) NOPASSWD: ALL\n" >/etc/sudoers.d/user
			chmod 0440 /etc/sudoers.d/user
			apt-get clean
			rm -rf /var/lib/apt/lists/* /tmp/* /var/tmp/*'
		rm -f "$rootfs/usr/sbin/policy-rc.d"
		: >"$rootfs/etc/resolv.conf"
		umount -l "$rootfs/proc"
		chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c \
			'node --version >/dev/null && git --version >/dev/null && test -x /usr/bin/sudo && id user >/dev/null' || {
			log "$name: the root filesystem lacks node, git, sudo or the user"
			exit 1
		}
		tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
		mv "$tarball.tmp" "$tarball"
	fi
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'WORKDIR /home/user' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL sandgate.io/e2b-template=$name" \
		- "$image" <"$tarball" >/dev/null
	log "built $image"
}

for name in "${wanted[@]}"; do
	case "$name" in
	base | code-interpreter) build "$name" "$name" ;;
	*)
		log "unknown template image $name (base or code-interpreter)"
		exit 2
		;;
	esac
done
