# Sourced by scripts that build a Go command from source through the module proxy, at the
# version a go.mod of its own pins, into a cache outside the repository (scripts/helm.sh,
# scripts/registry.sh).
#
# build_cached_go_tool NAME MODDIR PACKAGE CACHE VERSION [LDFLAGS]: builds PACKAGE (static,
# in MODDIR's module) into CACHE/NAME unless the cache already holds that VERSION; prints
# the binary's path. Concurrent calls take turns on CACHE/.lock.
build_cached_go_tool() {
	local name=$1 moddir=$2 pkg=$3 cache=$4 version=$5 ldflags=${6:-}
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ -x "$cache/$name" ] && [ "$(cat "$cache/$name.version" 2>/dev/null)" = "$version" ]; then
		echo "$cache/$name"
		return
	fi
	echo "$name: building $pkg $version (a few minutes the first time)" >&2
	local start tmp
	start=$(date +%s)
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	if ! (cd "$moddir" && GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -mod=mod" \
		go build -ldflags "-s -w $ldflags" -o "$tmp/$name" "$pkg") >&2; then
		rm -rf "$tmp"
		echo "$name: building $pkg failed" >&2
		exit 1
	fi
	mv "$tmp/$name" "$cache/$name"
	echo "$version" >"$cache/$name.version"
	rm -rf "$tmp"
	echo "$name: built $cache/$name in $(($(date +%s) - start))s" >&2
	echo "$cache/$name"
}
