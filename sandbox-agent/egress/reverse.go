package egress

import (
	"net/netip"
	"strconv"
	"strings"
)

// Reverse lookups (PTR, names under in-addr.arpa and ip6.arpa) are decided by the
// address they name, not by name rules: the upstream (Docker's embedded resolver, a
// cluster's DNS) names every container or pod of the runtime's network by its address,
// so a PTR sweep of the sandbox network would list other tenants' sandboxes. Reverse
// names of non-public addresses (private, loopback, link-local, CGNAT, ULA, …) and of
// addresses the IP rules deny are answered NXDOMAIN by the proxy itself; the rest follow
// the default action unless an IP rule allows the address.

// reverseAddr parses a reverse-lookup name (normalized, no trailing dot). isReverse
// says whether name is under in-addr.arpa or ip6.arpa at all; addr is valid only for a
// complete address.
func reverseAddr(name string) (addr netip.Addr, isReverse bool) {
	switch {
	case name == "in-addr.arpa" || strings.HasSuffix(name, ".in-addr.arpa"):
		labels := strings.Split(strings.TrimSuffix(name, "in-addr.arpa"), ".")
		labels = labels[:len(labels)-1] // the empty label before the suffix
		if len(labels) != 4 {
			return netip.Addr{}, true
		}
		var b [4]byte
		for i, l := range labels {
			n, err := strconv.ParseUint(l, 10, 8)
			if err != nil || (len(l) > 1 && l[0] == '0') {
				return netip.Addr{}, true
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	case name == "ip6.arpa" || strings.HasSuffix(name, ".ip6.arpa"):
		labels := strings.Split(strings.TrimSuffix(name, "ip6.arpa"), ".")
		labels = labels[:len(labels)-1]
		if len(labels) != 32 {
			return netip.Addr{}, true
		}
		var b [16]byte
		for i, l := range labels {
			n, err := strconv.ParseUint(l, 16, 4)
			if err != nil || len(l) != 1 {
				return netip.Addr{}, true
			}
			pos := 31 - i // nibble index from the most significant
			if pos%2 == 0 {
				b[pos/2] |= byte(n) << 4
			} else {
				b[pos/2] |= byte(n)
			}
		}
		return netip.AddrFrom16(b).Unmap(), true
	}
	return netip.Addr{}, false
}

// sharedRanges are special-purpose ranges netip does not flag as private but that are
// never a public host: CGNAT (often a runtime's pod or service network), benchmarking,
// documentation, and IPv4-mapped/translated forms.
var sharedRanges = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// publicAddr reports whether a is a global unicast address outside every private or
// special-purpose range.
func publicAddr(a netip.Addr) bool {
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range sharedRanges {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// allowReverse decides a query for a reverse name.
func (rs *ruleSet) allowReverse(name string) bool {
	a, _ := reverseAddr(name)
	if !a.IsValid() || !publicAddr(a) {
		return false
	}
	if allow, matched := rs.addrVerdict(a); matched {
		return allow
	}
	return rs.defaultAllow
}
