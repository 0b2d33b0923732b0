package pool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// currentMembers are the ready members of a pool known to be of its version.
type currentMembers struct {
	version int64
	ids     map[string]bool
}

// startingTTL bounds how long a dead gateway's starting counts are read; a live one
// publishes its own every startingPublishInterval.
const (
	startingTTL             = 3 * time.Second
	startingPublishInterval = time.Second
)

// publishStarting shares this gateway's counts of members it is starting with every
// replica: the gateway that refills next counts them (it may not be this one), and every
// replica reports the same pool status. A count that fell to zero is published once, to
// clear it.
func (m *Manager) publishStarting(ctx context.Context) {
	m.mu.Lock()
	counts := make(map[string]int, len(m.starting))
	for k, n := range m.starting {
		if n > 0 || m.published[k] {
			counts[k] = n
		}
	}
	m.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	if err := m.store.PublishStarting(ctx, m.cfg.Owner, counts, startingTTL); err != nil {
		m.log.Debug("publish starting pool members", "err", err)
		return
	}
	m.mu.Lock()
	for k, n := range counts {
		if n > 0 {
			m.published[k] = true
		} else {
			delete(m.published, k)
		}
	}
	m.mu.Unlock()
}

// runPublishStarting publishes this gateway's starting counts on its own clock, whether
// or not it holds the "pools" lease: a gateway that lost the lease while its members
// start keeps them counted by the one that took it.
func (m *Manager) runPublishStarting() {
	m.group.Go(func() {
		t := time.NewTicker(startingPublishInterval)
		defer t.Stop()
		for {
			select {
			case <-m.group.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(m.group.Context(), startingPublishInterval)
			m.publishStarting(ctx)
			cancel()
		}
	})
}

func (m *Manager) startingCount(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starting[key]
}

// betweenPoolReads runs between managePool's read of the starting counts and its read
// of the pool's counts; tests use it to finish a member's start between the two.
var betweenPoolReads = func() {}

// runRefill keeps every pool within its bounds while this gateway holds the lease.
func (m *Manager) runRefill() {
	m.group.Go(func() {
		t := time.NewTicker(m.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-m.group.Done():
				return
			case <-t.C:
			case <-m.kick:
			}
			if wait := m.SettleWait(); wait > 0 {
				select {
				case <-m.group.Done():
					return
				case <-time.After(wait):
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			m.refillOnce(ctx)
			cancel()
		}
	})
}

// refillOnce is one pass over every pool, when this gateway holds the "pools" lease.
func (m *Manager) refillOnce(ctx context.Context) {
	ok, err := m.store.AcquireLease(ctx, "pools", m.cfg.Owner, 10*time.Second)
	if err != nil || !ok {
		return
	}
	pools, err := m.store.ListPools(ctx, "")
	if err != nil {
		return
	}
	if len(pools) == 0 {
		return
	}
	var live map[string]runtimes.Instance
	m.mu.Lock()
	sweep := time.Since(m.lastHealth) > m.cfg.HealthInterval
	m.mu.Unlock()
	if sweep {
		if insts, err := m.runtime.List(ctx); err == nil {
			live = make(map[string]runtimes.Instance, len(insts))
			for _, in := range insts {
				live[in.ID] = in
			}
			m.mu.Lock()
			m.lastHealth = time.Now()
			m.mu.Unlock()
		}
	}
	listed := make(map[string]bool, len(pools))
	ready := map[string]bool{}
	for _, p := range pools {
		listed[store.PoolKey(p.Tenant, p.Name)] = true
		for _, id := range m.managePool(ctx, p, live) {
			ready[id] = true
		}
	}
	m.forgetWarmConns(ready)
	m.publishStarting(ctx)
	for key := range m.current {
		if !listed[key] {
			delete(m.current, key) // a deleted pool
		}
	}
}

// managePool keeps one pool within its bounds; it returns the pool's warm members.
func (m *Manager) managePool(ctx context.Context, p *store.Pool, live map[string]runtimes.Instance) (ready []string) {
	key := store.PoolKey(p.Tenant, p.Name)
	if pull := m.Pull(key); pull != nil && pull.State != ImageReady {
		// Members wait for the pool's one pull (and a failed pull makes none).
		return nil
	}
	ready, err := m.store.ReadyMembers(ctx, p.Tenant, p.Name)
	if err != nil {
		return nil
	}
	// Dead or outdated warm sandboxes leave the pool and are replaced.
	var stale []string
	if live != nil {
		for _, id := range ready {
			if in, ok := live[id]; !ok || in.State != runtimes.StateRunning {
				stale = append(stale, id)
			}
		}
	}
	if len(stale) == 0 {
		stale = m.outdatedMembers(ctx, p, ready)
	}
	if len(stale) > 0 {
		m.log.Info("replacing warm sandboxes", "pool", p.Name, "count", len(stale))
		m.RemoveWarm(ctx, p, stale)
		ready, _ = m.store.ReadyMembers(ctx, p.Tenant, p.Name) // on an error CountPool below fails too and ends this pass
	}
	m.refreshWarmConns(ctx, ready)
	// Members starting first, the pool's counts after: a member that joins the pool
	// between the two reads is counted twice (this pass makes one fewer), never missed
	// (this pass would make one more than poolMax).
	starting := int64(m.startingCount(key))
	elsewhere, err := m.store.StartingCount(ctx, key, m.cfg.Owner)
	if err != nil {
		return ready
	}
	starting += elsewhere
	betweenPoolReads()
	counts, err := m.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return ready
	}
	available := counts.Available + starting
	total := counts.Available + counts.Allocated + starting
	c := p.Capacity
	want := int64(0)
	if available < int64(c.BufferMin) || available < int64(c.BufferMax) {
		want = int64(c.BufferMax) - available
	}
	if need := int64(c.PoolMin) - total; need > want {
		want = need
	}
	if room := int64(c.PoolMax) - total; want > room {
		want = room
	}
	if want > 0 {
		m.fill(p, int(want))
		return ready
	}
	// Too many idle: shrink to bufferMax, never below poolMin.
	excess := counts.Available - int64(c.BufferMax)
	if floor := total - int64(c.PoolMin); excess > floor {
		excess = floor
	}
	if excess > 0 && int64(len(ready)) >= excess {
		m.RemoveWarm(ctx, p, ready[len(ready)-int(excess):])
	}
	return ready
}

// outdatedMembers finds the warm records built from an older template. A warm record's
// version does not change, so each is read once per pool version: the first pass after
// it joined the pool (or after the template changed). Reading every ready record at each
// pass (every Interval, 250 ms) made a pool of 1000 cost 4000 record reads and
// decodes a second, CPU the claims and first calls of its members wait for.
func (m *Manager) outdatedMembers(ctx context.Context, p *store.Pool, ready []string) []string {
	key := store.PoolKey(p.Tenant, p.Name)
	if m.current == nil {
		m.current = map[string]currentMembers{}
	}
	known := m.current[key]
	if known.version != p.Version {
		known = currentMembers{version: p.Version}
	}
	// Kept for the ids still ready: members claimed or removed leave the map.
	cur := currentMembers{version: p.Version, ids: make(map[string]bool, len(ready))}
	var unknown []string
	for _, id := range ready {
		if known.ids[id] {
			cur.ids[id] = true
		} else {
			unknown = append(unknown, id)
		}
	}
	m.current[key] = cur
	if len(unknown) == 0 {
		return nil
	}
	// The unknown ones in one pipelined round trip.
	recs, err := m.store.GetSandboxes(ctx, unknown)
	if err != nil {
		return nil // Redis went away: the next pass looks again
	}
	var out []string
	for _, sb := range recs {
		if sb.PoolVersion != 0 && sb.PoolVersion != p.Version {
			out = append(out, sb.ID)
		} else {
			cur.ids[sb.ID] = true
		}
	}
	return out
}

// fill starts n warm sandboxes in the background, bounded by Concurrency.
func (m *Manager) fill(p *store.Pool, n int) {
	key := store.PoolKey(p.Tenant, p.Name)
	start, err := m.host.MemberStarter(p)
	if err != nil {
		m.log.Error("pool template is invalid", "pool", key, "err", err)
		return
	}
	m.mu.Lock()
	m.starting[key] += n
	m.mu.Unlock()
	for i := 0; i < n; i++ {
		m.group.GoAlways(func() {
			defer func() {
				m.mu.Lock()
				m.starting[key]--
				m.mu.Unlock()
			}()
			select {
			case m.sem <- struct{}{}:
			case <-m.group.Done():
				return
			}
			defer func() { <-m.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ReadyTimeout+30*time.Second)
			defer cancel()
			if err := m.startWarm(ctx, p, start); err != nil {
				m.log.Warn("warm sandbox failed to start", "pool", key, "err", err)
			}
		})
	}
}

// startWarm starts one pool member and, once its agent answers, makes it available.
func (m *Manager) startWarm(ctx context.Context, p *store.Pool, start StartMember) error {
	// The pool may have been deleted or changed while this start waited for its turn.
	if cur, err := m.store.GetPool(ctx, p.Tenant, p.Name); err != nil || cur.Version != p.Version {
		return nil
	}
	rec, err := start(ctx)
	if err != nil {
		return err
	}
	// Before it can be claimed: the claimer's first call finds the connection open.
	m.warmProxyConn(ctx, rec)
	added, err := m.store.AddWarm(ctx, rec)
	if err != nil || !added {
		_ = m.runtime.Delete(context.WithoutCancel(ctx), rec.ID)
		if err == nil {
			err = fmt.Errorf("pool %s was deleted while a member started", p.Name)
		}
		return err
	}
	return nil
}

// RemoveWarm takes warm members out of their pool and removes them, a few at a time.
func (m *Manager) RemoveWarm(ctx context.Context, p *store.Pool, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			// Best effort: the runtime delete below is what frees the sandbox; a store
			// error here leaves at most a stale record of a deleted pool's member, which
			// holds no runtime resource.
			_, _ = m.store.RemoveWarm(ctx, p.Tenant, p.Name, id)
			_ = m.store.DeleteSandbox(ctx, id)
			if err := m.runtime.Delete(ctx, id); err != nil {
				m.log.Warn("remove warm sandbox", "pool", p.Name, "id", id, "err", err)
			}
		}(id)
	}
	wg.Wait()
}
