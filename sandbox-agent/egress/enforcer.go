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

	// vault, when interception is on (vaultPort != 0), is the credential vault in
	// force: addresses pinned for a name some binding names are also put in the
	// intercept set, whose traffic to the bindings' ports goes to the vault proxy.
	vault     atomic.Pointer[vaultState]
	vaultPort uint16
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
	return e.applyLocked(p, e.vault.Load())
}

// setVault puts v in force (nil: no vault) and rebuilds the table so that exactly
// the hosts v names are intercepted; on error the previous vault stays.
func (e *enforcer) setVault(v *vaultState) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.vaultPort == 0 {
		return fmt.Errorf("credential proxy is not enabled")
	}
	return e.applyLocked(e.policy, v)
}

func (e *enforcer) applyLocked(p Policy, v *vaultState) error {
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
	if err := e.fw.install(rs, pins4, pins6, e.interception(v, pins4, keep)); err != nil {
		return err
	}
	e.policy = p
	e.pins = keep
	e.rules.Store(rs)
	if e.vaultPort != 0 {
		e.vault.Store(v)
	}
	return nil
}

// interception is what the table needs to send bound hosts' traffic to the vault
// proxy: nil when interception is off or no binding exists, so that a sandbox without
// bindings has exactly the table it would have without a vault. Only IPv4 is
// intercepted (the redirect target is 127.0.0.1); IPv6 traffic to a bound host goes
// out as any allowed traffic does, without injection.
func (e *enforcer) interception(v *vaultState, pins4 []pin, names map[netip.Addr]*pinned) *intercept {
	if e.vaultPort == 0 || v == nil || len(v.Bindings) == 0 {
		return nil
	}
	ic := &intercept{port: e.vaultPort, ports: v.ports()}
	for _, p := range pins4 {
		if pn := names[p.addr]; pn != nil && anyBound(v, pn.names) {
			ic.pins = append(ic.pins, p)
		}
	}
	return ic
}

func anyBound(v *vaultState, names map[string]bool) bool {
	for n := range names {
		if v.names(n) {
			return true
		}
	}
	return false
}

// pinnedFor reports whether addr was pinned from an allowed answer for host (the
// vault proxy sends a credential only to an address its host resolved to).
func (e *enforcer) pinnedFor(addr netip.Addr, host string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	pn := e.pins[addr]
	return pn != nil && pn.expires.After(time.Now()) && pn.names[host]
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
		exp := now.Add(e.pinLife(da.ttl))
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
	// Every IPv4 address of a bound name's answer goes into the intercept set, even one
	// pinned already for another name: the redirect is by address.
	var intercepted []pin
	if v := e.vault.Load(); e.vaultPort != 0 && v.names(name) {
		for _, da := range addrs {
			if da.addr.Is4() {
				intercepted = append(intercepted, pin{addr: da.addr, expires: now.Add(e.pinLife(da.ttl)), name: name})
			}
		}
	}
	if len(pins4)+len(pins6)+len(intercepted) == 0 {
		return nil
	}
	if err := e.fw.addPins(pins4, pins6, intercepted); err != nil {
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

// pinLife is how long an address answered with ttl stays pinned.
func (e *enforcer) pinLife(ttl time.Duration) time.Duration {
	ttl = max(ttl, e.minTTL)
	if e.maxTTL > 0 {
		ttl = min(ttl, e.maxTTL)
	}
	return ttl
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
