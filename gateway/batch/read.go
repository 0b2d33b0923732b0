package batch

import (
	"context"
	"errors"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// The sandbox states a member's status can read as.
const (
	statePending    = "Pending"
	stateRunning    = "Running"
	stateFailed     = "Failed"
	stateTerminated = "Terminated"
)

// Get returns a batch with each member's current state; with agentAt, each Running
// member's agent endpoint too (memberEndpoints), for a client whose members came up
// cold.
func (m *Manager[T, Q]) Get(ctx context.Context, caller principal.Caller, id string, agentAt *Q) (*View, error) {
	b, errs, err := m.lookup(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	recs, err := m.store.GetSandboxes(ctx, b.Members)
	if err != nil {
		return nil, err
	}
	v, err := m.view(ctx, b, errs, nil, recs)
	if err != nil {
		return nil, err
	}
	if agentAt != nil {
		m.memberEndpoints(ctx, caller, v, recs, *agentAt)
	}
	return v, nil
}

// lookup reads a batch the caller may see; another tenant's answers like a missing one.
func (m *Manager[T, Q]) lookup(ctx context.Context, caller principal.Caller, id string) (*store.Batch, map[string]store.MemberError, error) {
	b, errs, err := m.store.GetBatch(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Admin && b.Tenant != caller.Tenant) {
		return nil, nil, fault.Errorf(fault.KindNotFound, CodeNotFound, "batch %s not found", id)
	}
	return b, errs, err
}

// view is the API form of b: each member's state from its record (known, or read when
// nil), its recorded failure, or its place in the queue; sources says where members
// came from when the caller knows it (a create), the records otherwise.
func (m *Manager[T, Q]) view(ctx context.Context, b *store.Batch, errs map[string]store.MemberError, sources map[string]string, known []*store.Sandbox) (*View, error) {
	recs := known
	if recs == nil {
		var err error
		if recs, err = m.store.GetSandboxes(ctx, b.Members); err != nil {
			return nil, err
		}
	}
	byID := make(map[string]*store.Sandbox, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	v := &View{ID: b.ID, Count: b.Count, PoolRef: b.PoolRef, CreatedAt: b.CreatedAt, Members: make([]Member, 0, len(b.Members))}
	for _, id := range b.Members {
		mb := Member{ID: id, Source: sources[id]}
		switch rec, ok := byID[id]; {
		case ok:
			status, claimed := m.host.MemberState(rec)
			mb.Status = status
			if mb.Source == "" {
				// Read back later: a claimed member says so in its record.
				mb.Source = SourceCold
				if claimed {
					mb.Source = SourcePool
				}
			}
		case errs[id].Code != "":
			e := errs[id]
			mb.Status = apiproto.Status{State: stateFailed, Reason: e.Code, Message: e.Message}
		case b.Queued[id] != "":
			mb.Status = apiproto.Status{State: statePending, Reason: "QUEUED", Message: "waiting for a cold start"}
		default:
			mb.Status = apiproto.Status{State: stateTerminated, Reason: "DELETED", Message: "the sandbox was deleted or expired"}
		}
		switch mb.Status.State {
		case stateRunning:
			v.Summary.Running++
		case statePending:
			v.Summary.Pending++
		case stateFailed:
			v.Summary.Failed++
		default:
			v.Summary.Gone++
		}
		v.Members = append(v.Members, mb)
	}
	return v, nil
}

// memberEndpoints sets the agent endpoint of each Running member of v whose record is in
// recs, for the caller's key, as the host's endpoint route answers it (the same access
// decision, the same key-bound value), so a batch answer tells no reader more than the
// reader's own endpoint calls would. A member the caller may not reach, or whose value
// cannot be derived now, is left without one: the client asks the endpoint route as
// before.
func (m *Manager[T, Q]) memberEndpoints(ctx context.Context, caller principal.Caller, v *View, recs []*store.Sandbox, at Q) {
	byID := make(map[string]*store.Sandbox, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	for i := range v.Members {
		mb := &v.Members[i]
		sb := byID[mb.ID]
		if sb == nil || mb.Status.State != stateRunning || (!caller.Admin && sb.Tenant != caller.Tenant) {
			continue
		}
		ep, err := m.host.AgentEndpoint(ctx, caller, sb, at)
		if err != nil {
			continue
		}
		mb.AgentEndpoint = ep
	}
}
