#!/usr/bin/env bash
# Tags sandgate's code interpreter image as opensandbox/code-interpreter:latest, with the
# entrypoint script the OpenSandbox code-interpreter SDKs name
# (/opt/code-interpreter/code-interpreter.sh, also at /opt/opensandbox/), so that their
# default image and entrypoint work against sandgate with no image argument. No registry:
# docker create + docker cp + docker commit on the local image.
#
# Turn it off with SANDGATE_OPENSANDBOX_ALIAS=off (nothing is tagged, and an alias made
# earlier is left alone: `docker rmi opensandbox/code-interpreter:latest` removes it), or
# refuse it at admission with the platform data denied_images
# ["opensandbox/code-interpreter*"] (docs/security.md).
#
# The alias is rebuilt when the source image or the script changes (label
# sandgate.io/alias-of holds both).
#
# Usage: images/opensandbox-alias.sh VERSION
set -euo pipefail
version="${1:?usage: $0 VERSION}"
here=$(cd "$(dirname "$0")" && pwd)
source_image="sandgate/code-interpreter:${version}"
alias_image="${SANDGATE_OPENSANDBOX_ALIAS_IMAGE:-opensandbox/code-interpreter:latest}"
script="$here/opensandbox/code-interpreter.sh"
log() { printf 'opensandbox-alias: %s\n' "$*" >&2; }

case "${SANDGATE_OPENSANDBOX_ALIAS:-on}" in
off | 0 | false | no)
	log "SANDGATE_OPENSANDBOX_ALIAS=off: not tagging $alias_image"
	exit 0
	;;
esac
if ! source_id=$(docker image inspect -f '{{.Id}}' "$source_image" 2>/dev/null); then
	log "$source_image is missing; build it first (images/code-interpreter.sh)"
	exit 1
fi
want="${source_id}+$(sha256sum "$script" | cut -c1-16)"
have=$(docker image inspect -f '{{index .Config.Labels "sandgate.io/alias-of"}}' "$alias_image" 2>/dev/null || true)
if [[ "$have" == "$want" ]]; then
	log "$alias_image is current"
	exit 0
fi

dir=$(mktemp -d)
cid=""
cleanup() {
	[[ -n "$cid" ]] && docker rm -f "$cid" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
install -d "$dir/opt/code-interpreter" "$dir/opt/opensandbox"
install -m 0755 "$script" "$dir/opt/code-interpreter/code-interpreter.sh"
install -m 0755 "$script" "$dir/opt/opensandbox/code-interpreter.sh"
cid=$(docker create "$source_image" /bin/true)
docker cp "$dir/opt/." "$cid:/opt/"
docker commit \
	--change 'CMD ["/opt/code-interpreter/code-interpreter.sh"]' \
	--change 'WORKDIR /root' \
	--change "LABEL sandgate.io/alias-of=$want org.opencontainers.image.title=sandgate-code-interpreter-opensandbox-alias" \
	"$cid" "$alias_image" >/dev/null
log "tagged $alias_image (from $source_image)"
