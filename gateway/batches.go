package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// BatchRequest is the body of POST /v1/batches: count sandboxes of a template, or claimed
// from a pool (poolRef), with the claim's own timeout, env and metadata (declared in
// apiproto, for the gateway and the Go SDK alike).
type BatchRequest = apiproto.BatchRequest[CreateRequest]

// BatchView is the API form of a batch, BatchMember one of its sandboxes and
// BatchSummary its members counted by outcome, declared once for the gateway and the
// Go SDK in apiproto.
type (
	BatchView    = apiproto.Batch
	BatchMember  = apiproto.BatchMember
	BatchSummary = apiproto.BatchSummary
)

// CreateBatch hands out Count sandboxes: as many as the pool has are claimed in one
// script (and returned Running); the rest start cold in the background (Pending), each
// failure recorded against its member.
func (s *Service) CreateBatch(ctx context.Context, caller Caller, req BatchRequest) (*BatchView, error) {
	return s.CreateBatchWithEndpoints(ctx, caller, req, nil)
}

// CreateBatchWithEndpoints is CreateBatch whose answer gives, with agentAt (the
// request's host and scheme), each Running member's agent endpoint as the caller would
// get it from GetEndpoint (BatchMember.AgentEndpoint, memberEndpoints).
func (s *Service) CreateBatchWithEndpoints(ctx context.Context, caller Caller, req BatchRequest, agentAt *EndpointQuery) (*BatchView, error) {
	defer s.metrics.Batch(time.Now())
	if req.Count < 1 || req.Count > s.cfg.MaxBatchSize {
		return nil, invalid("count %d: want 1 to %d", req.Count, s.cfg.MaxBatchSize)
	}
	if (req.PoolRef == "") == (req.Template == nil) {
		return nil, invalid("give exactly one of poolRef and template")
	}
	claimReq := CreateRequest{Timeout: req.Timeout, Env: req.Env, Metadata: req.Metadata, Entrypoint: req.Entrypoint}
	var tmpl CreateRequest
	var pool *store.Pool
	if req.PoolRef != "" {
		p, t, err := s.claimTarget(ctx, caller, req.PoolRef, claimReq)
		if err != nil {
			return nil, err
		}
		pool, tmpl = p, t
	} else {
		tmpl = *req.Template
		if err := s.validateClaimInput(claimReq); err != nil {
			return nil, err
		}
		merged := tmpl
		merged.Metadata = mergeMaps(tmpl.Metadata, req.Metadata)
		if _, err := s.validateCreate(merged); err != nil {
			return nil, err
		}
	}
	if err := s.admitClaim(ctx, caller, tmpl, claimReq, req.Count); err != nil {
		return nil, err
	}
	b := &store.Batch{ID: uuid.NewString(), Tenant: caller.Tenant, Count: req.Count, PoolRef: req.PoolRef, CreatedAt: time.Now().UTC(), Queued: map[string]string{}}
	sources := map[string]string{}
	var warm []*store.Sandbox
	if pool != nil {
		got, emitted, err := s.claim(ctx, caller, pool, tmpl, claimReq, req.Count, b.ID)
		if err != nil {
			return nil, err
		}
		// The events are written while the batch record is; the answer waits for both.
		defer emitted()
		warm = got
		for _, sb := range got {
			b.Members = append(b.Members, sb.ID)
			sources[sb.ID] = "pool"
		}
	}
	cold := make([]string, 0, req.Count-len(warm))
	for len(b.Members) < req.Count {
		id := uuid.NewString()
		b.Members = append(b.Members, id)
		sources[id] = "cold"
		cold = append(cold, id)
	}
	// The cold members are durable work: written with the batch, under this gateway's
	// heartbeat, so that another gateway makes them if this one dies.
	work, err := json.Marshal(batchWork{Caller: caller, Template: tmpl, Request: claimReq})
	if err != nil {
		return nil, err
	}
	if err := s.store.PutBatchWork(ctx, b, work, s.owner, cold); err != nil {
		return nil, err
	}
	for _, id := range cold {
		b.Queued[id] = s.owner
	}
	if len(cold) > 0 {
		s.startColdMembers(caller, b, tmpl, claimReq, cold)
	}
	// The claimed records are in hand; cold members have none yet (members just queued
	// for a cold start read as Pending until their record exists).
	view, err := s.batchView(ctx, b, nil, sources, warm)
	if err != nil {
		return nil, err
	}
	if agentAt != nil {
		s.memberEndpoints(ctx, caller, view, warm, *agentAt)
	}
	return view, nil
}

// memberEndpoints sets the agent endpoint of each Running member of v whose record is
// in recs, for the caller's key: the same Rego decision as the endpoint route's
// (sandbox.proxy on that sandbox) and the same key-bound value (package gateway/access),
// so a batch answer tells no reader more than the reader's own endpoint calls would. A member
// the caller may not reach, or whose value cannot be derived now (the key's hash
// unreadable), is left without one: the client asks GetEndpoint as before.
func (s *Service) memberEndpoints(ctx context.Context, caller Caller, v *BatchView, recs []*store.Sandbox, q EndpointQuery) {
	byID := make(map[string]*store.Sandbox, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	for i := range v.Members {
		m := &v.Members[i]
		sb := byID[m.ID]
		if sb == nil || m.Status.State != StateRunning || (!caller.Admin && sb.Tenant != caller.Tenant) {
			continue
		}
		path := "/v1/sandboxes/" + sb.ID + "/endpoints/" + agentPortString
		if s.Authorize(ctx, caller, "sandbox.proxy", Resource{Kind: "sandbox", ID: sb.ID, Tenant: caller.Tenant}, "GET", path, nil) != nil {
			continue
		}
		ep, err := s.endpointOf(ctx, caller, sb, runtimes.AgentPort, q)
		if err != nil {
			continue
		}
		m.AgentEndpoint = ep
	}
}

var agentPortString = strconv.Itoa(runtimes.AgentPort)

// startColdMembers creates the cold members in the background, bounded by BatchConcurrency.
func (s *Service) startColdMembers(caller Caller, b *store.Batch, tmpl, req CreateRequest, ids []string) {
	sem := make(chan struct{}, s.cfg.BatchConcurrency)
	for _, id := range ids {
		s.wg.Add(1)
		go func(id string) {
			defer s.wg.Done()
			select {
			case sem <- struct{}{}:
			case <-s.stop:
				return
			}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReadyTimeout+2*time.Minute)
			defer cancel()
			if _, _, err := s.store.GetBatch(ctx, b.ID); errors.Is(err, store.ErrNotFound) {
				return // the batch was deleted before this member's turn
			}
			if _, err := s.coldFromTemplate(ctx, caller, tmpl, req, id, b.ID); err != nil {
				e := MemberError(err)
				s.log.Warn("batch member failed", "batch", b.ID, "member", id, "code", e.Code, "err", err)
				// false or an error leaves the member queued: a peer's takeover settles it.
				_, _ = s.store.FailMember(ctx, b.ID, id, s.owner, e)
				return
			}
			// As above: an unsettled member is settled by the takeover (takeover.go).
			_, _ = s.store.FinishMember(ctx, b.ID, id, s.owner)
			if _, _, err := s.store.GetBatch(ctx, b.ID); errors.Is(err, store.ErrNotFound) {
				s.discard(ctx, id) // deleted while this member started
			}
		}(id)
	}
}

// MemberError turns an error into the code and message recorded for a failed member.
func MemberError(err error) store.MemberError {
	if e, ok := AsError(err); ok {
		return store.MemberError{Code: e.Code, Message: e.Message}
	}
	if errors.Is(err, store.ErrUnavailable) {
		return store.MemberError{Code: CodeStoreUnavailable, Message: "the state store was unreachable"}
	}
	return store.MemberError{Code: CodeInternal, Message: err.Error()}
}

// GetBatch returns a batch with each member's current state.
func (s *Service) GetBatch(ctx context.Context, caller Caller, id string) (*BatchView, error) {
	return s.GetBatchWithEndpoints(ctx, caller, id, nil)
}

// GetBatchWithEndpoints is GetBatch whose answer gives, with agentAt, each Running
// member's agent endpoint (memberEndpoints), for a client whose members came up cold.
func (s *Service) GetBatchWithEndpoints(ctx context.Context, caller Caller, id string, agentAt *EndpointQuery) (*BatchView, error) {
	b, errs, err := s.lookupBatch(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	recs, err := s.store.GetSandboxes(ctx, b.Members)
	if err != nil {
		return nil, err
	}
	v, err := s.batchView(ctx, b, errs, nil, recs)
	if err != nil {
		return nil, err
	}
	if agentAt != nil {
		s.memberEndpoints(ctx, caller, v, recs, *agentAt)
	}
	return v, nil
}

func (s *Service) lookupBatch(ctx context.Context, caller Caller, id string) (*store.Batch, map[string]store.MemberError, error) {
	b, errs, err := s.store.GetBatch(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Admin && b.Tenant != caller.Tenant) {
		return nil, nil, Errorf(KindNotFound, CodeBatchNotFound, "batch %s not found", id)
	}
	return b, errs, err
}

func (s *Service) batchView(ctx context.Context, b *store.Batch, errs map[string]store.MemberError, sources map[string]string, known []*store.Sandbox) (*BatchView, error) {
	recs := known
	if recs == nil {
		var err error
		if recs, err = s.store.GetSandboxes(ctx, b.Members); err != nil {
			return nil, err
		}
	}
	byID := make(map[string]*store.Sandbox, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	v := &BatchView{ID: b.ID, Count: b.Count, PoolRef: b.PoolRef, CreatedAt: b.CreatedAt, Members: make([]BatchMember, 0, len(b.Members))}
	for _, id := range b.Members {
		m := BatchMember{ID: id, Source: sources[id]}
		switch rec, ok := byID[id]; {
		case ok:
			m.Status = View(rec).Status
			if m.Source == "" {
				// Read back later: a claimed member carries its pool in its metadata.
				m.Source = "cold"
				if rec.Metadata[MetadataPool] != "" {
					m.Source = "pool"
				}
			}
		case errs[id].Code != "":
			e := errs[id]
			m.Status = Status{State: StateFailed, Reason: e.Code, Message: e.Message}
		case b.Queued[id] != "":
			m.Status = Status{State: StatePending, Reason: "QUEUED", Message: "waiting for a cold start"}
		default:
			m.Status = Status{State: StateTerminated, Reason: "DELETED", Message: "the sandbox was deleted or expired"}
		}
		switch m.Status.State {
		case StateRunning:
			v.Summary.Running++
		case StatePending:
			v.Summary.Pending++
		case StateFailed:
			v.Summary.Failed++
		default:
			v.Summary.Gone++
		}
		v.Members = append(v.Members, m)
	}
	return v, nil
}

// DeleteBatch deletes every member of a batch, then the batch.
func (s *Service) DeleteBatch(ctx context.Context, caller Caller, id string) error {
	b, _, err := s.lookupBatch(ctx, caller, id)
	if err != nil {
		return err
	}
	recs, err := s.store.GetSandboxes(ctx, b.Members)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 8)
	for _, rec := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func(rec *store.Sandbox) {
			defer wg.Done()
			defer func() { <-sem }()
			sb, err := s.markStopping(ctx, rec.ID, nil)
			if errors.Is(err, store.ErrNotFound) {
				return // deleted meanwhile
			}
			if err == nil {
				err = s.removeStopping(ctx, sb, map[string]any{"key": caller.KeyID, "batch": b.ID})
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}(rec)
	}
	wg.Wait()
	if firstErr != nil {
		if _, ok := AsError(firstErr); ok || errors.Is(firstErr, store.ErrUnavailable) {
			return firstErr
		}
		return &Error{Kind: KindInternal, Code: CodeRuntimeError, Message: "some members could not be removed; retry the delete", Cause: firstErr}
	}
	return s.store.DeleteBatch(ctx, b)
}
