package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// work is what a gateway needs to make a batch's queued members: stored with the batch,
// so that any gateway can.
type work[T any] struct {
	Caller   principal.Caller `json:"caller"`
	Template T                `json:"template"`
	Request  T                `json:"request"`
}

func invalid(format string, args ...any) *fault.Error {
	return fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, format, args...)
}

// Create hands out req.Count sandboxes: as many as the pool has are claimed in one
// script (and returned Running); the rest start cold in the background (Pending), each
// failure recorded against its member. With agentAt (how the caller reached the
// gateway) the answer gives each Running member's agent endpoint as the caller would
// get it from the endpoint route (memberEndpoints).
func (m *Manager[T, Q]) Create(ctx context.Context, caller principal.Caller, req Request[T], agentAt *Q) (*View, error) {
	defer m.metrics.Batch(time.Now())
	if req.Count < 1 || req.Count > m.cfg.MaxSize {
		return nil, invalid("count %d: want 1 to %d", req.Count, m.cfg.MaxSize)
	}
	if (req.PoolRef == "") == (req.Template == nil) {
		return nil, invalid("give exactly one of poolRef and template")
	}
	plan, err := m.host.Admit(ctx, caller, req)
	if err != nil {
		return nil, err
	}
	b := &store.Batch{ID: uuid.NewString(), Tenant: caller.Tenant, Count: req.Count, PoolRef: req.PoolRef, CreatedAt: time.Now().UTC(), Queued: map[string]string{}}
	sources := map[string]string{}
	var warm []*store.Sandbox
	if plan.Pool != nil {
		got, emitted, err := m.host.Claim(ctx, caller, plan, req.Count, b.ID)
		if err != nil {
			return nil, err
		}
		// The events are written while the batch record is; the answer waits for both.
		defer emitted()
		warm = got
		for _, sb := range got {
			b.Members = append(b.Members, sb.ID)
			sources[sb.ID] = SourcePool
		}
	}
	cold := make([]string, 0, req.Count-len(warm))
	for len(b.Members) < req.Count {
		id := uuid.NewString()
		b.Members = append(b.Members, id)
		sources[id] = SourceCold
		cold = append(cold, id)
	}
	// The cold members are durable work: written with the batch, under this gateway's
	// heartbeat, so that another gateway makes them if this one dies.
	raw, err := json.Marshal(work[T]{Caller: caller, Template: plan.Template, Request: plan.Claim})
	if err != nil {
		return nil, err
	}
	if err := m.store.PutBatchWork(ctx, b, raw, m.cfg.Owner, cold); err != nil {
		return nil, err
	}
	for _, id := range cold {
		b.Queued[id] = m.cfg.Owner
	}
	if len(cold) > 0 {
		m.startCold(caller, b, plan.Template, plan.Claim, cold)
	}
	// The claimed records are in hand; cold members have none yet (members just queued
	// for a cold start read as Pending until their record exists).
	view, err := m.view(ctx, b, nil, sources, warm)
	if err != nil {
		return nil, err
	}
	if agentAt != nil {
		m.memberEndpoints(ctx, caller, view, warm, *agentAt)
	}
	return view, nil
}

// Resume makes the members ids of batch b, taken over from a gateway that is gone, from
// the work stored with the batch; an error when that work cannot be read back (nothing
// is started).
func (m *Manager[T, Q]) Resume(ctx context.Context, b *store.Batch, ids []string) error {
	raw, err := m.store.BatchWork(ctx, b.ID)
	if err != nil {
		return err
	}
	var w work[T]
	if err := json.Unmarshal(raw, &w); err != nil {
		return fmt.Errorf("decode the work of batch %s: %w", b.ID, err)
	}
	m.startCold(w.Caller, b, w.Template, w.Request, ids)
	return nil
}

// startCold creates the cold members in the background, ColdConcurrency at a time.
func (m *Manager[T, Q]) startCold(caller principal.Caller, b *store.Batch, tmpl, claim T, ids []string) {
	sem := make(chan struct{}, m.cfg.ColdConcurrency)
	for _, id := range ids {
		m.group.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-m.group.Done():
				return
			}
			defer func() { <-sem }()
			m.startMember(caller, b, tmpl, claim, id)
		})
	}
}

// startMember makes one queued member and settles it in the batch: made, or failed
// with the cause.
func (m *Manager[T, Q]) startMember(caller principal.Caller, b *store.Batch, tmpl, claim T, id string) {
	ctx, cancel := m.background()
	defer cancel()
	if _, _, err := m.store.GetBatch(ctx, b.ID); errors.Is(err, store.ErrNotFound) {
		return // the batch was deleted before this member's turn
	}
	if _, err := m.host.CreateCold(ctx, caller, tmpl, claim, id, b.ID); err != nil {
		e := MemberError(err)
		m.log.Warn("batch member failed", "batch", b.ID, "member", id, "code", e.Code, "err", err)
		// false or an error leaves the member queued: a peer's takeover settles it.
		_, _ = m.store.FailMember(ctx, b.ID, id, m.cfg.Owner, e)
		return
	}
	// As above: an unsettled member is settled by the takeover.
	_, _ = m.store.FinishMember(ctx, b.ID, id, m.cfg.Owner)
	if _, _, err := m.store.GetBatch(ctx, b.ID); errors.Is(err, store.ErrNotFound) {
		m.host.Discard(ctx, id) // deleted while this member started
	}
}

// MemberError turns an error into the code and message recorded for a failed member.
func MemberError(err error) store.MemberError {
	if e, ok := fault.AsError(err); ok {
		return store.MemberError{Code: e.Code, Message: e.Message}
	}
	if errors.Is(err, store.ErrUnavailable) {
		return store.MemberError{Code: fault.CodeStoreUnavailable, Message: "the state store was unreachable"}
	}
	return store.MemberError{Code: fault.CodeInternal, Message: err.Error()}
}
