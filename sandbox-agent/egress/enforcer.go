package egress

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// enforcer is the state shared by the DNS proxy and the policy API: the policy in
// force, its compiled form, and the addresses pinned from DNS answers.
type enforcer struct {
	fw       *firewall
	platform []Rule // always ahead of the policy's own rules
	minTTL   time.Duration
	maxTTL   time.Duration

	rules atomic.Pointer[ruleSet] // read by every DNS query without locking

	mu     sync.Mutex // guards policy and pins, and orders installs
	policy Policy
	// pins maps each pinned address to when it leaves the set and which allowed
	// names it was learned for, so that a policy change keeps exactly the addresses
	// whose names are still allowed.
	pins map[netip.Addr]*pinned
}

type pinned struct {
	expires time.Time
	names   map[string]bool
}

// dnsAddr is one address of an allowed DNS answer with its TTL.
type dnsAddr struct {
	addr netip.Addr
	ttl  time.Duration
}

func newEnforcer(fw *firewall, platform []Rule, minTTL, maxTTL time.Duration) *enforcer {
	return &enforcer{fw: fw, platform: platform, minTTL: minTTL, maxTTL: maxTTL, pins: map[netip.Addr]*pinned{}}
}

// currentPolicy returns the policy in force.
func (e *enforcer) currentPolicy() Policy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.policy
}

// apply installs p (normalized) atomically; on error the previous policy stays in
// force, in the kernel and here.
func (e *enforcer) apply(p Policy) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := compileRules(e.platform, p)
	now := time.Now()
	keep := map[netip.Addr]*pinned{}
	var pins4, pins6 []pin
	for a, pn := range e.pins {
		if !pn.expires.After(now.Add(time.Second)) {
			continue
		}
		names := map[string]bool{}
		for n := range pn.names {
			if rs.allowName(n) {
				names[n] = true
			}
		}
		if len(names) == 0 {
			continue
		}
		keep[a] = &pinned{expires: pn.expires, names: names}
		p := pin{addr: a, expires: pn.expires, name: anyName(names)}
		if a.Is4() {
			pins4 = append(pins4, p)
		} else {
			pins6 = append(pins6, p)
		}
	}
	if err := e.fw.install(rs, pins4, pins6); err != nil {
		return err
	}
	e.policy = p
	e.pins = keep
	e.rules.Store(rs)
	return nil
}

// inherit seeds the pins a previous enforcer left in the kernel; the first apply then
// keeps those whose names the policy still allows.
func (e *enforcer) inherit(pins []pin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range pins {
		pn := e.pins[p.addr]
		if pn == nil {
			pn = &pinned{names: map[string]bool{}}
			e.pins[p.addr] = pn
		}
		pn.names[p.name] = true
		if p.expires.After(pn.expires) {
			pn.expires = p.expires
		}
	}
}

func anyName(names map[string]bool) string {
	for n := range names {
		return n
	}
	return ""
}

// allowName reports whether the DNS proxy may resolve name.
func (e *enforcer) allowName(name string) bool {
	rs := e.rules.Load()
	if _, isReverse := reverseAddr(name); isReverse {
		return rs.allowReverse(name)
	}
	return rs.allowName(name)
}

// pinAnswer admits the addresses of an allowed name's DNS answer before the answer
// reaches the workload. Addresses already pinned for at least as long cost no netlink
// round trip, which keeps repeated lookups of a hot name cheap.
func (e *enforcer) pinAnswer(name string, addrs []dnsAddr) error {
	if len(addrs) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	var pins4, pins6 []pin
	for _, da := range addrs {
		ttl := max(da.ttl, e.minTTL)
		if e.maxTTL > 0 {
			ttl = min(ttl, e.maxTTL)
		}
		exp := now.Add(ttl)
		pn := e.pins[da.addr]
		if pn != nil && pn.expires.After(now) {
			pn.names[name] = true
			if !exp.After(pn.expires.Add(time.Second)) {
				continue
			}
		}
		p := pin{addr: da.addr, expires: exp, name: name}
		if da.addr.Is4() {
			pins4 = append(pins4, p)
		} else {
			pins6 = append(pins6, p)
		}
	}
	if len(pins4)+len(pins6) == 0 {
		return nil
	}
	if err := e.fw.addPins(pins4, pins6); err != nil {
		return fmt.Errorf("pin answer for %s: %w", name, err)
	}
	for _, p := range append(pins4, pins6...) {
		pn := e.pins[p.addr]
		if pn == nil || !pn.expires.After(now) {
			pn = &pinned{names: map[string]bool{}}
			e.pins[p.addr] = pn
		}
		pn.expires = p.expires
		pn.names[name] = true
	}
	e.prune(now)
	return nil
}

// prune forgets expired pins once the map grows, so a long-lived sandbox that
// resolves many names does not keep them all.
func (e *enforcer) prune(now time.Time) {
	if len(e.pins) < 4096 {
		return
	}
	for a, pn := range e.pins {
		if !pn.expires.After(now) {
			delete(e.pins, a)
		}
	}
}
