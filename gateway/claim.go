package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// createFromPool claims one warm sandbox of the named pool for the caller, waiting up to
// PoolWait for a refill when the pool is empty, then falling back to a cold create (or
// failing, as configured).
func (s *Service) createFromPool(ctx context.Context, caller Caller, poolName string, req CreateRequest) (*store.Sandbox, error) {
	p, tmpl, err := s.claimTarget(ctx, caller, poolName, req)
	if err != nil {
		return nil, err
	}
	if err := s.admitClaim(ctx, caller, tmpl, req, 1); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.cfg.PoolWait)
	for {
		got, emitted, err := s.claim(ctx, caller, p, tmpl, req, 1, "")
		if err != nil {
			return nil, err
		}
		emitted()
		if len(got) == 1 {
			return got[0], nil
		}
		s.pool.Kick()
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if s.cfg.PoolFallback == "fail" {
		return nil, Errorf(KindUnavailable, CodePoolEmpty, "pool %q has no warm sandbox and none came within %s", poolName, s.cfg.PoolWait)
	}
	return s.coldFromTemplate(ctx, caller, tmpl, req, uuid.NewString(), "")
}

// claimTarget loads the pool and merges the request into its template for validation.
func (s *Service) claimTarget(ctx context.Context, caller Caller, poolName string, req CreateRequest) (*store.Pool, CreateRequest, error) {
	var tmpl CreateRequest
	p, err := s.pool.Lookup(ctx, caller, poolName)
	if err != nil {
		return nil, tmpl, err
	}
	if err := json.Unmarshal(p.Template, &tmpl); err != nil {
		return nil, tmpl, fmt.Errorf("decode pool template: %w", err)
	}
	if err := s.validateClaimInput(req); err != nil {
		return nil, tmpl, err
	}
	if err := claimCredentialProxy(tmpl, req); err != nil {
		return nil, tmpl, err
	}

	if err := s.egress.ValidateClaim(ctx, caller.Tenant, req.NetworkPolicy); err != nil {
		return nil, tmpl, err
	}
	if req.Image != nil && req.Image.URI != "" && req.Image.URI != tmpl.Image.URI {
		return nil, tmpl, invalid("image %q differs from pool %q's image %q", req.Image.URI, poolName, tmpl.Image.URI)
	}
	return p, tmpl, nil
}

// admitClaim runs the admission policy for count sandboxes of a pool's template.
func (s *Service) admitClaim(ctx context.Context, caller Caller, tmpl, req CreateRequest, count int) error {
	merged := tmpl
	merged.Timeout = claimTimeout(tmpl, req)
	merged.Extensions = req.Extensions
	spec, err := s.validateCreate(merged)
	if err != nil {
		return err
	}
	_, err = s.admission.Admit(ctx, caller, admissionFor(spec, merged, count))
	return err
}

// coldFromTemplate starts a sandbox of a pool's template (with the claim's fields) cold.
func (s *Service) coldFromTemplate(ctx context.Context, caller Caller, tmpl, req CreateRequest, id, batch string) (*store.Sandbox, error) {
	merged := tmpl
	merged.Metadata = mergeMaps(tmpl.Metadata, req.Metadata)
	merged.Env = mergeMaps(tmpl.Env, req.Env)
	if len(req.Entrypoint) > 0 {
		merged.Entrypoint = req.Entrypoint
	}
	merged.Timeout = claimTimeout(tmpl, req)
	merged.Extensions = req.Extensions
	if len(req.NetworkPolicy) > 0 {
		merged.NetworkPolicy = req.NetworkPolicy
	}
	spec, err := s.validateCreate(merged)
	if err != nil {
		return nil, err
	}
	return s.createCold(ctx, caller, merged, spec, id, batch)
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// claim binds up to n warm members in one script (pool.Manager.Claim) and returns them
// at once. What the claim binds late (env, entrypoint, egress policy) rides in each
// record and is applied in the background; a member's first call waits for its own
// (BeforeAgentCall), and one that died in between answers SANDBOX::UNAVAILABLE and is
// marked Failed.
//
// The members' sandbox.created events are written while the caller goes on (a batch
// writes its record meanwhile); emitted returns once they are, and the caller answers
// after it, so that the events are in the stream before anyone can act on a member.
func (s *Service) claim(ctx context.Context, caller Caller, p *store.Pool, tmpl, req CreateRequest, n int, batch string) (got []*store.Sandbox, emitted func(), err error) {
	defer s.metrics.Claim(time.Now())
	now := time.Now().UTC()
	metadata := withEntry(mergeMaps(tmpl.Metadata, req.Metadata), MetadataPool, p.Name)
	if batch != "" {
		metadata[MetadataBatch] = batch
	}
	patch := store.ClaimPatch{
		"tenant": caller.Tenant, "metadata": metadata, "createdAt": now, "lastTransitionAt": now,
		"state": StateRunning, "extensions": req.Extensions,
	}
	if batch != "" {
		patch["batch"] = batch
	}
	expires := ""
	if exp := expiryFor(now, claimTimeout(tmpl, req)); exp != nil {
		patch["expiresAt"] = *exp
		expires = fmt.Sprint(exp.UnixMilli())
	}
	entrypointChanged := len(req.Entrypoint) > 0 && strings.Join(req.Entrypoint, "\x00") != strings.Join(tmpl.Entrypoint, "\x00")
	if entrypointChanged {
		patch["entrypoint"] = req.Entrypoint
	}
	if lb := lateBindOf(req, entrypointChanged); lb != nil {
		patch["lateBind"] = lb
	}
	got, err = s.pool.Claim(ctx, p, caller.Tenant, n, patch, now.UnixMilli(), expires)
	if err != nil {
		return nil, nil, err
	}
	if len(got) == 0 {
		return nil, func() {}, nil
	}
	created := func(sb *store.Sandbox) store.Event {
		return store.Event{Type: plugins.EventSandboxCreated, Tenant: sb.Tenant, SandboxID: sb.ID, Time: now,
			Data: map[string]any{"image": sb.Image, "key": caller.KeyID, "source": "pool", "pool": p.Name}}
	}
	alike := true
	for _, sb := range got {
		alike = alike && sb.Tenant == got[0].Tenant && sb.Image == got[0].Image
	}
	emit := func() {
		if alike {
			// Members of one pool: one event but for its sandbox, written in one script.
			s.eventLog.EmitPerSandbox(ctx, created(got[0]), got)
			return
		}
		evs := make([]store.Event, 0, len(got))
		for _, sb := range got {
			evs = append(evs, created(sb))
		}
		s.eventLog.EmitAll(ctx, evs)
	}
	if len(got) == 1 {
		// Nothing to overlap with: a goroutine would only add its start.
		emit()
		return got, func() {}, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		emit()
	}()
	return got, func() { <-done }, nil
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
