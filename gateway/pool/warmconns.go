package pool

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// ConnWarmer makes the proxy that forwards sandbox traffic open a keep-alive connection
// to an agent (addr "ip:port", with its token) and keep it idle, so that the first call a
// claimer sends through it does not wait for a connect.
type ConnWarmer func(ctx context.Context, addr, agentToken string) error

// SetConnWarmer gives the manager the proxy's ConnWarmer: each member this gateway
// makes warm gets its connection then, off any claim's path. Without one (or past the
// proxy's idle timeout, two minutes in Caddy) the first call connects.
func (m *Manager) SetConnWarmer(f ConnWarmer) { m.connWarmer.Store(&f) }

// warmConn is what refreshWarmConns needs of a warm member: where its agent is, and
// when the proxy's connection to it was last used.
type warmConn struct {
	addr, token string
	at          time.Time
}

// warmProxyConn opens the proxy's connection to a member that just became warm. A
// failure costs nothing but the connect at the first call.
func (m *Manager) warmProxyConn(ctx context.Context, sb *store.Sandbox) {
	f := m.connWarmer.Load()
	if f == nil || sb.Address == "" {
		return
	}
	c := warmConn{addr: net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.AgentPort)), token: sb.AgentCredential(), at: time.Now()}
	m.mu.Lock()
	if m.warmConns == nil {
		m.warmConns = map[string]warmConn{}
	}
	m.warmConns[sb.ID] = c
	m.mu.Unlock()
	m.useWarmConn(ctx, *f, sb.ID, c)
}

func (m *Manager) useWarmConn(ctx context.Context, f ConnWarmer, id string, c warmConn) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := f(ctx, c.addr, c.token); err != nil {
		m.log.Debug("open the proxy's connection to a warm member", "id", id, "err", err)
	}
}

// refreshWarmConns keeps the proxy's connections to a pool's warm members (ready) open:
// the proxy closes a connection idle for AgentIdleTimeout (two minutes in Caddy), and a
// member can wait in its pool far longer, so each is used again (a /ping through the
// proxy's transport, which takes the idle connection and puts it back) once it has been
// idle for half that. A member whose connection this gateway never opened (it started
// under another gateway, or before this one restarted) gets one now: its record is read
// once, with the others', in one pipelined call. The pings run beside the pass, a few
// at a time; a failed one costs nothing but a connect at the member's first call.
func (m *Manager) refreshWarmConns(ctx context.Context, ready []string) {
	fp := m.connWarmer.Load()
	if fp == nil || len(ready) == 0 {
		return
	}
	now := time.Now()
	due := now.Add(-m.cfg.AgentIdleTimeout / 2)
	var use []string
	var unknown []string
	todo := map[string]warmConn{}
	m.mu.Lock()
	if m.warmConns == nil {
		m.warmConns = map[string]warmConn{}
	}
	for _, id := range ready {
		c, ok := m.warmConns[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case c.at.Before(due):
			c.at = now
			m.warmConns[id] = c
			todo[id] = c
			use = append(use, id)
		}
	}
	m.mu.Unlock()
	if len(unknown) > 0 {
		if recs, err := m.store.GetSandboxes(ctx, unknown); err == nil {
			m.mu.Lock()
			for _, sb := range recs {
				if sb.Address == "" {
					continue
				}
				c := warmConn{addr: net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.AgentPort)), token: sb.AgentCredential(), at: now}
				m.warmConns[sb.ID] = c
				todo[sb.ID] = c
				use = append(use, sb.ID)
			}
			m.mu.Unlock()
		}
	}
	if len(use) == 0 {
		return
	}
	m.group.Go(func() {
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for _, id := range use {
			sem <- struct{}{}
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				defer func() { <-sem }()
				m.useWarmConn(context.Background(), *fp, id, todo[id])
			}(id)
		}
		wg.Wait()
	})
}

// forgetWarmConns drops the entries of members no longer warm in any pool, once they
// are past their refresh (a member being made warm has its entry before it is ready).
func (m *Manager) forgetWarmConns(ready map[string]bool) {
	due := time.Now().Add(-m.cfg.AgentIdleTimeout / 2)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, c := range m.warmConns {
		if !ready[id] && c.at.Before(due) {
			delete(m.warmConns, id)
		}
	}
}
