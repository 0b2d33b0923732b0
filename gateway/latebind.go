package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// ReasonMemberDied is the Failed reason of such a member.
const ReasonMemberDied = "MEMBER_DIED"

// lateBinds tracks the late bindings this gateway is applying: a claim answers as soon
// as its script ran, the bindings (env, entrypoint, egress policy) run in the
// background, bounded, and the first call to the member waits for its own (BeforeAgentCall).
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

// lateBindOf is what a claim leaves to bind on a member, nil when nothing.
func lateBindOf(req CreateRequest, entrypoint bool) *store.LateBind {
	np := strings.TrimSpace(string(req.NetworkPolicy))
	if np == "null" {
		np = ""
	}
	if len(req.Env) == 0 && !entrypoint && np == "" {
		return nil
	}
	return &store.LateBind{Env: req.Env, Entrypoint: entrypoint, NetworkPolicy: np}
}

// bindLate applies the late bindings of freshly claimed members in the background,
// LateBindConcurrency at a time; each member's first call waits for its own.
func (s *Service) bindLate(members []*store.Sandbox) {
	for _, sb := range members {
		if sb.LateBind == nil {
			continue
		}
		c, run := s.binds.start(sb.ID)
		if !run {
			continue
		}
		if !s.spawn(func() { s.runLateBind(sb, c) }) {
			c.err = errors.New("gateway stopping")
			close(c.done)
		}
	}
}

func (s *Service) runLateBind(sb *store.Sandbox, c *bindCall) {
	defer close(c.done)
	select {
	case s.binds.sem <- struct{}{}:
	case <-s.stop:
		c.err = errors.New("gateway stopping")
		return
	}
	defer func() { <-s.binds.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c.err = s.applyLateBind(ctx, sb)
	if c.err != nil {
		s.failMember(ctx, sb, c.err)
	}
}

// applyLateBind applies a member's env, entrypoint and egress policy through its agent
// and enforcer, then clears the record's pending binding.
func (s *Service) applyLateBind(ctx context.Context, sb *store.Sandbox) error {
	lb := sb.LateBind
	if len(lb.Env) > 0 || lb.Entrypoint {
		if err := s.bindClaim(ctx, sb, lb.Env, lb.Entrypoint); err != nil {
			return err
		}
	}
	if lb.NetworkPolicy != "" {
		if err := s.bindClaimEgress(ctx, Caller{Tenant: sb.Tenant}, sb, CreateRequest{NetworkPolicy: json.RawMessage(lb.NetworkPolicy)}); err != nil {
			return err
		}
	}
	_, err := s.store.ModifySandbox(ctx, sb.ID, func(r *store.Sandbox) error {
		r.LateBind = nil
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) { // not found: deleted meanwhile
		// Applied all the same: the member serves. The record keeps naming the binding,
		// which another replica's first call applies once more (idempotent but for a
		// changed entrypoint, which restarts).
		s.log.Warn("late binding applied but not cleared in the store", "id", sb.ID, "err", err)
	}
	return nil
}

// failMember marks a claimed member that cannot serve (dead, or its binding refused)
// Failed, removes its container and lets the pool replace it.
func (s *Service) failMember(ctx context.Context, sb *store.Sandbox, cause error) {
	ctx = context.WithoutCancel(ctx)
	s.log.Warn("claimed pool member is unavailable; marking it Failed", "id", sb.ID, "pool", sb.Pool, "err", cause)
	_, err := s.store.ModifySandbox(ctx, sb.ID, func(r *store.Sandbox) error {
		if r.State != StateRunning {
			return errAlreadySettled
		}
		r.State, r.Reason = StateFailed, ReasonMemberDied
		r.Message = "the pool member died or refused its binding after the claim; claim another"
		r.LastTransitionAt = time.Now().UTC()
		r.LateBind = nil
		return nil
	})
	if err != nil && !errors.Is(err, errAlreadySettled) && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("mark pool member Failed", "id", sb.ID, "err", err)
	}
	s.routes.drop(sb.ID)
	// Removed in the background: the call that found the member dead answers now.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := s.runtime.Delete(ctx, sb.ID); err != nil {
			s.log.Warn("remove failed pool member", "id", sb.ID, "err", err)
		}
		s.kickPools()
	}()
}

var errAlreadySettled = errors.New("already settled")

func unavailable(id string) error {
	return Errorf(KindUnavailable, CodeUnavailable, "sandbox %s died after it was claimed and is marked Failed; claim another", id)
}

// BeforeAgentCall runs before any call the gateway forwards to a sandbox (agent or any
// other port): a claimed member's late bindings hold from its very first call, so the
// call waits for them here; a member that died after its claim answers
// SANDBOX::UNAVAILABLE. It costs nothing for a sandbox that was not claimed from a pool.
func (s *Service) BeforeAgentCall(ctx context.Context, sb *store.Sandbox) error {
	if sb.Pool == "" {
		return nil
	}
	if sb.State == StateFailed && sb.Reason == ReasonMemberDied {
		return unavailable(sb.ID)
	}
	c := s.binds.get(sb.ID)
	if c == nil && sb.LateBind != nil {
		c = s.bindElsewhere(ctx, sb)
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
		return unavailable(sb.ID)
	}
	return nil
}

// bindElsewhere handles a member whose record still names a binding this gateway is
// not applying: another replica claimed it (and is applying it), or the claiming
// gateway died first. It waits for the record to clear and applies the binding itself
// when it does not.
func (s *Service) bindElsewhere(ctx context.Context, sb *store.Sandbox) *bindCall {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		cur, err := s.store.GetSandbox(ctx, sb.ID)
		if err != nil || cur.LateBind == nil {
			if err == nil && cur.State == StateFailed && cur.Reason == ReasonMemberDied {
				return &bindCall{done: closedChan, err: errors.New("member died")}
			}
			return nil
		}
		if c := s.binds.get(sb.ID); c != nil {
			return c
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	cur, err := s.store.GetSandbox(ctx, sb.ID)
	if err != nil || cur.LateBind == nil {
		return nil
	}
	s.bindLate([]*store.Sandbox{cur})
	return s.binds.get(sb.ID)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
