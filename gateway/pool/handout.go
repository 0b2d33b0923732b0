package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// CodeEmpty: no warm sandbox was free, and none came within the pool wait.
const CodeEmpty = "POOL::EMPTY"

// metadataBatch is the metadata key naming the batch a sandbox belongs to (the core's
// own, gateway.MetadataBatch).
const metadataBatch = "sandgate.io/batch"

// CreateFromPool claims one warm sandbox of the named pool for the caller (a create
// whose extensions.poolRef names it), waiting up to Config.Wait for a refill when the
// pool is empty, then falling back to a cold create (or failing, as Config.Fallback
// says).
func (m *Manager) CreateFromPool(ctx context.Context, caller principal.Caller, poolName string, req createreq.Request) (*store.Sandbox, error) {
	p, tmpl, err := m.ClaimTarget(ctx, caller, poolName, req)
	if err != nil {
		return nil, err
	}
	if err := m.AdmitClaim(ctx, caller, tmpl, req, 1); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(m.cfg.Wait)
	for {
		got, emitted, err := m.Take(ctx, caller, p, tmpl, req, 1, "")
		if err != nil {
			return nil, err
		}
		emitted()
		if len(got) == 1 {
			return got[0], nil
		}
		m.Kick()
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if m.cfg.Fallback == "fail" {
		return nil, fault.Errorf(fault.KindUnavailable, CodeEmpty, "pool %q has no warm sandbox and none came within %s", poolName, m.cfg.Wait)
	}
	return m.ColdFromTemplate(ctx, caller, tmpl, req, uuid.NewString(), "")
}

// ClaimTarget loads the caller's pool and its template, and checks what the claim req
// adds to it (Host.CheckClaim; an image, when given, must be the template's).
func (m *Manager) ClaimTarget(ctx context.Context, caller principal.Caller, poolName string, req createreq.Request) (*store.Pool, createreq.Request, error) {
	var tmpl createreq.Request
	p, err := m.Lookup(ctx, caller, poolName)
	if err != nil {
		return nil, tmpl, err
	}
	if err := json.Unmarshal(p.Template, &tmpl); err != nil {
		return nil, tmpl, fmt.Errorf("decode pool template: %w", err)
	}
	if err := m.host.CheckClaim(ctx, caller, tmpl, req); err != nil {
		return nil, tmpl, err
	}
	if req.Image != nil && req.Image.URI != "" && req.Image.URI != tmpl.Image.URI {
		return nil, tmpl, fault.Errorf(fault.KindInvalid, fault.CodeInvalidParameter, "image %q differs from pool %q's image %q", req.Image.URI, poolName, tmpl.Image.URI)
	}
	return p, tmpl, nil
}

// AdmitClaim runs admission (Host.Admit) for count sandboxes of a pool's template with
// the claim's timeout and extensions.
func (m *Manager) AdmitClaim(ctx context.Context, caller principal.Caller, tmpl, req createreq.Request, count int) error {
	merged := tmpl
	merged.Timeout = ClaimTimeout(tmpl, req)
	merged.Extensions = req.Extensions
	return m.host.Admit(ctx, caller, merged, count)
}

// ColdFromTemplate starts a sandbox of a pool's template, with the claim's fields, cold
// (Host.CreateCold), recorded under id and, when set, batch.
func (m *Manager) ColdFromTemplate(ctx context.Context, caller principal.Caller, tmpl, req createreq.Request, id, batch string) (*store.Sandbox, error) {
	merged := tmpl
	merged.Metadata = MergeMaps(tmpl.Metadata, req.Metadata)
	merged.Env = MergeMaps(tmpl.Env, req.Env)
	if len(req.Entrypoint) > 0 {
		merged.Entrypoint = req.Entrypoint
	}
	merged.Timeout = ClaimTimeout(tmpl, req)
	merged.Extensions = req.Extensions
	if len(req.NetworkPolicy) > 0 {
		merged.NetworkPolicy = req.NetworkPolicy
	}
	return m.host.CreateCold(ctx, caller, merged, id, batch)
}

// Take binds up to n warm members of p to the caller in one script (Claim) and returns
// them at once. What the claim binds late (env, entrypoint, egress policy) rides in each
// record and is applied in the background; a member's first call waits for its own
// (gateway.Service.OpenUpstream), and one that died in between is marked Failed.
//
// The members' sandbox.created events are written while the caller goes on (a batch
// writes its record meanwhile); emitted returns once they are, and the caller answers
// after it, so that the events are in the stream before anyone can act on a member.
func (m *Manager) Take(ctx context.Context, caller principal.Caller, p *store.Pool, tmpl, req createreq.Request, n int, batch string) (got []*store.Sandbox, emitted func(), err error) {
	defer m.cfg.Metrics.Claim(time.Now())
	now := time.Now().UTC()
	metadata := MergeMaps(tmpl.Metadata, req.Metadata)
	if metadata == nil {
		metadata = map[string]string{}
	}
	metadata[MetadataPool] = p.Name
	if batch != "" {
		metadata[metadataBatch] = batch
	}
	patch := store.ClaimPatch{
		"tenant": caller.Tenant, "metadata": metadata, "createdAt": now, "lastTransitionAt": now,
		"state": stateRunning, "extensions": req.Extensions,
	}
	if batch != "" {
		patch["batch"] = batch
	}
	expires := ""
	if t := ClaimTimeout(tmpl, req); t != nil {
		exp := now.Add(time.Duration(*t) * time.Second)
		patch["expiresAt"] = exp
		expires = fmt.Sprint(exp.UnixMilli())
	}
	entrypointChanged := len(req.Entrypoint) > 0 && strings.Join(req.Entrypoint, "\x00") != strings.Join(tmpl.Entrypoint, "\x00")
	if entrypointChanged {
		patch["entrypoint"] = req.Entrypoint
	}
	if lb := lateBindOf(req, entrypointChanged); lb != nil {
		patch["lateBind"] = lb
	}
	got, err = m.Claim(ctx, p, caller.Tenant, n, patch, now.UnixMilli(), expires)
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
			m.host.EmitPerSandbox(ctx, created(got[0]), got)
			return
		}
		evs := make([]store.Event, 0, len(got))
		for _, sb := range got {
			evs = append(evs, created(sb))
		}
		m.host.EmitAll(ctx, evs)
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

// ClaimTimeout is the timeout of a sandbox a claim (or a batch) hands out: the claim's,
// else its template's.
func ClaimTimeout(tmpl, req createreq.Request) *int64 {
	if req.Timeout != nil {
		return req.Timeout
	}
	return tmpl.Timeout
}

// MergeMaps is a copy of a with b's entries over it; nil when both are empty.
func MergeMaps(a, b map[string]string) map[string]string {
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

// lateBindOf is what a claim leaves to bind on a member, nil when nothing.
func lateBindOf(req createreq.Request, entrypoint bool) *store.LateBind {
	np := strings.TrimSpace(string(req.NetworkPolicy))
	if np == "null" {
		np = ""
	}
	if len(req.Env) == 0 && !entrypoint && np == "" {
		return nil
	}
	return &store.LateBind{Env: req.Env, Entrypoint: entrypoint, NetworkPolicy: np}
}
