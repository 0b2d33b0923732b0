package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) the enforcer owns in the sandbox's
// network namespace; `nft list table inet sandgate_egress` shows it.
const TableName = "sandgate_egress"

// natPriority runs our DNS redirect before Docker's own nat OUTPUT chain (priority
// -100, which sends 127.0.0.11:53 to the embedded resolver's real port): NAT takes the
// first binding made, so every port-53 packet of the workload comes to the proxy, and
// only the proxy's marked upstream queries reach Docker's rule.
const natPriority = -110

// Set names inside the table.
const (
	setAllow4 = "allow4" // static allow ranges from IP/CIDR rules (interval)
	setDeny4  = "deny4"  // static deny ranges, platform denies included (interval)
	setAllow6 = "allow6"
	setDeny6  = "deny6"
	setDyn4   = "dns4" // addresses pinned from allowed DNS answers (timeout)
	setDyn6   = "dns6"
	// Only with credential-vault bindings: addresses of bound hosts and the ports the
	// bindings name, whose TCP traffic the nat chain sends to the vault proxy.
	setVault4     = "vault4"
	setVaultPorts = "vaultports"
)

// intercept is the vault's part of the table.
type intercept struct {
	port  uint16   // the vault proxy's port on 127.0.0.1
	ports []uint16 // destination ports to intercept
	pins  []pin    // IPv4 addresses of bound hosts
}

// firewallConfig is what the rules need besides the policy.
type firewallConfig struct {
	proxy    netip.AddrPort // the DNS proxy every other port-53 packet is sent to (IPv4)
	upstream netip.AddrPort // the resolver the proxy's marked queries may reach
	// servers are the sandbox's DNS servers (IPv4, the ones Docker's embedded resolver
	// forwards to): port-53 packets to them go to serversProxy, whose marked queries
	// may reach them.
	servers      []netip.Addr
	serversProxy netip.AddrPort
	mark         uint32 // SO_MARK of the proxies' upstream sockets
}

// pin is an address learned from an allowed DNS answer for name, alive until expires.
type pin struct {
	addr    netip.Addr
	expires time.Time
	name    string
}

// maxCommentName bounds the name stored as an element's comment (the kernel limits
// user data); a longer name is not stored, and its pin is not carried over a restart.
const maxCommentName = 120

// firewall installs and updates the table. All writes go through mu so that a policy
// rebuild and a DNS pin never interleave inside one netlink batch.
type firewall struct {
	mu   sync.Mutex
	conn *nftables.Conn
	cfg  firewallConfig
}

func newFirewall(cfg firewallConfig) (*firewall, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open netlink connection for nftables: %w", err)
	}
	return &firewall{conn: conn, cfg: cfg}, nil
}

func (f *firewall) close() error { return f.conn.CloseLasting() }

func (f *firewall) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
}

// install replaces the whole table in one netlink batch: the kernel commits a batch
// as one transaction, so packets see either the old rules or the new ones, never a
// gap. It is used at start (a restarted enforcer takes over the table it left) and
// for every policy change; pins are the live DNS addresses to carry over.
func (f *firewall) install(rs *ruleSet, pins4, pins6 []pin, ic *intercept) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.conn
	t := f.table()
	// add+delete+add makes the delete valid whether or not the table existed.
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)

	now := time.Now()
	sets := map[string]*nftables.Set{}
	for _, s := range []struct {
		name     string
		keyType  nftables.SetDatatype
		interval bool
		elems    []nftables.SetElement
	}{
		{setAllow4, nftables.TypeIPAddr, true, intervalElements(rs.allow4, 4)},
		{setDeny4, nftables.TypeIPAddr, true, intervalElements(rs.deny4, 4)},
		{setAllow6, nftables.TypeIP6Addr, true, intervalElements(rs.allow6, 16)},
		{setDeny6, nftables.TypeIP6Addr, true, intervalElements(rs.deny6, 16)},
		{setDyn4, nftables.TypeIPAddr, false, pinElements(pins4, now)},
		{setDyn6, nftables.TypeIP6Addr, false, pinElements(pins6, now)},
	} {
		set := &nftables.Set{Table: t, Name: s.name, KeyType: s.keyType, Interval: s.interval, HasTimeout: !s.interval}
		if err := c.AddSet(set, s.elems); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}
	if ic != nil {
		vs := &nftables.Set{Table: t, Name: setVault4, KeyType: nftables.TypeIPAddr, HasTimeout: true}
		ps := &nftables.Set{Table: t, Name: setVaultPorts, KeyType: nftables.TypeInetService}
		var portElems []nftables.SetElement
		for _, p := range ic.ports {
			portElems = append(portElems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
		}
		if err := c.AddSet(vs, pinElements(ic.pins, now)); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue nftables set %s: %w", setVault4, err)
		}
		if err := c.AddSet(ps, portElems); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue nftables set %s: %w", setVaultPorts, err)
		}
		sets[setVault4], sets[setVaultPorts] = vs, ps
	}

	drop := nftables.ChainPolicyDrop
	out := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	for _, exprs := range f.filterRules(rs, sets) {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: exprs})
	}
	nat := c.AddChain(&nftables.Chain{
		Name: "dns_redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(natPriority),
	})
	for _, exprs := range f.natRules(ic, sets) {
		c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table %s: %w", TableName, err)
	}
	return nil
}

// discardBatch throws away a half-queued batch by replacing the connection: the
// library has no way to drop queued messages, and sending a half batch (the table
// deleted, the rules not yet added) would open the sandbox.
func (f *firewall) discardBatch() {
	_ = f.conn.CloseLasting()
	if conn, err := nftables.New(nftables.AsLasting()); err == nil {
		f.conn = conn
	}
}

// addPins adds DNS-learned addresses to the pinned sets in one batch. Adding an
// address already present refreshes its timeout.
func (f *firewall) addPins(pins4, pins6, intercepted []pin) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	t := f.table()
	if len(intercepted) > 0 {
		s := &nftables.Set{Table: t, Name: setVault4, KeyType: nftables.TypeIPAddr, HasTimeout: true}
		if err := f.conn.SetAddElements(s, pinElements(intercepted, now)); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue intercepted IPv4 addresses: %w", err)
		}
	}
	if len(pins4) > 0 {
		s := &nftables.Set{Table: t, Name: setDyn4, KeyType: nftables.TypeIPAddr, HasTimeout: true}
		if err := f.conn.SetAddElements(s, pinElements(pins4, now)); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue pinned IPv4 addresses: %w", err)
		}
	}
	if len(pins6) > 0 {
		s := &nftables.Set{Table: t, Name: setDyn6, KeyType: nftables.TypeIP6Addr, HasTimeout: true}
		if err := f.conn.SetAddElements(s, pinElements(pins6, now)); err != nil {
			f.discardBatch()
			return fmt.Errorf("queue pinned IPv6 addresses: %w", err)
		}
	}
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("pin DNS answers into nftables: %w", err)
	}
	return nil
}

// remove deletes the table: only --cleanup does this, because leaving it is what
// keeps the sandbox closed when the enforcer dies.
func (f *firewall) remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.table()
	f.conn.AddTable(t)
	f.conn.DelTable(t)
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", TableName, err)
	}
	return nil
}

// filterRules is the output chain, in order (its policy drops whatever no rule
// accepts):
//
//	ct state established,related accept       answers and flows admitted earlier
//	meta mark MARK ip daddr UPSTREAM accept   the proxy's own upstream queries
//	meta mark MARK ip daddr SERVER accept     the second proxy's, one rule per server
//	ip daddr UPSTREAM drop                    the resolver itself, on any port
//	ip daddr 127.0.0.11 drop                  Docker's embedded resolver, on any port
//	ip daddr SERVER drop                      each DNS server, on any port
//	oifname "lo" accept                       loopback
//	ip daddr 127.0.0.0/8 accept               DNS redirected to the proxy (see below)
//	th dport {53, 853} drop                   DNS that escaped the redirect (IPv6), DoT
//	icmpv6 type 133-137 accept                neighbour discovery, so IPv6 allows work
//	ip daddr @deny4 drop / ip6 daddr @deny6   IP rules that deny, platform denies first
//	ip daddr @allow4 accept / @allow6         IP rules that allow
//	ip daddr @dns4 accept / @dns6             addresses pinned from allowed DNS answers
//	counter accept|drop                       the policy's default action
func (f *firewall) filterRules(rs *ruleSet, sets map[string]*nftables.Set) [][]expr.Any {
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	dropV := &expr.Verdict{Kind: expr.VerdictDrop}
	mark := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(f.cfg.mark)},
	}
	rules := [][]expr.Any{
		{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{
				SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
				Xor:  make([]byte, 4),
			},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
			accept,
		},
		slices.Concat(mark, matchDaddr(f.cfg.upstream.Addr()), []expr.Any{accept}),
	}
	for _, a := range f.cfg.servers {
		rules = append(rules, slices.Concat(mark, matchDaddr(a), []expr.Any{accept}))
	}
	// The resolvers themselves are closed to the workload on every port: the upstream
	// (its DNS port is redirected to the proxy, but Docker's embedded resolver really
	// listens on random ports of 127.0.0.11, readable in /proc/net/udp), Docker's
	// resolver address even when the upstream is another one, and the sandbox's DNS
	// servers (a server may answer DNS on other ports, over TLS or HTTPS). Only the
	// proxies' marked queries, accepted just above, reach them. These come before the
	// loopback accept, which would otherwise let 127.0.0.11 through.
	for _, a := range resolverAddrs(f.cfg.upstream.Addr(), f.cfg.servers) {
		rules = append(rules, slices.Concat(matchDaddr(a), []expr.Any{&expr.Counter{}, dropV}))
	}
	rules = append(rules,
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
			accept,
		},
		// After the nat chain rewrote a DNS packet to the proxy, the packet is
		// rerouted to lo, but oifname still reports the device chosen before NAT: so
		// loopback destinations are matched by address too.
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
			accept,
		},
	)
	// DNS that escaped the redirect (IPv6) and DNS over TLS go nowhere, whatever the
	// allow rules say: the proxy is the only resolver.
	for _, port := range []uint16{53, 853} {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rules = append(rules, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
				&expr.Counter{},
				dropV,
			})
		}
	}
	rules = append(rules, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
		accept,
	})
	for _, step := range []struct {
		set4, set6 string
		verdict    *expr.Verdict
	}{
		{setDeny4, setDeny6, dropV},
		{setAllow4, setAllow6, accept},
		{setDyn4, setDyn6, accept},
	} {
		rules = append(rules,
			lookupDaddr(unix.NFPROTO_IPV4, 16, 4, sets[step.set4], step.verdict),
			lookupDaddr(unix.NFPROTO_IPV6, 24, 16, sets[step.set6], step.verdict))
	}
	final := dropV
	if rs.defaultAllow {
		final = accept
	}
	return append(rules, []expr.Any{&expr.Counter{}, final})
}

// natRules is the nat output chain: the proxies' marked queries leave untouched,
// every other IPv4 packet to port 53 (UDP or TCP) goes to the second proxy when it is
// sent to one of the sandbox's DNS servers and to the proxy when it is sent anywhere
// else, and, with vault bindings, TCP to a bound host's address on a bound port goes
// to the vault proxy (its own upstream connections are marked, so they leave
// untouched).
//
// The second proxy is what keeps Docker's embedded resolver from looping: the proxy
// asks 127.0.0.11 (marked), and the embedded resolver forwards a name it does not own
// from inside the sandbox's namespace, unmarked, to a DNS server; sent back to the
// proxy, that forward would ask 127.0.0.11 again. The second proxy applies the same
// policy and asks the server itself.
func (f *firewall) natRules(ic *intercept, sets map[string]*nftables.Set) [][]expr.Any {
	rules := [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(f.cfg.mark)},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}}
	redirectDNS := func(match []expr.Any, to netip.AddrPort) {
		ip := to.Addr().As4()
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			rules = append(rules, slices.Concat(match, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(53)},
				&expr.Immediate{Register: 1, Data: ip[:]},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
			}))
		}
	}
	for _, a := range f.cfg.servers {
		redirectDNS(matchDaddr(a), f.cfg.serversProxy)
	}
	redirectDNS([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}, f.cfg.proxy)
	if ic != nil {
		loopback := [4]byte{127, 0, 0, 1}
		rules = append(rules, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: sets[setVault4].Name, SetID: sets[setVault4].ID},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: sets[setVaultPorts].Name, SetID: sets[setVaultPorts].ID},
			&expr.Immediate{Register: 1, Data: loopback[:]},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(ic.port)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		})
	}
	return rules
}

// dockerResolver is Docker's embedded DNS server, present in the namespace of every
// container on a user-defined network.
var dockerResolver = netip.MustParseAddr("127.0.0.11")

// resolverAddrs are the addresses closed to unmarked traffic.
func resolverAddrs(upstream netip.Addr, servers []netip.Addr) []netip.Addr {
	out := []netip.Addr{upstream}
	for _, a := range append([]netip.Addr{dockerResolver}, servers...) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// matchDaddr matches packets of a's family sent to a.
func matchDaddr(a netip.Addr) []expr.Any {
	proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if a.Is6() {
		proto, off = unix.NFPROTO_IPV6, 24
	}
	b := a.AsSlice()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(b))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func lookupDaddr(proto byte, offset, length uint32, set *nftables.Set, verdict *expr.Verdict) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: length},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		verdict,
	}
}

// intervalElements encodes disjoint sorted ranges the way nft(8) does: each range is
// a start key and an end key one past its last address, flagged as an interval end;
// a leading end at the zero address closes the gap below the first range, and a range
// that reaches the top of the family has no end key.
func intervalElements(ranges []addrRange, size int) []nftables.SetElement {
	if len(ranges) == 0 {
		return nil
	}
	var out []nftables.SetElement
	if !ranges[0].from.IsUnspecified() {
		out = append(out, nftables.SetElement{Key: make([]byte, size), IntervalEnd: true})
	}
	for _, r := range ranges {
		out = append(out, nftables.SetElement{Key: r.from.AsSlice()})
		if end := r.to.Next(); end.IsValid() {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

func pinElements(pins []pin, now time.Time) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(pins))
	for _, p := range pins {
		ttl := p.expires.Sub(now).Truncate(time.Millisecond)
		if ttl <= 0 {
			continue // expired while queued; the kernel rejects a zero timeout
		}
		el := nftables.SetElement{Key: p.addr.AsSlice(), Timeout: ttl}
		if len(p.name) <= maxCommentName {
			// The name rides along in the kernel so that a restarted enforcer can
			// tell which pins its policy still allows (see existingPins).
			el.Comment = p.name
		}
		out = append(out, el)
	}
	return out
}

// existingPins reads the pinned addresses a previous enforcer left in the table, with
// the name each was learned for and its remaining life, so that a restart does not cut
// off connections to addresses the workload resolved before it. Without a table (first
// start) there is nothing to read.
func (f *firewall) existingPins() []pin {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.table()
	if _, err := f.conn.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
		return nil
	}
	now := time.Now()
	var out []pin
	for _, s := range []*nftables.Set{
		{Table: t, Name: setDyn4, KeyType: nftables.TypeIPAddr},
		{Table: t, Name: setDyn6, KeyType: nftables.TypeIP6Addr},
	} {
		elems, err := f.conn.GetSetElements(s)
		if err != nil {
			continue
		}
		for _, el := range elems {
			a, ok := netip.AddrFromSlice(el.Key)
			if !ok || el.Expires <= 0 || el.Comment == "" {
				continue
			}
			out = append(out, pin{addr: a.Unmap(), expires: now.Add(el.Expires), name: el.Comment})
		}
	}
	return out
}

// ifname pads an interface name to IFNAMSIZ as the kernel compares it.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}
