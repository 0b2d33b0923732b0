package pool

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// ErrMemberDied is what a call to a claimed member gets once the member died or
// refused its binding after its claim; the member is then marked Failed with
// ReasonMemberDied.
var ErrMemberDied = errors.New("the pool member died after it was claimed")

// errStopping is a binding's error when the Manager stopped before it ran.
var errStopping = errors.New("gateway stopping")

// lateBinds tracks the late bindings this gateway is applying: a claim answers as soon
// as its script ran, the bindings (env, entrypoint, egress policy) run in the
// background, bounded, and the first call to the member waits for its own (BeforeCall).
type lateBinds struct {
	mu sync.Mutex
	// calls holds each binding under way or done lately; a done one stays a while, so that
	// a call routed on a record read before the binding was cleared does not bind twice.
	calls map[string]*bindCall
	sem   chan struct{}
}

type bindCall struct {
	done chan struct{}
	err  error
	at   time.Time
}

// lateBindConcurrency bounds the late bindings in flight on one gateway.
const lateBindConcurrency = 64

// bindKeep is how long a finished binding is remembered.
const bindKeep = time.Minute

func (b *lateBinds) get(id string) *bindCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[id]
}

// start registers a binding of id unless one is known; it returns the call and whether
// the caller must run it.
func (b *lateBinds) start(id string) (*bindCall, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls == nil {
		b.calls = map[string]*bindCall{}
	}
	if c, ok := b.calls[id]; ok {
		return c, false
	}
	now := time.Now()
	for k, c := range b.calls {
		select {
		case <-c.done:
			if now.Sub(c.at) > bindKeep {
				delete(b.calls, k)
			}
		default:
		}
	}
	c := &bindCall{done: make(chan struct{}), at: now}
	b.calls[id] = c
	return c, true
}

// Claim binds up to n warm members of p to tenant in one script (patch is what each
// record takes; nowMilli and expires are the script's clock and the expiry it indexes)
// and returns those whose agent answers: the runtime's event stream or the manager's
// sweep takes dead members out of the pool, and a member that died too lately for
// either is found by one ping over the proxy's open connection (dropDeadClaims), so
// Claim may return fewer than the script bound; the caller makes the rest cold.
// What the claim binds late (the records' LateBind) is applied in the background,
// bounded; a member's first call waits for its own (BeforeCall).
func (m *Manager) Claim(ctx context.Context, p *store.Pool, tenant string, n int, patch store.ClaimPatch, nowMilli int64, expires string) ([]*store.Sandbox, error) {
	got, err := m.store.Claim(ctx, p.Tenant, p.Name, tenant, n, patch, nowMilli, expires)
	if err != nil || len(got) == 0 {
		return nil, err
	}
	m.lastClaim.Store(time.Now().UnixNano())
	m.Kick()
	if got = m.dropDeadClaims(ctx, got); len(got) == 0 {
		return nil, nil
	}
	// The claim script returned the records as they now are: the members' first calls
	// (endpoint, command) route from memory instead of reading them back one by one.
	for _, sb := range got {
		m.host.RouteClaimed(sb)
	}
	m.bindLate(got)
	return got, nil
}

// bindLate applies the late bindings of freshly claimed members in the background,
// lateBindConcurrency at a time; each member's first call waits for its own.
func (m *Manager) bindLate(members []*store.Sandbox) {
	for _, sb := range members {
		if sb.LateBind == nil {
			continue
		}
		c, run := m.binds.start(sb.ID)
		if !run {
			continue
		}
		if !m.group.Go(func() { m.runLateBind(sb, c) }) {
			c.err = errStopping
			close(c.done)
		}
	}
}

func (m *Manager) runLateBind(sb *store.Sandbox, c *bindCall) {
	defer close(c.done)
	select {
	case m.binds.sem <- struct{}{}:
	case <-m.group.Done():
		c.err = errStopping
		return
	}
	defer func() { <-m.binds.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c.err = m.applyLateBind(ctx, sb)
	if c.err != nil {
		m.failMember(ctx, sb, c.err)
	}
}

// applyLateBind applies a member's binding through the core, then clears the record's
// pending binding.
func (m *Manager) applyLateBind(ctx context.Context, sb *store.Sandbox) error {
	if err := m.host.BindMember(ctx, sb, sb.LateBind); err != nil {
		return err
	}
	_, err := m.store.ModifySandbox(ctx, sb.ID, func(r *store.Sandbox) error {
		r.LateBind = nil
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) { // not found: deleted meanwhile
		// Applied all the same: the member serves. The record keeps naming the binding,
		// which another replica's first call applies once more (idempotent but for a
		// changed entrypoint, which restarts).
		m.log.Warn("late binding applied but not cleared in the store", "id", sb.ID, "err", err)
	}
	return nil
}

var errSettled = errors.New("already settled")

// failMember marks a claimed member that cannot serve (dead, or its binding refused)
// Failed, removes its container and lets the pool replace it.
func (m *Manager) failMember(ctx context.Context, sb *store.Sandbox, cause error) {
	ctx = context.WithoutCancel(ctx)
	m.log.Warn("claimed pool member is unavailable; marking it Failed", "id", sb.ID, "pool", sb.Pool, "err", cause)
	_, err := m.store.ModifySandbox(ctx, sb.ID, func(r *store.Sandbox) error {
		if r.State != stateRunning {
			return errSettled
		}
		r.State, r.Reason = stateFailed, ReasonMemberDied
		r.Message = "the pool member died or refused its binding after the claim; claim another"
		r.LastTransitionAt = time.Now().UTC()
		r.LateBind = nil
		return nil
	})
	if err != nil && !errors.Is(err, errSettled) && !errors.Is(err, store.ErrNotFound) {
		m.log.Warn("mark pool member Failed", "id", sb.ID, "err", err)
	}
	m.host.DropRoute(sb.ID)
	// Removed in the background: the call that found the member dead answers now.
	m.group.GoAlways(func() {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := m.runtime.Delete(ctx, sb.ID); err != nil {
			m.log.Warn("remove failed pool member", "id", sb.ID, "err", err)
		}
		m.Kick()
	})
}

// BeforeCall runs before any call forwarded to a claimed member (sb.Pool set): the
// member's late bindings hold from its very first call, so the call waits for them
// here; a member that died after its claim gets ErrMemberDied. It returns nil at once
// for a sandbox not taken from a pool.
func (m *Manager) BeforeCall(ctx context.Context, sb *store.Sandbox) error {
	if sb.Pool == "" {
		return nil
	}
	if sb.State == stateFailed && sb.Reason == ReasonMemberDied {
		return ErrMemberDied
	}
	c := m.binds.get(sb.ID)
	if c == nil && sb.LateBind != nil {
		c = m.bindElsewhere(ctx, sb)
	}
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.err != nil {
		return ErrMemberDied
	}
	return nil
}

// bindElsewhere handles a member whose record still names a binding this gateway is
// not applying: another replica claimed it (and is applying it), or the claiming
// gateway died first. It waits for the record to clear and applies the binding itself
// when it does not.
func (m *Manager) bindElsewhere(ctx context.Context, sb *store.Sandbox) *bindCall {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		cur, err := m.store.GetSandbox(ctx, sb.ID)
		if err != nil || cur.LateBind == nil {
			if err == nil && cur.State == stateFailed && cur.Reason == ReasonMemberDied {
				return &bindCall{done: closedChan, err: ErrMemberDied}
			}
			return nil
		}
		if c := m.binds.get(sb.ID); c != nil {
			return c
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	cur, err := m.store.GetSandbox(ctx, sb.ID)
	if err != nil || cur.LateBind == nil {
		return nil
	}
	m.bindLate([]*store.Sandbox{cur})
	return m.binds.get(sb.ID)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// MemberUnreachable is told of a forwarded call that a claimed member (sb.Pool set) did
// not answer. When the runtime does not report it running it is marked Failed and
// removed, and MemberUnreachable returns ErrMemberDied; else nil.
func (m *Manager) MemberUnreachable(ctx context.Context, sb *store.Sandbox, cause error) error {
	inst, err := m.runtime.Inspect(ctx, sb.ID)
	if err == nil && inst.State == runtimes.StateRunning {
		return nil
	}
	m.failMember(ctx, sb, cause)
	return ErrMemberDied
}

// claimProbeTimeout bounds the ping of a claimed member; one that does not answer in it
// is judged by the runtime's view instead, so a busy host does not cost a live member.
const claimProbeTimeout = 250 * time.Millisecond

// claimProbeMax is the largest claim whose members are pinged before it answers: one
// round of pings at once. A larger batch answers as bound (a thousand pings would be
// most of its time); its members rely on the runtime's event stream and the sweep, and
// one that died unreported answers its first call with SANDBOX::UNAVAILABLE.
const claimProbeMax = 16

// dropDeadClaims pings each freshly claimed member through the proxy's transport (its
// warm connection: a fraction of a millisecond) and keeps those that answer. A member
// whose agent refuses or resets the connection died before the runtime reported it (the
// engine reports a death only after it tore its network down); it is never handed out:
// its record goes, its container is removed in the background and the pool refilled. A
// ping that times out defers to the runtime (Inspect): only a member it does not report
// running is dropped. Without the proxy's warmer (no gateway around the manager) the
// members are returned as claimed, and so are those of a claim larger than
// claimProbeMax.
func (m *Manager) dropDeadClaims(ctx context.Context, got []*store.Sandbox) []*store.Sandbox {
	fp := m.connWarmer.Load()
	if fp == nil || len(got) > claimProbeMax {
		return got
	}
	dead := make([]bool, len(got))
	probe := func(i int) {
		sb := got[i]
		if sb.Address == "" {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, claimProbeTimeout)
		err := (*fp)(pctx, net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.AgentPort)), sb.AgentCredential())
		timedOut := pctx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		if timedOut {
			if inst, ierr := m.runtime.Inspect(ctx, sb.ID); ierr != nil && !errors.Is(ierr, runtimes.ErrNotFound) || ierr == nil && inst.State == runtimes.StateRunning {
				return // running, or the runtime cannot tell: handed out as claimed
			}
		}
		dead[i] = true
	}
	if len(got) == 1 {
		probe(0)
	} else {
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				probe(i)
			}()
		}
		wg.Wait()
	}
	live := got[:0:0]
	for i, sb := range got {
		if !dead[i] {
			live = append(live, sb)
			continue
		}
		m.dropClaimed(ctx, sb)
	}
	return live
}

// dropClaimed removes a member found dead in its own claim: the record first (it was
// never handed out, so no caller holds its id), then its container, in the background.
func (m *Manager) dropClaimed(ctx context.Context, sb *store.Sandbox) {
	m.log.Info("claimed pool member did not answer; not handed out", "id", sb.ID, "pool", sb.Pool)
	ctx = context.WithoutCancel(ctx)
	if err := m.store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Warn("remove the record of a dead claimed member", "id", sb.ID, "err", err)
	}
	m.host.DropRoute(sb.ID)
	m.group.GoAlways(func() {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := m.runtime.Delete(ctx, sb.ID); err != nil && !errors.Is(err, runtimes.ErrNotFound) {
			m.log.Warn("remove dead claimed member", "id", sb.ID, "err", err)
		}
		m.Kick()
	})
}
