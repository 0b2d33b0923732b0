package docker

// The sandboxes' DNS servers.
//
// A sandbox on a user-defined network resolves through Docker's embedded resolver at
// 127.0.0.11, which answers container names itself and forwards every other query to
// the sandbox's external DNS servers. It sends those forwards from inside the
// sandbox's network namespace, unmarked, so the enforcer's nftables catch them like a
// workload's own port-53 packets. The enforcer therefore has to know which servers
// they are (egress.EnvDNSServers): it sends port-53 packets to those servers to a
// second proxy listener that applies the same policy and forwards straight to them,
// instead of back to 127.0.0.11, which would loop.
//
// The servers are the engine's choice (libnetwork, Docker 20.10): the container's
// HostConfig.DNS when set, else the IPv4 nameservers of the host's resolv.conf
// (/run/systemd/resolve/resolv.conf when /etc/resolv.conf names only systemd-resolved's
// stub), else, when that file names none, Google's public resolvers. Loopback
// nameservers of the host's file are contacted by dockerd from the host's namespace and
// never pass through the sandbox's rules, so they are left out. The operator's
// SANDGATE_SANDBOX_DNS (Options.SandboxDNS) is set as HostConfig.DNS on the container
// that owns the sandbox's namespace and given to the enforcer as they are; without it
// the runtime reads the host's file once, at start, which is only right when the
// engine runs on the gateway's host.

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/sandbox-agent/egress"
)

// Files the engine reads the host's resolvers from.
const (
	hostResolvConf     = "/etc/resolv.conf"
	resolvedResolvConf = "/run/systemd/resolve/resolv.conf"
)

// engineDefaultDNS are the servers the engine gives a container when the host's file
// names none.
var engineDefaultDNS = []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("8.8.4.4")}

// ParseSandboxDNS checks the operator's list of sandbox DNS servers: IPv4 addresses
// (the engine forwards to IPv4 servers only), none loopback or unspecified, since a
// loopback server given as HostConfig.DNS is asked inside the sandbox's own namespace,
// where nothing answers.
func ParseSandboxDNS(list []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range list {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("sandbox DNS server %q is not an IPv4 address", s)
		}
		if a.IsLoopback() || a.IsUnspecified() {
			return nil, fmt.Errorf("sandbox DNS server %s is not an address a sandbox can reach", a)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// sandboxDNS is the HostConfig.DNS of a container that owns a sandbox's network
// namespace: the operator's servers, or nil for the engine's own.
func (r *Runtime) sandboxDNS() []netip.Addr { return slices.Clone(r.opts.SandboxDNS) }

// enforcerDNSEnv is the enforcer's environment entry naming the servers Docker's
// embedded resolver forwards the sandbox's queries to.
func (r *Runtime) enforcerDNSEnv() []string {
	servers := r.opts.SandboxDNS
	if len(servers) == 0 {
		servers = r.hostDNS
	}
	if len(servers) == 0 {
		return nil
	}
	list := make([]string, len(servers))
	for i, a := range servers {
		list[i] = a.String()
	}
	return []string{egress.EnvDNSServers + "=" + strings.Join(list, ",")}
}

// engineForwardsTo reads the servers the engine forwards a container's queries to when
// it has no HostConfig.DNS, from the host's resolver files (see the file comment).
func engineForwardsTo(etc, resolved string) []netip.Addr {
	servers, err := nameservers(etc)
	if err != nil {
		return nil
	}
	if len(servers) == 1 && servers[0] == netip.MustParseAddr("127.0.0.53") {
		if s, err := nameservers(resolved); err == nil {
			servers = s
		}
	}
	if len(servers) == 0 {
		return slices.Clone(engineDefaultDNS)
	}
	var out []netip.Addr
	for _, a := range servers {
		if !a.IsLoopback() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// nameservers lists the IPv4 nameservers of a resolv.conf file.
func nameservers(path string) ([]netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Is4() {
				out = append(out, a)
			}
		}
	}
	return out, sc.Err()
}
