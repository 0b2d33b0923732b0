package egress

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// boundHosts resolves, on the enforcer's own account, every host a vault binding names
// exactly, and pins its IPv4 answers as a workload lookup would (the filter set and the
// intercept set), refreshing each before its pin expires. Interception is by address:
// a workload that skips DNS and connects to a bound host's address itself (`curl
// --resolve`) still lands in the vault proxy, which matches on the TLS server name or
// the Host header. Only names the egress policy allows are resolved, so nothing becomes
// reachable that a workload lookup could not have made reachable. A "*." host names
// no address of its own: its names are intercepted once some lookup resolves them.
type boundHosts struct {
	enf    *enforcer
	lookup func(ctx context.Context, name string) ([]dnsAddr, error)
	log    *slog.Logger

	mu   sync.Mutex
	next map[string]time.Time // host -> when to resolve it again
}

// boundHostsRetry is how soon a failed lookup is tried again.
const boundHostsRetry = 5 * time.Second

func newBoundHosts(enf *enforcer, lookup func(context.Context, string) ([]dnsAddr, error), log *slog.Logger) *boundHosts {
	return &boundHosts{enf: enf, lookup: lookup, log: log, next: map[string]time.Time{}}
}

// exactHosts lists the hosts of v's bindings that are names, not "*." patterns.
func exactHosts(v *vaultState) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, b := range v.Bindings {
		for _, h := range b.Match.Hosts {
			if !strings.HasPrefix(h, "*.") && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}

// refresh resolves every bound host that is due (all of them with force) and the
// policy allows, and forgets hosts no binding names any more.
func (b *boundHosts) refresh(ctx context.Context, force bool) {
	hosts := exactHosts(b.enf.vault.Load())
	now := time.Now()
	b.mu.Lock()
	for h := range b.next {
		if !slices.Contains(hosts, h) {
			delete(b.next, h)
		}
	}
	var due []string
	for _, h := range hosts {
		if at, ok := b.next[h]; force || !ok || !at.After(now) {
			due = append(due, h)
		}
	}
	b.mu.Unlock()
	for _, h := range due {
		if !b.enf.allowName(h) {
			// Not scheduled: a policy change that allows it is seen on the next pass.
			continue
		}
		wait, err := b.resolve(ctx, h)
		if err != nil {
			b.log.Warn("vault: resolve bound host failed", "host", h, "err", err)
			wait = boundHostsRetry
		}
		b.mu.Lock()
		b.next[h] = time.Now().Add(wait)
		b.mu.Unlock()
	}
}

// resolve pins host's IPv4 addresses and returns how long until it should be resolved
// again: half the life of its shortest pin.
func (b *boundHosts) resolve(ctx context.Context, host string) (time.Duration, error) {
	addrs, err := b.lookup(ctx, host)
	if err != nil {
		return 0, err
	}
	if len(addrs) == 0 {
		return boundHostsRetry, nil
	}
	if err := b.enf.pinAnswer(host, addrs); err != nil {
		return 0, err
	}
	life := time.Duration(0)
	for _, a := range addrs {
		if l := b.enf.pinLife(a.ttl); life == 0 || l < life {
			life = l
		}
	}
	return max(life/2, time.Second), nil
}

// run looks for bound hosts due every second until ctx ends (a vault change resolves
// its hosts at once through refresh; a policy change that allows a host is seen here).
func (b *boundHosts) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		b.refresh(ctx, false)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lookupA asks the proxy's upstreams for name's A records (marked, as the proxy's own
// queries are) and returns the addresses with their TTLs.
func (p *dnsProxy) lookupA(ctx context.Context, name string) ([]dnsAddr, error) {
	req := new(dns.Msg)
	req.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, err := p.exchange(ctx, req, false)
	if err == nil && resp.Truncated {
		resp, err = p.exchange(ctx, req, true)
	}
	if err != nil {
		return nil, err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("answer %s", dns.RcodeToString[resp.Rcode])
	}
	var out []dnsAddr
	for _, a := range answerAddrs(resp) {
		if a.addr.Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}
