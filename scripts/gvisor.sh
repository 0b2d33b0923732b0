#!/usr/bin/env bash
# Builds gVisor's runsc from the Go module proxy and registers it with dockerd as the OCI
# runtime "runsc", so that a sandbox created with runtimes.Spec.Runtime = "runsc" runs on
# gVisor's user-space kernel instead of the host's.
#
#   scripts/gvisor.sh            build (if not cached) and register
#   scripts/gvisor.sh build      build only
#   scripts/gvisor.sh register   register an already built runsc
#   scripts/gvisor.sh status     say what is built and registered; exit 1 if not usable
#
# Environment:
#   RUNSC_VERSION      module version to build (default: the newest one already cached,
#                      else gvisor.dev/gvisor@latest as the module proxy resolves it)
#   SANDGATE_CACHE     cache root outside the repository (default /var/cache/sandgate)
#   DOCKER_DAEMON_JSON dockerd's config file (default /etc/docker/daemon.json)
#
# Why CGO_ENABLED=0: a cgo build of runsc links the host's libc and fails when the
# sandbox starts; gVisor is meant to be a static binary.
#
# Why no dockerd restart: "runtimes" is one of the settings dockerd reloads on SIGHUP, so
# registration never stops running containers or other tests. The reload happens only
# when the registration actually changed.
set -euo pipefail

CACHE=${SANDGATE_CACHE:-/var/cache/sandgate}
DAEMON_JSON=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
BUILDS="$CACHE/runsc"            # one directory per module version
LINK="$CACHE/bin/runsc"          # the stable path dockerd is given
MODULE=gvisor.dev/gvisor

log() { echo "gvisor: $*" >&2; }

# newest_cached prints the version of the most recently built runsc, if any.
newest_cached() {
	local d
	d=$(ls -1td "$BUILDS"/v*/ 2>/dev/null | while read -r x; do [ -x "$x/runsc" ] && echo "$x" && break; done)
	[ -n "$d" ] && basename "$d"
}

resolve_version() {
	if [ -n "${RUNSC_VERSION:-}" ]; then
		echo "$RUNSC_VERSION"
		return
	fi
	if v=$(newest_cached); then
		echo "$v"
		return
	fi
	# gVisor tags no semver releases on its Go branch; @latest is a pseudo-version.
	local out
	if ! out=$(cd / && GOFLAGS=-mod=mod go list -m -f '{{.Version}}' "$MODULE@latest" 2>&1); then
		log "the Go module proxy ($(go env GOPROXY)) did not resolve $MODULE@latest: $out"
		exit 1
	fi
	echo "$out"
}

build() {
	local version dir
	version=$(resolve_version)
	dir="$BUILDS/$version"
	if [ -x "$dir/runsc" ]; then
		log "runsc $version already built at $dir/runsc"
	else
		command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
		mkdir -p "$dir"
		log "building runsc $version (CGO_ENABLED=0; this takes 10+ minutes on 2 cores; log: $dir.build.log)"
		# Outside any module, so the repository's go.mod is neither read nor touched.
		if ! (cd / && CGO_ENABLED=0 GOBIN="$dir" GOFLAGS=-buildvcs=false \
			go install "$MODULE/runsc@$version") >"$dir.build.log" 2>&1; then
			log "go install $MODULE/runsc@$version failed:"
			tail -20 "$dir.build.log" >&2
			rmdir "$dir" 2>/dev/null || true
			exit 1
		fi
	fi
	mkdir -p "$(dirname "$LINK")"
	ln -sfn "$dir/runsc" "$LINK"
	log "runsc $version -> $LINK ($("$LINK" --version 2>/dev/null | head -1))"
}

# registered prints the path dockerd currently runs for "runsc", empty when none.
registered() {
	docker info --format '{{with index .Runtimes "runsc"}}{{.Path}}{{end}}' 2>/dev/null || true
}

register() {
	[ -x "$LINK" ] || { log "$LINK is missing; run: scripts/gvisor.sh build"; exit 1; }
	command -v python3 >/dev/null || { log "python3 is needed to edit $DAEMON_JSON"; exit 1; }
	mkdir -p "$(dirname "$DAEMON_JSON")"
	# Merge, never overwrite: other settings of the operator's daemon.json stay as they are.
	changed=$(python3 - "$DAEMON_JSON" "$LINK" <<-'EOF'
		import json, os, sys
		path, runsc = sys.argv[1], sys.argv[2]
		cfg = {}
		if os.path.exists(path) and os.path.getsize(path) > 0:
		    with open(path) as f:
		        cfg = json.load(f)
		want = {"path": runsc}
		if cfg.get("runtimes", {}).get("runsc") == want:
		    print("no")
		    sys.exit(0)
		cfg.setdefault("runtimes", {})["runsc"] = want
		tmp = path + ".sandgate-tmp"
		with open(tmp, "w") as f:
		    json.dump(cfg, f, indent=2)
		    f.write("\n")
		os.replace(tmp, path)
		print("yes")
	EOF
	)
	if [ "$changed" = no ] && [ "$(registered)" = "$LINK" ]; then
		log "runsc already registered with dockerd ($LINK)"
		return
	fi
	reload_dockerd
	for _ in $(seq 1 20); do
		[ "$(registered)" = "$LINK" ] && { log "registered runsc with dockerd ($LINK)"; return; }
		sleep 0.25
	done
	log "dockerd did not pick up the runtime after a reload; its config file may not be $DAEMON_JSON (see dockerd's log)"
	exit 1
}

# reload_dockerd asks dockerd to re-read daemon.json: SIGHUP reloads "runtimes" live.
reload_dockerd() {
	if command -v systemctl >/dev/null && systemctl is-active --quiet docker 2>/dev/null; then
		systemctl reload docker
		return
	fi
	local pid
	pid=$(cat /var/run/docker.pid 2>/dev/null || true)
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || { log "no running dockerd found (/var/run/docker.pid)"; exit 1; }
	kill -HUP "$pid"
}

status() {
	local path
	path=$(registered)
	if [ -x "$LINK" ]; then log "built: $(readlink -f "$LINK")"; else log "built: no"; fi
	if [ -n "$path" ]; then log "registered with dockerd as runsc: $path"; else log "registered: no"; fi
	[ -x "$LINK" ] && [ -n "$path" ]
}

case "${1:-all}" in
all) build && register ;;
build) build ;;
register) register ;;
status) status ;;
*) echo "usage: $0 [all|build|register|status]" >&2; exit 2 ;;
esac
