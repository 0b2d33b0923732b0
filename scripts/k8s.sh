#!/usr/bin/env bash
# A local Kubernetes control plane for sandgate's tests and benchmarks, built from
# source through the Go module proxy and run on loopback only.
#
#   scripts/k8s.sh build              build the binaries unless cached; print the bin dir
#   scripts/k8s.sh up [--node] [STATE_DIR]  start a cluster (--node: with a real node too,
#                                     see scripts/k8s-node.sh); print its kubeconfig path last
#   scripts/k8s.sh down [STATE_DIR]   stop what `up` started and remove STATE_DIR
#   scripts/k8s.sh status [STATE_DIR] exit 0 when that cluster answers
#   scripts/k8s.sh load STATE_DIR IMAGE...  copy Docker images into the real node
#   scripts/k8s.sh node-prereqs       print what this machine lacks for a real node
#
# STATE_DIR defaults to $PWD/.sandgate/k8s. It holds the certificates, the kubeconfig,
# the etcd data, one log and one pid file per process, and `env` (ports and URLs).
#
# What runs: etcd, kube-apiserver, kube-controller-manager and kube-scheduler (real ones,
# built from k8s.io/kubernetes), and kwok, which plays the kubelet for three fake nodes
# kwok-node-0..2. kwok marks each scheduled pod Running and gives it an IP from its
# node's spec.podCIDR; those CIDRs are 127.64.(16N).0/20, so every pod IP is a loopback
# address that a test can bind a real process to (the e2e harness starts a real
# sandbox-agent on each Running pod's IP). Nothing ever listens on or routes to a
# private range. No container runtime exists: only the kubelet's job is simulated.
#
# Environment:
#   SANDGATE_K8S_CACHE  where binaries are cached (default /var/cache/sandgate/k8s/<k8s version>)
#
# Versions are the ones pinned in test/k8s/controlplane/{go.mod,etcd/go.mod,kwok/go.mod};
# each cached binary carries a .version file and is rebuilt when its pin changes. The cold
# build takes about 20 minutes on two cores; afterwards `up` takes seconds.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODDIR="$ROOT/test/k8s/controlplane"
K8S_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$MODDIR/go.mod")
ETCD_VERSION=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$MODDIR/etcd/go.mod")
KWOK_VERSION=$(awk '$1 == "require" && $2 == "sigs.k8s.io/kwok" {print $3}' "$MODDIR/kwok/go.mod")
CACHE=${SANDGATE_K8S_CACHE:-/var/cache/sandgate/k8s/$K8S_VERSION}
NODES=3
# Pod IPs: node N gets 127.64.(16N).0/20, 4094 addresses: a /24 holds fewer pods than a
# thousand-pod benchmark puts on three nodes, and kwok then hands out an address twice.
# kwok's fallback CIDR (used only for a pod whose node has no podCIDR) is inside the same
# loopback block.
POD_CIDR_PREFIX=127.64
KWOK_FALLBACK_CIDR=127.64.255.0/24
# Service ClusterIPs are only allocated, never routed (there is no kube-proxy); the range
# is loopback as well so that no address the cluster hands out points off this machine.
SERVICE_CIDR=127.96.0.0/16

log() { echo "k8s: $*" >&2; }
# shellcheck source=scripts/k8s-node.sh
. "$ROOT/scripts/k8s-node.sh"
die() {
	log "$*"
	exit 1
}

# --- build ----------------------------------------------------------------------------

# build_one NAME VERSION_STAMP MODULE_DIR [go build args...]: builds when the cached binary
# is missing or was built from another pin.
build_one() {
	local name=$1 stamp=$2 dir=$3
	shift 3
	if [ -x "$CACHE/$name" ] && [ "$(cat "$CACHE/$name.version" 2>/dev/null)" = "$stamp" ]; then
		return
	fi
	log "building $name ($stamp) — slow the first time"
	local start tmp
	start=$(date +%s)
	tmp=$(mktemp -d "$CACHE/.build-$name.XXXXXX")
	# -trimpath and no cgo: a static binary that does not depend on where it was built.
	# GOWORK=off: these modules are built alone, never with the root module.
	if ! (cd "$dir" && GOWORK=off CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false" go build -o "$tmp/$name" "$@") >&2; then
		rm -rf "$tmp"
		die "building $name failed"
	fi
	mv "$tmp/$name" "$CACHE/$name"
	echo "$stamp" >"$CACHE/$name.version"
	rm -rf "$tmp"
	log "built $name in $(($(date +%s) - start))s"
}

build() {
	mkdir -p "$CACHE"
	# One build at a time per cache: parallel test packages may all call `up`.
	exec 9>"$CACHE/.build.lock"
	flock 9
	local ver_ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
	ver_ld+=" -X k8s.io/component-base/version.gitMajor=$(echo "${K8S_VERSION#v}" | cut -d. -f1)"
	ver_ld+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
	ver_ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
	local c
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		build_one "$c" "k8s.io/kubernetes@$K8S_VERSION" "$MODDIR" -ldflags "$ver_ld" "k8s.io/kubernetes/cmd/$c"
	done
	build_one etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "$MODDIR/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
	node_build "$ver_ld"
	build_one kwok "sigs.k8s.io/kwok@$KWOK_VERSION" "$MODDIR/kwok" -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok
	if [ ! -s "$CACHE/kwok-stages.yaml" ] || [ "$(cat "$CACHE/kwok-stages.yaml.version" 2>/dev/null)" != "$KWOK_VERSION" ]; then
		(cd "$MODDIR/kwok" && GOWORK=off go run ./stages) >"$CACHE/kwok-stages.yaml.tmp"
		mv "$CACHE/kwok-stages.yaml.tmp" "$CACHE/kwok-stages.yaml"
		echo "$KWOK_VERSION" >"$CACHE/kwok-stages.yaml.version"
	fi
	exec 9>&-
}

# --- helpers for up/down --------------------------------------------------------------

# free_port prints a TCP port that nothing on this machine listens on. Ports come from a
# range below the kernel's ephemeral range so outgoing connections do not take them.
declare -A TAKEN=()
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		[ -n "${TAKEN[$p]:-}" ] && continue
		if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
			TAKEN[$p]=1
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# cert NAME CN [O] [SAN]: an EC key and a certificate signed by the cluster CA.
cert() {
	local name=$1 cn=$2 org=${3:-} san=${4:-} subj ext
	subj="/CN=$cn"
	[ -n "$org" ] && subj="/O=$org$subj"
	ext="$PKI/$name.ext"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$ext"
}

# kubeconfig FILE CERTNAME: a kubeconfig for the apiserver with that client certificate,
# everything embedded so the file can be copied anywhere on this machine.
kubeconfig() {
	local file=$1 name=$2
	cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandgate-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: sandgate-local
  context:
    cluster: sandgate-local
    user: $name
current-context: sandgate-local
EOF
	chmod 600 "$file"
}

# api METHOD PATH [BODY]: one request to the apiserver as the admin user.
api() {
	local method=$1 path=$2 body=${3:-}
	# A user agent other than curl's: the apiserver indents JSON for curl, and the checks
	# below grep compact JSON.
	local args=(-sS -A sandgate-k8s.sh --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X "$method"
		--max-time 10 "https://127.0.0.1:$APISERVER_PORT$path")
	if [ -n "$body" ]; then
		args+=(-H 'Content-Type: application/json' -d "$body")
	fi
	curl "${args[@]}"
}

# start NAME ARGS...: starts a process in its own session (so a Ctrl-C in the shell that
# ran `up` does not stop the cluster), logging to STATE/logs/NAME.log.
start() {
	local name=$1
	shift
	setsid "$@" </dev/null >"$STATE/logs/$name.log" 2>&1 &
	echo $! >"$STATE/pids/$name"
}

alive() { # alive NAME: the process `up` started under NAME still runs.
	local pid
	pid=$(cat "$STATE/pids/$1" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null
}

# wait_for WHAT SECONDS COMMAND...: retries COMMAND until it succeeds; on timeout prints
# the tail of every log so the failure explains itself.
wait_for() {
	local what=$1 secs=$2 deadline
	shift 2
	deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		local n
		for n in "$STATE"/pids/*; do
			alive "$(basename "$n")" || {
				tail -30 "$STATE/logs/$(basename "$n").log" >&2
				die "$(basename "$n") exited while waiting for $what (log: $STATE/logs/$(basename "$n").log)"
			}
		done
		if [ "$(date +%s)" -ge "$deadline" ]; then
			for n in "$STATE"/logs/*.log; do
				log "--- $n"
				tail -15 "$n" >&2
			done
			die "timed out after ${secs}s waiting for $what"
		fi
		sleep 0.2
	done
}

state_dir() {
	local d=${1:-$PWD/.sandgate/k8s}
	mkdir -p "$(dirname "$d")"
	echo "$(cd "$(dirname "$d")" && pwd)/$(basename "$d")"
}

# --- up ---------------------------------------------------------------------------------

readyz() { [ "$(api GET /readyz)" = ok ]; }

nodes_ready() {
	local i out
	for i in $(seq 0 $((NODES - 1))); do
		out=$(api GET "/api/v1/nodes/kwok-node-$i") || return 1
		grep -q '"type":"Ready","status":"True"' <<<"$out" || return 1
	done
}

default_sa() {
	local out
	out=$(api GET /api/v1/namespaces/default/serviceaccounts/default) && grep -q '"kind":"ServiceAccount"' <<<"$out"
}

status() {
	[ -f "$STATE/env" ] || return 1
	# shellcheck disable=SC1091
	. "$STATE/env"
	local c
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
		alive "$c" || return 1
	done
	if [ -d "$STATE/node" ]; then
		alive containerd && alive kubelet || return 1
	fi
	readyz
}

up() {
	if [ -f "$STATE/.sandgate-k8s" ]; then
		if status; then
			log "already up (state $STATE); reusing it"
			if [ "$WITH_NODE" = 1 ] && [ ! -d "$STATE/node" ]; then
				node_up
			fi
			echo "$STATE/kubeconfig"
			return
		fi
		log "a previous cluster in $STATE is not healthy; stopping it first"
		down
	fi
	[ ! -e "$STATE" ] || [ -z "$(ls -A "$STATE")" ] || die "$STATE exists and is not a cluster state directory; refusing to use it"

	local bin t0
	t0=$(date +%s%N)
	build
	bin=$CACHE
	mkdir -p "$STATE"/{pki,logs,pids,etcd}
	touch "$STATE/.sandgate-k8s"
	# If anything below fails, stop what was started and leave no half cluster behind.
	trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed; stopping what was started"; down >/dev/null 2>&1 || true; fi' EXIT

	ETCD_PORT=$(free_port)
	ETCD_PEER_PORT=$(free_port)
	APISERVER_PORT=$(free_port)
	cat >"$STATE/env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
KUBECONFIG=$STATE/kubeconfig
K8S_VERSION=$K8S_VERSION
EOF

	# Certificates: one CA; the apiserver's serving certificate for loopback names; one
	# client certificate per component so RBAC sees the identities a real cluster has.
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandgate-local-ca" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/ca.crt" 2>/dev/null
	cert apiserver kube-apiserver "" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	cert admin admin system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	# kwok plays every kubelet, so it needs more than one node's rights: admin.
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
	openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	kubeconfig "$STATE/kubeconfig" admin
	kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
	kubeconfig "$STATE/scheduler.kubeconfig" scheduler

	# --unsafe-no-fsync: the data is thrown away with the state directory; skipping fsync
	# keeps a pool fill from waiting on the disk that other builds are hammering.
	start etcd "$bin/etcd" --name default --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync --log-level warn
	wait_for etcd 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

	# --endpoint-reconciler-type=none: the apiserver would publish its own address as the
	# `kubernetes` Service's endpoint, and Endpoints refuse loopback addresses.
	start kube-apiserver "$bin/kube-apiserver" \
		--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
		--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--client-ca-file "$PKI/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--authorization-mode RBAC \
		--endpoint-reconciler-type none \
		--allow-privileged=true \
		--enable-admission-plugins PodNodeSelector,PodTolerationRestriction \
		--kubelet-preferred-address-types Hostname,InternalIP \
		--profiling=false
	wait_for "kube-apiserver /readyz" 180 readyz

	# --use-service-account-credentials: each controller acts as its own service account
	# with its bootstrap role (as kubeadm sets it up); the controller-manager's own identity
	# only creates those accounts and would be refused everything else.
	start kube-controller-manager "$bin/kube-controller-manager" \
		--kubeconfig "$STATE/controller-manager.kubeconfig" \
		--secure-port 0 --leader-elect=false \
		--use-service-account-credentials=true \
		--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--kube-api-qps 200 --kube-api-burst 400

	cat >"$STATE/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE/scheduler.kubeconfig
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
EOF
	start kube-scheduler "$bin/kube-scheduler" --config "$STATE/scheduler.yaml" --secure-port 0

	# kwok manages only nodes annotated kwok.x-k8s.io/node=fake; the stages (what happens to
	# a node or pod, and when) are kwok's own defaults, written at build time.
	{
		cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: $KWOK_FALLBACK_CIDR
  nodeIP: 127.0.0.1
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  manageAllNodes: false
  nodeLeaseDurationSeconds: 40
  # A configuration file gets none of kwok's defaults: every knob is spelled out.
  nodeLeaseParallelism: 4
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: false
  enableProfilingHandler: false
  enableContentionProfiling: false
EOF
		cat "$CACHE/kwok-stages.yaml"
	} >"$STATE/kwok.yaml"
	start kwok "$bin/kwok" --kubeconfig "$STATE/kubeconfig" --config "$STATE/kwok.yaml"

	local i
	for i in $(seq 0 $((NODES - 1))); do
		api POST /api/v1/nodes "$(node_json "$i")" >"$STATE/logs/node-$i.create.json" || true
		grep -q '"kind":"Node"' "$STATE/logs/node-$i.create.json" || {
			cat "$STATE/logs/node-$i.create.json" >&2
			die "creating kwok-node-$i failed"
		}
	done
	wait_for "nodes Ready" 120 nodes_ready
	# The ServiceAccount admission plugin rejects pods until the controller-manager has
	# created the namespace's default ServiceAccount: wait for it so the first test pod does
	# not race it.
	wait_for "default ServiceAccount" 120 default_sa
	if [ "$WITH_NODE" = 1 ]; then
		node_up
	fi
	trap - EXIT

	log "up in $((($(date +%s%N) - t0) / 1000000)) ms: apiserver https://127.0.0.1:$APISERVER_PORT ($K8S_VERSION), etcd $ETCD_VERSION, kwok $KWOK_VERSION, nodes kwok-node-0..$((NODES - 1)) (pod CIDRs $POD_CIDR_PREFIX.16N.0/20)"
	log "state: $STATE (logs/, pids/, env); stop with: scripts/k8s.sh down $STATE"
	echo "$STATE/kubeconfig"
}

# node_json N: kwok-node-N, labelled for nodeSelectors, with a loopback pod CIDR and room
# for far more pods than a test makes. No taint: every node in this cluster is a kwok node.
node_json() {
	local n=$1
	cat <<EOF
{"apiVersion":"v1","kind":"Node","metadata":{"name":"kwok-node-$n",
 "annotations":{"kwok.x-k8s.io/node":"fake","node.alpha.kubernetes.io/ttl":"0"},
 "labels":{"type":"kwok","kubernetes.io/hostname":"kwok-node-$n","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64"}},
 "spec":{"podCIDR":"$POD_CIDR_PREFIX.$((n * 16)).0/20","podCIDRs":["$POD_CIDR_PREFIX.$((n * 16)).0/20"]},
 "status":{"capacity":{"cpu":"64","memory":"256Gi","pods":"1000"},
  "allocatable":{"cpu":"64","memory":"256Gi","pods":"1000"},
  "addresses":[{"type":"InternalIP","address":"127.63.0.$((n + 1))"},{"type":"Hostname","address":"kwok-node-$n"}]}}
EOF
}

# --- down -------------------------------------------------------------------------------

down() {
	if [ ! -e "$STATE" ]; then
		return
	fi
	[ -f "$STATE/.sandgate-k8s" ] || die "$STATE is not a cluster state directory (no .sandgate-k8s); not touching it"
	node_down
	local c pid
	# Reverse start order: kwok and the controllers first, so nothing reacts to the
	# apiserver going away; etcd last.
	for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
		pid=$(cat "$STATE/pids/$c" 2>/dev/null) || continue
		# Only a process still running our cached binary: the pid may have been reused.
		if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "/$c "; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 50); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	rm -rf "$STATE"
	log "down: removed $STATE"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
build)
	build
	echo "$CACHE"
	;;
up)
	WITH_NODE=0
	if [ "${1:-}" = --node ]; then
		WITH_NODE=1
		shift
	fi
	STATE=$(state_dir "${1:-}")
	PKI="$STATE/pki"
	up
	;;
down)
	STATE=$(state_dir "${1:-}")
	down
	;;
load)
	STATE=$(state_dir "${1:-}")
	shift
	[ -S "$STATE/node/containerd.sock" ] || die "$STATE has no real node (start it with: scripts/k8s.sh up --node $STATE)"
	node_load "$@"
	;;
node-prereqs)
	node_prereqs
	;;
status)
	STATE=$(state_dir "${1:-}")
	PKI="$STATE/pki"
	if status; then
		echo "up: $STATE/kubeconfig"
	else
		echo "down"
		exit 1
	fi
	;;
*)
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
