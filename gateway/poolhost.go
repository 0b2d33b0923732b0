package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/egress"
	"github.com/sandgate/sandgate/gateway/pool"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// ConnWarmer makes the proxy that forwards sandbox traffic open a keep-alive connection
// to an agent and keep it idle (pool.ConnWarmer).
type ConnWarmer = pool.ConnWarmer

// DefaultAgentIdleTimeout is Config.AgentIdleTimeout's default, Caddy's own for
// reverse_proxy's idle connections.
const DefaultAgentIdleTimeout = 2 * time.Minute

// SetConnWarmer gives the pool manager the proxy's ConnWarmer: each member this gateway
// makes warm gets its connection then, off any claim's path. Without one (or past the
// proxy's idle timeout, two minutes in Caddy) the first call connects.
func (s *Service) SetConnWarmer(f ConnWarmer) { s.pool.SetConnWarmer(f) }

// poolHost is the core as the pool feature sees it (pool.Host).
type poolHost struct{ s *Service }

// MemberStarter decodes and checks p's template once; each call of the result starts
// one member behind an enforcer with the template's policy and waits for its agent.
func (h poolHost) MemberStarter(p *store.Pool) (pool.StartMember, error) {
	s := h.s
	var req CreateRequest
	if err := json.Unmarshal(p.Template, &req); err != nil {
		return nil, fmt.Errorf("decode pool template: %w", err)
	}
	spec, err := s.validateCreate(req)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (*store.Sandbox, error) {
		return h.startMember(ctx, p, req, spec)
	}, nil
}

// startMember starts one member of pool p; its record is the pool feature's to add.
func (h poolHost) startMember(ctx context.Context, p *store.Pool, req CreateRequest, spec runtimes.Spec) (*store.Sandbox, error) {
	s := h.s
	now := time.Now().UTC()
	spec.ID = uuid.NewString()
	spec.Tenant = p.Tenant
	spec.Pool = p.Name
	spec.CreatedAt = now
	spec.AgentToken = randomToken(24)
	spec.EgressToken = randomToken(24)
	// Warm members start behind an enforcer with the template's policy (the platform
	// default without one); a claim's own networkPolicy replaces it (BindMember). The
	// template's credentialProxy was checked by MemberStarter (validateCreate).
	proxy, _ := credentialProxyEnabled(req.CredentialProxy)
	egressSpec, err := s.egress.Spec(ctx, p.Tenant, spec.ID, req.NetworkPolicy, proxy)
	if err != nil {
		return nil, err
	}
	spec.Egress = egressSpec
	if err := s.recovery.LabelCluster(ctx, &spec); err != nil {
		return nil, err
	}
	if err := state.CheckSnapshotImage(spec.Labels[runtimes.LabelCluster], p.Tenant, spec.Image); err != nil {
		return nil, err
	}
	inst, err := s.runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, inst); err != nil {
		_ = s.runtime.Delete(context.WithoutCancel(ctx), spec.ID)
		return nil, err
	}
	return &store.Sandbox{
		ID: spec.ID, Tenant: p.Tenant, Image: spec.Image, Entrypoint: spec.Entrypoint,
		Metadata: req.Metadata, ResourceLimits: req.ResourceLimits, State: StateRunning,
		LastTransitionAt: now, CreatedAt: now, Address: inst.Address,
		AgentToken: spec.AgentToken, AgentAuth: store.AgentAuthSigned, EgressToken: spec.EgressToken, AccessToken: randomToken(24),
		Pool: p.Name, PoolVersion: p.Version, EgressPolicy: egress.PolicyOf(spec.Egress),
	}, nil
}

// BindMember applies the claim's env and entrypoint through the agent, then its
// network policy through the enforcer.
func (h poolHost) BindMember(ctx context.Context, sb *store.Sandbox, lb *store.LateBind) error {
	s := h.s
	if len(lb.Env) > 0 {
		if err := s.agents.SetEnv(ctx, sb.Address, sb.AgentCredential(), lb.Env, agentCallTimeout); err != nil {
			return err
		}
	}
	if lb.Entrypoint {
		if err := s.agents.StartEntrypoint(ctx, sb.Address, sb.AgentCredential(), sb.Entrypoint, agentCallTimeout); err != nil {
			return err
		}
	}
	if lb.NetworkPolicy != "" {
		return s.egress.BindClaim(ctx, sb, json.RawMessage(lb.NetworkPolicy))
	}
	return nil
}

// RouteClaimed puts a claimed member's record into the route cache.
func (h poolHost) RouteClaimed(sb *store.Sandbox) { h.s.feed.Put(sb) }

// DropRoute drops a sandbox from the route cache.
func (h poolHost) DropRoute(id string) { h.s.feed.Drop(id) }

// SandboxDied marks a sandbox not taken from a pool Failed once the runtime confirms
// it stopped (deaths.go).
func (h poolHost) SandboxDied(ctx context.Context, sb *store.Sandbox) {
	_ = h.s.coldSandboxDied(ctx, sb)
}

// ImageError is the create error for the runtime's failure err with image.
func (h poolHost) ImageError(image string, err error) error { return runtimeCreateError(image, err) }

// ResolveTemplate makes a pool template's snapshotId the template of its image (the
// caller's own Ready snapshot), and refuses a template naming another tenant's snapshot
// image directly.
func (h poolHost) ResolveTemplate(ctx context.Context, caller Caller, tmpl CreateRequest) (CreateRequest, error) {
	s := h.s
	if tmpl.SnapshotID != "" {
		var err error
		if tmpl, err = s.resolveSnapshot(ctx, caller, tmpl); err != nil {
			return tmpl, err
		}
	}
	if tmpl.Image == nil {
		return tmpl, nil
	}
	cluster, err := s.recovery.ClusterID(ctx)
	if err != nil {
		return tmpl, err
	}
	return tmpl, state.CheckSnapshotImage(cluster, caller.Tenant, strings.TrimSpace(tmpl.Image.URI))
}

// CheckTemplate checks a pool's template as a create's, its networkPolicy judged by the
// egress policy as a template's, and refuses volumes: warm members start before anyone
// claims them, and volumes are bound at create.
func (h poolHost) CheckTemplate(ctx context.Context, caller Caller, tmpl CreateRequest) error {
	s := h.s
	spec, err := s.validateCreate(tmpl)
	if err != nil {
		return err
	}
	if err := s.egress.ValidateTemplate(ctx, caller.Tenant, tmpl.NetworkPolicy); err != nil {
		return err
	}
	if len(spec.Volumes) > 0 {
		return Errorf(KindInvalid, CodePoolInvalid, "template.volumes: a pool's sandboxes cannot mount volumes; create such sandboxes cold")
	}
	return nil
}

// ImageBuilding refuses an image the gateway still builds in the background.
func (h poolHost) ImageBuilding(image string) error { return imageBuilding(h.s.cfg.ImageBuilds, image) }

// CheckClaim checks the claim's own fields, a credentialProxy the template's members
// lack, and its networkPolicy as the egress policy judges a claim's.
func (h poolHost) CheckClaim(ctx context.Context, caller Caller, tmpl, req CreateRequest) error {
	s := h.s
	if err := s.validateClaimInput(req); err != nil {
		return err
	}
	if err := claimCredentialProxy(tmpl, req); err != nil {
		return err
	}
	return s.egress.ValidateClaim(ctx, caller.Tenant, req.NetworkPolicy)
}

// Admit checks tmpl as a create and runs admission for count sandboxes of it.
func (h poolHost) Admit(ctx context.Context, caller Caller, tmpl CreateRequest, count int) error {
	spec, err := h.s.validateCreate(tmpl)
	if err != nil {
		return err
	}
	_, err = h.s.admission.Admit(ctx, caller, admissionFor(spec, tmpl, count))
	return err
}

// CreateCold checks tmpl as a create and starts it cold (create.go).
func (h poolHost) CreateCold(ctx context.Context, caller Caller, tmpl CreateRequest, id, batch string) (*store.Sandbox, error) {
	spec, err := h.s.validateCreate(tmpl)
	if err != nil {
		return nil, err
	}
	return h.s.createCold(ctx, caller, tmpl, spec, id, batch)
}

// EmitPerSandbox writes ev once for each of sbs (package gateway/eventlog).
func (h poolHost) EmitPerSandbox(ctx context.Context, ev store.Event, sbs []*store.Sandbox) {
	h.s.eventLog.EmitPerSandbox(ctx, ev, sbs)
}

// EmitAll writes evs (package gateway/eventlog).
func (h poolHost) EmitAll(ctx context.Context, evs []store.Event) { h.s.eventLog.EmitAll(ctx, evs) }

var _ pool.Host = poolHost{}
