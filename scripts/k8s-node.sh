# shellcheck shell=bash
# The real node of the local cluster, sourced by scripts/k8s.sh (`up --node`, `down`,
# `load`): a kubelet on a containerd of its own, so sandbox pods run as real containers
# beside the kwok nodes' simulated ones.
#
# What runs, all of it under STATE/node:
#   - containerd (Debian's package) as a second instance with its own root, state, socket
#     and config; never the one Docker uses. runc runs the containers, with the cgroupfs
#     driver (this host is cgroup v1) and restrict_oom_score_adj (the host does not let a
#     process lower its oom_score_adj, and runc fails without it).
#   - the bridge + host-local CNI plugins (containernetworking-plugins) on a /24 of
#     10.213.0.0/16 and a bridge made here; no masquerade, one FORWARD rule that drops
#     whatever a pod sends off the bridge and one that lets pods reach each other on it,
#     so pod traffic reaches this host and the node's pods and nothing beyond.
#   - a kubelet built from k8s.io/kubernetes at the control plane's pin, named
#     localhost, listening on 127.0.0.1 only with anonymous access (the control plane
#     has no kubelet client certificate), registered with the label and taint
#     sandgate.io/node=real so only pods that ask for it land there (the apiserver's
#     PodNodeSelector and PodTolerationRestriction plugins give the selector and the
#     toleration to every pod of a namespace annotated for it, as realNodeNamespace in
#     test/k8s does).
#     It runs in a mount namespace of its own in which the /proc/sys files it would set
#     (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops) are covered by files
#     that already hold the values it wants, so the machine's settings stay as they are;
#     its root directory is a shared mount, so the volumes it mounts there reach runc.
#   - the pod sandbox image sandgate/pause:1, built here from test/k8s/controlplane/pause
#     (no registry is reachable to pull one from).
# Images reach the node with `scripts/k8s.sh load STATE IMAGE...` (docker save | ctr
# import); nothing is ever pulled.

# The apiserver reaches a kubelet (logs, exec) by its node's Hostname address, the node's
# name; "localhost" resolves to loopback everywhere, where this kubelet listens. A
# loopback InternalIP is refused by the kubelet.
NODE_NAME=localhost
NODE_LABEL=sandgate.io/node
PAUSE_IMAGE=sandgate/pause:1
NODE_SUBNET_PREFIX=10.213
CNI_BIN=/usr/lib/cni

# node_prereqs prints what the machine lacks for a real node, nothing when it has it all.
node_prereqs() {
	local missing=() b
	for b in containerd ctr runc containerd-shim-runc-v2 unshare iptables docker; do
		command -v "$b" >/dev/null || missing+=("$b")
	done
	for b in bridge host-local loopback; do
		[ -x "$CNI_BIN/$b" ] || missing+=("$CNI_BIN/$b")
	done
	[ "$(id -u)" -eq 0 ] || missing+=("root")
	[ ${#missing[@]} -eq 0 ] || echo "${missing[*]} (scripts/deps.sh installs the packages)"
}

# node_build builds the kubelet, crireset and the pause binary into the cache unless
# they are there.
node_build() {
	local ver_ld=$1
	build_one kubelet "k8s.io/kubernetes@$K8S_VERSION" "$MODDIR" -ldflags "$ver_ld" k8s.io/kubernetes/cmd/kubelet
	local stamp
	stamp=$(cat "$MODDIR/pause/main.go" "$MODDIR/crireset/main.go" "$MODDIR/go.sum" | sha256sum | cut -c1-16)
	build_one pause "$stamp" "$MODDIR" -ldflags "-s -w" ./pause
	build_one crireset "$stamp" "$MODDIR" -ldflags "-s -w" ./crireset
}

# node_pause_image makes sure Docker holds the pause image of the cached pause binary.
node_pause_image() {
	local stamp
	stamp=$(cat "$CACHE/pause.version")
	if [ "$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$PAUSE_IMAGE" 2>/dev/null)" != "$stamp" ]; then
		local dir
		dir=$(mktemp -d)
		install -m 0755 "$CACHE/pause" "$dir/pause"
		tar --owner=0 --group=0 --numeric-owner -C "$dir" -cf "$dir/pause.tar" pause
		docker import --change 'ENTRYPOINT ["/pause"]' --change "LABEL org.opencontainers.image.version=$stamp" \
			"$dir/pause.tar" "$PAUSE_IMAGE" >/dev/null
		rm -rf "$dir"
	fi
}

# node_pick_subnet prints a free 10.213.N.0/24 (no route of this host covers it) and the
# bridge name for it; callers hold the machine-wide node lock.
node_pick_subnet() {
	local n routes
	routes=$(ip -4 route show)
	for n in $(seq 0 255); do
		grep -q "^$NODE_SUBNET_PREFIX\.$n\.0/24 " <<<"$routes" && continue
		echo "$NODE_SUBNET_PREFIX.$n"
		return
	done
	die "no free /24 in $NODE_SUBNET_PREFIX.0.0/16 for the node's bridge"
}

node_containerd_ready() { ctr -a "$NODE/containerd.sock" version; }
node_ready() { api GET "/api/v1/nodes/$NODE_NAME" | grep -q '"type":"Ready","status":"True"'; }

node_up() {
	local why
	why=$(node_prereqs)
	[ -z "$why" ] || die "a real node needs: $why"
	NODE=$STATE/node
	local t0 base bridge subnet gateway
	t0=$(date +%s%N)
	mkdir -p "$NODE"/{containerd/root,containerd/state,cni/net.d,cni/ipam,kubelet,sysctl,pod-logs,var-lib-kubelet,var-log-containers,plugins}
	# One node set-up at a time on this machine: the subnet and bridge are picked by
	# looking at what exists.
	exec 8>/run/sandgate-k8s-node.lock
	flock 8
	base=$(node_pick_subnet)
	subnet=$base.0/24
	gateway=$base.1
	bridge=sgn$(basename "$STATE" | sha256sum | cut -c1-8)
	ip link add "$bridge" type bridge
	echo "$bridge" >"$NODE/bridge"
	ip addr add "$gateway/24" dev "$bridge"
	ip link set "$bridge" up
	exec 8>&-
	# Pods talk to this host (the bridge address) and to each other (Docker's FORWARD
	# policy would drop that); nothing they send is forwarded off the bridge.
	iptables -I FORWARD -i "$bridge" ! -o "$bridge" -j DROP -m comment --comment "sandgate-node-$bridge"
	echo "FORWARD -i $bridge ! -o $bridge -j DROP -m comment --comment sandgate-node-$bridge" >"$NODE/iptables"
	iptables -I FORWARD -i "$bridge" -o "$bridge" -j ACCEPT -m comment --comment "sandgate-node-$bridge"
	echo "FORWARD -i $bridge -o $bridge -j ACCEPT -m comment --comment sandgate-node-$bridge" >>"$NODE/iptables"
	cat >>"$STATE/env" <<EOF
NODE_NAME=$NODE_NAME
NODE_LABEL=$NODE_LABEL=real
NODE_BRIDGE=$bridge
NODE_SUBNET=$subnet
NODE_HOST_IP=$gateway
NODE_CONTAINERD=$NODE/containerd.sock
EOF

	cat >"$NODE/cni/net.d/10-sandgate.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "sandgate-node", "plugins": [{
  "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": "$NODE/cni/ipam",
           "ranges": [[{"subnet": "$subnet", "gateway": "$gateway"}]],
           "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
	# The stream server (exec, attach, port-forward) listens on loopback at a free port;
	# the unused snapshotters are left out so their probes do not fill the log.
	cat >"$NODE/containerd.toml" <<EOF
version = 2
root = "$NODE/containerd/root"
state = "$NODE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$NODE/containerd.sock"
[ttrpc]
  address = "$NODE/containerd.ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$NODE/cni/net.d"
EOF
	start containerd containerd --config "$NODE/containerd.toml"
	wait_for "the node's containerd" 60 node_containerd_ready
	node_pause_image
	node_load "$PAUSE_IMAGE"

	kubeconfig "$NODE/kubelet.kubeconfig" admin
	# The cgroup root is this node's own, so a second node on the machine (another test
	# run) keeps its pods apart; eviction thresholds are low so a busy shared disk does
	# not taint the node; image GC is off, as nothing could pull an image back.
	cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /sandgate-$bridge
address: 127.0.0.1
port: $(free_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://$NODE/containerd.sock
podLogsDir: $NODE/pod-logs
volumePluginDir: $NODE/plugins
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
registerWithTaints:
- {key: $NODE_LABEL, value: real, effect: NoSchedule}
serializeImagePulls: false
resolvConf: $NODE/resolv.conf
EOF
	# A pod without DNS of its own (no cluster DNS here, no SANDGATE_SANDBOX_DNS) gets
	# this file, never the host's: it names the host's address on the node's bridge,
	# where nothing answers unless a test serves DNS there, so no lookup leaves the
	# machine.
	printf 'nameserver %s\noptions timeout:1 attempts:1\n' "$gateway" >"$NODE/resolv.conf"
	# The cgroup root exists in every hierarchy before the kubelet starts; cpuset needs
	# its CPUs and memory nodes spelt out.
	local h
	for h in /sys/fs/cgroup/*/; do
		[ -f "$h/cgroup.procs" ] || continue
		mkdir -p "$h/sandgate-$bridge"
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h/sandgate-$bridge/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h/sandgate-$bridge/cpuset.mems"
		fi
	done
	# The kubelet's root is a shared mount: what the kubelet mounts there from its own
	# mount namespace (tmpfs volumes) is seen by containerd and runc in the host's.
	mount --bind "$NODE/kubelet" "$NODE/kubelet"
	mount --make-shared "$NODE/kubelet"
	printf '1\n' >"$NODE/sysctl/overcommit_memory"
	printf '10\n' >"$NODE/sysctl/panic"
	printf '1\n' >"$NODE/sysctl/panic_on_oops"
	# /var/lib/kubelet and /var/log/containers are paths the kubelet uses whatever its
	# root: inside its namespace they are directories of this node.
	mkdir -p /var/lib/kubelet /var/log/containers
	cat >"$NODE/kubelet.sh" <<EOF
#!/bin/sh
set -e
mount --make-rprivate /proc
mount --bind "$NODE/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
mount --bind "$NODE/sysctl/panic" /proc/sys/kernel/panic
mount --bind "$NODE/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
mount --bind "$NODE/var-lib-kubelet" /var/lib/kubelet
mount --bind "$NODE/var-log-containers" /var/log/containers
exec "$CACHE/kubelet" --config "$NODE/kubelet.yaml" --kubeconfig "$NODE/kubelet.kubeconfig" \\
	--root-dir "$NODE/kubelet" --cert-dir "$NODE/kubelet-pki" \\
	--hostname-override "$NODE_NAME" --node-labels "$NODE_LABEL=real" -v 1
EOF
	chmod +x "$NODE/kubelet.sh"
	start kubelet unshare --mount --propagation unchanged "$NODE/kubelet.sh"
	wait_for "the real node Ready" 120 node_ready
	log "real node $NODE_NAME Ready in $((($(date +%s%N) - t0) / 1000000)) ms (bridge $bridge, pods on $subnet, host $gateway)"
}

# node_load IMAGE...: copies images from Docker into the node's containerd.
node_load() {
	local img
	for img in "$@"; do
		docker save "$img" | ctr -a "$STATE/node/containerd.sock" -n k8s.io images import - >/dev/null ||
			die "loading $img into the node failed"
	done
}

# node_down removes what node_up made, in the order that lets each step finish: the
# kubelet first (so it restarts nothing), then every pod sandbox through the CRI (its
# containers, network namespace, veth and address), containerd and its shims, the mounts,
# the firewall rule and the bridge.
# stop_node_process NAME: stops the process node_up started under NAME, if the pid
# still belongs to it.
stop_node_process() {
	local pid
	pid=$(cat "$STATE/pids/$1" 2>/dev/null) || return 0
	if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$NODE/"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$STATE/pids/$1"
}

node_down() {
	NODE=$STATE/node
	[ -d "$NODE" ] || return 0
	stop_node_process kubelet
	if [ -S "$NODE/containerd.sock" ] && alive containerd; then
		"$CACHE/crireset" "unix://$NODE/containerd.sock" >&2 || log "crireset failed; removing what is left by hand"
	fi
	stop_node_process containerd
	local pid
	for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $NODE/containerd.sock" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	local m
	# Deepest first; a lazy unmount for anything a dying process still holds.
	for m in $(findmnt -rn -o TARGET | grep "^$NODE/" | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	if [ -f "$NODE/iptables" ]; then
		local rule
		while read -r rule; do
			# shellcheck disable=SC2086
			iptables -D $rule 2>/dev/null || true
		done <"$NODE/iptables"
	fi
	if [ -f "$NODE/bridge" ]; then
		ip link del "$(cat "$NODE/bridge")" 2>/dev/null || true
	fi
	if [ -f "$NODE/bridge" ]; then
		local cg
		for cg in /sys/fs/cgroup/*/"sandgate-$(cat "$NODE/bridge")"; do
			[ ! -d "$cg" ] || find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		done
	fi
	return 0
}
