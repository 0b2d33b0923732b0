package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// poolState is this gateway's view of the pools it manages.
type poolState struct {
	mu       sync.Mutex
	starting map[string]int            // pool key → warm creates in flight
	pulls    map[string]*PoolImagePull // pool key → the pull its creation started here
	kick     chan struct{}
	sem      chan struct{}
	// lastHealth is when warm members were last compared with the runtime.
	lastHealth time.Time
	// lastClaim is when this gateway last handed out warm members (UnixNano).
	lastClaim atomic.Int64
	// connWarmer opens the proxy's connection to a new warm member (SetConnWarmer).
	connWarmer atomic.Pointer[ConnWarmer]
	// warmConns is, per warm member (id), when the proxy's connection to it was last
	// opened or used by the pool manager (refreshWarmConns); guarded by mu.
	warmConns map[string]warmConn
	// current holds, per pool key, the warm members already found built from the
	// pool's version (outdatedMembers); only the pass's goroutine uses it.
	current map[string]currentMembers
}

// currentMembers are the ready members of a pool known to be of its version.
type currentMembers struct {
	version int64
	ids     map[string]bool
}

// ConnWarmer makes the proxy that forwards sandbox traffic open a keep-alive connection
// to an agent (addr "ip:port", with its token) and keep it idle, so that the first call a
// claimer sends through it does not wait for a connect.
type ConnWarmer func(ctx context.Context, addr, agentToken string) error

// DefaultAgentIdleTimeout is Config.AgentIdleTimeout's default, Caddy's own for
// reverse_proxy's idle connections.
const DefaultAgentIdleTimeout = 2 * time.Minute

// SetConnWarmer gives the pool manager the proxy's ConnWarmer: each member this gateway
// makes warm gets its connection then, off any claim's path. Without one (or past the
// proxy's idle timeout, two minutes in Caddy) the first call connects.
func (s *Service) SetConnWarmer(f ConnWarmer) { s.pools.connWarmer.Store(&f) }

// warmConn is what refreshWarmConns needs of a warm member: where its agent is, and
// when the proxy's connection to it was last used.
type warmConn struct {
	addr, token string
	at          time.Time
}

// warmProxyConn opens the proxy's connection to a member that just became warm. A
// failure costs nothing but the connect at the first call.
func (s *Service) warmProxyConn(ctx context.Context, sb *store.Sandbox) {
	f := s.pools.connWarmer.Load()
	if f == nil || sb.Address == "" {
		return
	}
	c := warmConn{addr: net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.AgentPort)), token: sb.AgentCredential(), at: time.Now()}
	s.pools.mu.Lock()
	if s.pools.warmConns == nil {
		s.pools.warmConns = map[string]warmConn{}
	}
	s.pools.warmConns[sb.ID] = c
	s.pools.mu.Unlock()
	s.useWarmConn(ctx, *f, sb.ID, c)
}

func (s *Service) useWarmConn(ctx context.Context, f ConnWarmer, id string, c warmConn) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := f(ctx, c.addr, c.token); err != nil {
		s.log.Debug("open the proxy's connection to a warm member", "id", id, "err", err)
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
func (s *Service) refreshWarmConns(ctx context.Context, ready []string) {
	fp := s.pools.connWarmer.Load()
	if fp == nil || len(ready) == 0 {
		return
	}
	now := time.Now()
	due := now.Add(-s.cfg.AgentIdleTimeout / 2)
	var use []string
	var unknown []string
	todo := map[string]warmConn{}
	s.pools.mu.Lock()
	if s.pools.warmConns == nil {
		s.pools.warmConns = map[string]warmConn{}
	}
	for _, id := range ready {
		c, ok := s.pools.warmConns[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case c.at.Before(due):
			c.at = now
			s.pools.warmConns[id] = c
			todo[id] = c
			use = append(use, id)
		}
	}
	s.pools.mu.Unlock()
	if len(unknown) > 0 {
		if recs, err := s.store.GetSandboxes(ctx, unknown); err == nil {
			s.pools.mu.Lock()
			for _, sb := range recs {
				if sb.Address == "" {
					continue
				}
				c := warmConn{addr: net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.AgentPort)), token: sb.AgentCredential(), at: now}
				s.pools.warmConns[sb.ID] = c
				todo[sb.ID] = c
				use = append(use, sb.ID)
			}
			s.pools.mu.Unlock()
		}
	}
	if len(use) == 0 {
		return
	}
	s.spawn(func() {
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for _, id := range use {
			sem <- struct{}{}
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				defer func() { <-sem }()
				s.useWarmConn(context.Background(), *fp, id, todo[id])
			}(id)
		}
		wg.Wait()
	})
}

// forgetWarmConns drops the entries of members no longer warm in any pool, once they
// are past their refresh (a member being made warm has its entry before it is ready).
func (s *Service) forgetWarmConns(ready map[string]bool) {
	due := time.Now().Add(-s.cfg.AgentIdleTimeout / 2)
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	for id, c := range s.pools.warmConns {
		if !ready[id] && c.at.Before(due) {
			delete(s.pools.warmConns, id)
		}
	}
}

// refillSettle is how long the pool manager holds its next pass after a claim on this
// gateway. The claimed members' first commands (a batch's hundred at once) are the hot
// path; the refill's container starts and the pass's engine listing would take the
// host's CPU from them (on the 2-core bench machine a batch of 100 answered in about
// 500 ms with the refill deferred against 800-900 ms with it at once). A member's start
// takes seconds, so a refill later by this much costs little; it is bounded: a pass
// waits at most this long, however often claims come.
const refillSettle = time.Second

// publishStarting shares this manager's counts of starting members with every replica;
// they lapse within startingTTL of the manager's death.
func (s *Service) publishStarting(ctx context.Context) {
	s.pools.mu.Lock()
	counts := make(map[string]int, len(s.pools.starting))
	for k, n := range s.pools.starting {
		counts[k] = n
	}
	s.pools.mu.Unlock()
	if err := s.store.PublishStarting(ctx, counts, startingTTL); err != nil {
		s.log.Debug("publish starting pool members", "err", err)
	}
}

// startingTTL bounds how long a dead pool manager's starting counts are reported.
const startingTTL = 3 * time.Second

func (s *Service) startingCount(key string) int {
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	return s.pools.starting[key]
}

// kickPools asks the manager for a pass now instead of at its next tick.
func (s *Service) kickPools() {
	select {
	case s.pools.kick <- struct{}{}:
	default:
	}
}

// runPoolManager keeps every pool within its bounds while this gateway holds the lease.
func (s *Service) runPoolManager() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.cfg.PoolInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			case <-s.pools.kick:
			}
			if wait := refillSettle - time.Since(time.Unix(0, s.pools.lastClaim.Load())); wait > 0 {
				select {
				case <-s.stop:
					return
				case <-time.After(wait):
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s.managePoolsOnce(ctx)
			cancel()
		}
	}()
}

func (s *Service) managePoolsOnce(ctx context.Context) {
	ok, err := s.store.AcquireLease(ctx, "pools", s.owner, 10*time.Second)
	if err != nil || !ok {
		return
	}
	pools, err := s.store.ListPools(ctx, "")
	if err != nil {
		return
	}
	s.publishStarting(ctx)
	if len(pools) == 0 {
		return
	}
	var live map[string]runtimes.Instance
	if time.Since(s.pools.lastHealth) > s.cfg.SyncInterval {
		if insts, err := s.runtime.List(ctx); err == nil {
			live = make(map[string]runtimes.Instance, len(insts))
			for _, in := range insts {
				live[in.ID] = in
			}
			s.pools.lastHealth = time.Now()
		}
	}
	listed := make(map[string]bool, len(pools))
	ready := map[string]bool{}
	for _, p := range pools {
		listed[store.PoolKey(p.Tenant, p.Name)] = true
		for _, id := range s.managePool(ctx, p, live) {
			ready[id] = true
		}
	}
	s.forgetWarmConns(ready)
	for key := range s.pools.current {
		if !listed[key] {
			delete(s.pools.current, key) // a deleted pool
		}
	}
}

// managePool keeps one pool within its bounds; it returns the pool's warm members.
func (s *Service) managePool(ctx context.Context, p *store.Pool, live map[string]runtimes.Instance) (ready []string) {
	key := store.PoolKey(p.Tenant, p.Name)
	if pull := s.poolPull(key); pull != nil && pull.State != PoolImageReady {
		// Members wait for the pool's one pull (and a failed pull makes none).
		return nil
	}
	ready, err := s.store.ReadyMembers(ctx, p.Tenant, p.Name)
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
		stale = s.outdatedMembers(ctx, p, ready)
	}
	if len(stale) > 0 {
		s.log.Info("replacing warm sandboxes", "pool", p.Name, "count", len(stale))
		s.removeWarm(ctx, p, stale)
		ready, _ = s.store.ReadyMembers(ctx, p.Tenant, p.Name) // on an error CountPool below fails too and ends this pass
	}
	s.refreshWarmConns(ctx, ready)
	counts, err := s.store.CountPool(ctx, p.Tenant, p.Name)
	if err != nil {
		return ready
	}
	starting := int64(s.startingCount(key))
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
		s.fillPool(p, int(want))
		return ready
	}
	// Too many idle: shrink to bufferMax, never below poolMin.
	excess := counts.Available - int64(c.BufferMax)
	if floor := total - int64(c.PoolMin); excess > floor {
		excess = floor
	}
	if excess > 0 && int64(len(ready)) >= excess {
		s.removeWarm(ctx, p, ready[len(ready)-int(excess):])
	}
	return ready
}

// outdatedMembers finds the warm records built from an older template. A warm record's
// version does not change, so each is read once per pool version: the first pass after
// it joined the pool (or after the template changed). Reading every ready record at each
// pass (every PoolInterval, 250 ms) made a pool of 1000 cost 4000 record reads and
// decodes a second, CPU the claims and first calls of its members wait for.
func (s *Service) outdatedMembers(ctx context.Context, p *store.Pool, ready []string) []string {
	key := store.PoolKey(p.Tenant, p.Name)
	if s.pools.current == nil {
		s.pools.current = map[string]currentMembers{}
	}
	known := s.pools.current[key]
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
	s.pools.current[key] = cur
	if len(unknown) == 0 {
		return nil
	}
	// The unknown ones in one pipelined round trip.
	recs, err := s.store.GetSandboxes(ctx, unknown)
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

// fillPool starts n warm sandboxes in the background, bounded by PoolConcurrency.
func (s *Service) fillPool(p *store.Pool, n int) {
	key := store.PoolKey(p.Tenant, p.Name)
	var req CreateRequest
	if err := json.Unmarshal(p.Template, &req); err != nil {
		s.log.Error("pool template does not decode", "pool", key, "err", err)
		return
	}
	spec, err := s.validateCreate(req)
	if err != nil {
		s.log.Error("pool template is invalid", "pool", key, "err", err)
		return
	}
	s.pools.mu.Lock()
	s.pools.starting[key] += n
	s.pools.mu.Unlock()
	for i := 0; i < n; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.pools.mu.Lock()
				s.pools.starting[key]--
				s.pools.mu.Unlock()
			}()
			select {
			case s.pools.sem <- struct{}{}:
			case <-s.stop:
				return
			}
			defer func() { <-s.pools.sem }()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReadyTimeout+30*time.Second)
			defer cancel()
			if err := s.startWarm(ctx, p, req, spec); err != nil {
				s.log.Warn("warm sandbox failed to start", "pool", key, "err", err)
			}
		}()
	}
}

// startWarm starts one pool member and, once its agent answers, makes it available.
func (s *Service) startWarm(ctx context.Context, p *store.Pool, req CreateRequest, spec runtimes.Spec) error {
	// The pool may have been deleted or changed while this start waited for its turn.
	if cur, err := s.store.GetPool(ctx, p.Tenant, p.Name); err != nil || cur.Version != p.Version {
		return nil
	}
	now := time.Now().UTC()
	spec.ID = uuid.NewString()
	spec.Tenant = p.Tenant
	spec.Pool = p.Name
	spec.CreatedAt = now
	spec.AgentToken = randomToken(24)
	spec.EgressToken = randomToken(24)
	// Warm members start behind an enforcer with the template's policy (the platform
	// default without one); a claim's own networkPolicy replaces it (bindClaimEgress).
	egress, err := s.egressSpec(ctx, Caller{Tenant: p.Tenant}, spec.ID, req)
	if err != nil {
		return err
	}
	spec.Egress = egress
	if err := s.labelCluster(ctx, &spec); err != nil {
		return err
	}
	if err := checkSnapshotImage(spec.Labels[runtimes.LabelCluster], p.Tenant, spec.Image); err != nil {
		return err
	}
	inst, err := s.runtime.Create(ctx, spec)
	if err != nil {
		return err
	}
	if err := s.waitReady(ctx, inst); err != nil {
		_ = s.runtime.Delete(context.WithoutCancel(ctx), spec.ID)
		return err
	}
	rec := &store.Sandbox{
		ID: spec.ID, Tenant: p.Tenant, Image: spec.Image, Entrypoint: spec.Entrypoint,
		Metadata: req.Metadata, ResourceLimits: req.ResourceLimits, State: StateRunning,
		LastTransitionAt: now, CreatedAt: now, Address: inst.Address,
		AgentToken: spec.AgentToken, AgentAuth: store.AgentAuthSigned, EgressToken: spec.EgressToken, AccessToken: randomToken(24),
		Pool: p.Name, PoolVersion: p.Version, EgressPolicy: egressPolicyOf(spec.Egress),
	}
	// Before it can be claimed: the claimer's first call finds the connection open.
	s.warmProxyConn(ctx, rec)
	added, err := s.store.AddWarm(ctx, rec)
	if err != nil || !added {
		_ = s.runtime.Delete(context.WithoutCancel(ctx), spec.ID)
		if err == nil {
			err = fmt.Errorf("pool %s was deleted while a member started", p.Name)
		}
		return err
	}
	return nil
}
