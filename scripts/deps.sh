#!/usr/bin/env bash
# Installs what sandgate needs on a Debian machine and makes sure a Docker engine answers.
# Idempotent: a second run only checks.
set -euo pipefail
# containerd, runc and containernetworking-plugins: the local Kubernetes cluster's real
# node (scripts/k8s-node.sh) runs a containerd of its own with the bridge CNI plugin.
PACKAGES=(docker.io containerd runc containernetworking-plugins redis-server redis-tools debootstrap nftables iproute2 curl ca-certificates chromium openssl python3 python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
	echo "deps: no Docker engine answers; starting dockerd in the background (log: /var/log/sandgate-dockerd.log)"
	nohup dockerd >/var/log/sandgate-dockerd.log 2>&1 &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || { echo "deps: dockerd did not come up; see /var/log/sandgate-dockerd.log" >&2; tail -20 /var/log/sandgate-dockerd.log >&2; exit 1; }
fi
# Every sandbox holds some 70 host tasks (two agents with their reserved threads, two
# shims): the 32768 of an old kernel default run out near 450 sandboxes, and then fork
# fails host-wide. 4194304 is what most distributions set today.
if [ "$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 0)" -lt 4194304 ] && [ "$(id -u)" -eq 0 ]; then
	echo "deps: raising kernel.pid_max to 4194304 (was $(cat /proc/sys/kernel/pid_max))"
	sysctl -qw kernel.pid_max=4194304 || echo "deps: could not raise kernel.pid_max; many sandboxes at once may exhaust it" >&2
fi
# gVisor is opt-in: its build takes about 20 minutes on two cores (make gvisor).
if [ "${SANDGATE_GVISOR:-0}" = 1 ]; then
	"$(dirname "$0")/gvisor.sh"
fi
echo "deps: ok (docker $(docker version -f '{{.Server.Version}}'), $(redis-server --version | cut -d' ' -f3))"
