// Package admission decides whether a tenant may create sandboxes now: its quotas
// (store.Quotas, judged by the admission policy in Rego against what the tenant holds),
// whether a create may run without expiry, and its create-rate bucket, shared by every
// gateway through the store. A create, a claim, a batch and a fork are all admitted here
// before anything starts.
//
// The Manager (this file) reaches the core only through Host (host.go); image.go holds
// the image facts the registries rule is given.
package admission

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// CodeQuotaRate: the tenant's token bucket of creates is empty.
const CodeQuotaRate = "QUOTA::CREATE_RATE"

// Config holds what admission needs of the gateway's settings.
type Config struct {
	// MinTimeout and MaxTimeout bound a sandbox's requested lifetime (named in the
	// answer to a create without one).
	MinTimeout time.Duration
	MaxTimeout time.Duration
	// RequireTimeout refuses a create without timeout unless its tenant's quota allows
	// manual cleanup.
	RequireTimeout bool
	// PullImages, PullAlways and CheckRegistries say whether a create's image will be
	// pulled (the registries rule's request.imageLocal): never when both pull settings
	// are off, always with PullAlways, else when the engine lacks it, which is asked
	// only with CheckRegistries.
	PullImages      bool
	PullAlways      bool
	CheckRegistries bool
}

// Manager admits creates. It is safe for concurrent use and holds no state of its own:
// quotas, usage counters and rate buckets are the store's.
type Manager struct {
	cfg     Config
	store   *store.Store
	runtime runtimes.Runtime
	policy  *policy.Engine
	metrics *metrics.Set
	host    Host
}

// New builds the admission of a gateway.
func New(cfg Config, st *store.Store, rt runtimes.Runtime, pol *policy.Engine, m *metrics.Set, host Host) *Manager {
	return &Manager{cfg: cfg, store: st, runtime: rt, policy: pol, metrics: m, host: host}
}

// Request is what the admission policy needs of a create.
type Request struct {
	Image string
	// ImageRegistry and ImageLocal feed the registries rule (see policy.CreateRequest);
	// Admit fills them from Image.
	ImageRegistry string
	ImageLocal    bool
	CPUMillis     int64
	MemoryBytes   int64
	Timeout       *int64
	Count         int
	Runtime       string
	Volumes       []policy.Volume
}

// TenantQuotas returns the quotas of a tenant (none for one without a record, such as
// the platform's own "default").
func (m *Manager) TenantQuotas(ctx context.Context, tenant string) (store.Quotas, error) {
	t, err := m.store.GetTenant(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return store.Quotas{}, nil
	}
	if err != nil {
		return store.Quotas{}, err
	}
	return t.Quotas, nil
}

// Admit checks a create of req.Count sandboxes against the tenant's quotas (Rego) and
// takes that many tokens from its create-rate bucket (shared by every gateway). It
// returns the tenant's quotas, whose defaults the create applies.
func (m *Manager) Admit(ctx context.Context, caller principal.Caller, req Request) (store.Quotas, error) {
	defer m.metrics.CreateStage(ctx, metrics.StageAdmission, time.Now())
	q, err := m.TenantQuotas(ctx, caller.Tenant)
	if err != nil {
		return q, err
	}
	usage, err := m.usage(ctx, caller.Tenant)
	if err != nil {
		return q, err
	}
	if req.CPUMillis == 0 {
		req.CPUMillis = q.DefaultCPUMillis
	}
	if req.Image != "" {
		req.ImageRegistry = imageRegistry(req.Image)
		req.ImageLocal = m.imageWillNotBePulled(ctx, req.Image, caller.Tenant)
	}
	if req.MemoryBytes == 0 {
		req.MemoryBytes = q.DefaultMemoryBytes
	}
	if err := m.CheckNoExpiry(req.Timeout, q); err != nil {
		return q, err
	}
	in := policy.AdmissionInput{
		Tenant: policy.TenantQuotas{ID: caller.Tenant, Quotas: policy.Quotas{
			MaxConcurrent: q.MaxConcurrent, MaxCPUMillis: q.MaxCPUMillis, MaxMemoryBytes: q.MaxMemoryBytes,
			MaxTimeoutSeconds: q.MaxTimeoutSeconds, MaxBatchSize: q.MaxBatchSize, AllowedImages: q.AllowedImages, Runtime: q.Runtime,
			MaxVolumes: q.MaxVolumes, MaxVolumeBytes: q.MaxVolumeBytes, HostVolumePrefixes: q.HostVolumePrefixes, DenyHostVolumes: q.DenyHostVolumes,
		}},
		Usage: usage,
		Request: policy.CreateRequest{Image: req.Image, CPUMillis: req.CPUMillis, MemoryBytes: req.MemoryBytes, TimeoutSeconds: req.Timeout, Count: req.Count, Runtime: req.Runtime,
			ImageRegistry: req.ImageRegistry, ImageLocal: req.ImageLocal, Volumes: req.Volumes},
	}
	start := time.Now()
	d := m.policy.Admit(ctx, in)
	m.metrics.PolicyDecision(metrics.PolicyAdmission, d.Allow, start)
	if !d.Allow {
		return q, m.host.Denied(caller.Tenant, "sandbox.create", d)
	}
	if q.CreateRate > 0 {
		burst := q.CreateBurst
		if burst <= 0 {
			burst = math.Max(1, q.CreateRate)
		}
		ok, left, err := m.store.TakeTokens(ctx, caller.Tenant, q.CreateRate, burst, max(req.Count, 1), time.Now())
		if err != nil {
			return q, err
		}
		if !ok {
			wait := time.Duration((float64(max(req.Count, 1)) - left) / q.CreateRate * float64(time.Second))
			return q, fault.Errorf(fault.KindQuota, CodeQuotaRate, "create rate quota: %.3g sandboxes per second (burst %.3g) for tenant %s; %.2f tokens left, retry in %s",
				q.CreateRate, burst, caller.Tenant, left, wait.Round(time.Millisecond))
		}
	}
	return q, nil
}

// usage is what a tenant holds now: the counters the store's scripts keep beside the
// tenant's index (one read, whatever the tenant holds).
func (m *Manager) usage(ctx context.Context, tenant string) (policy.Usage, error) {
	u, err := m.store.TenantUsage(ctx, tenant)
	if err != nil {
		return policy.Usage{}, err
	}
	return policy.Usage{Sandboxes: u.Sandboxes, CPUMillis: u.CPUMillis, MemoryBytes: u.MemoryBytes}, nil
}

// CheckNoExpiry refuses a create without timeout on a gateway that requires one
// (Config.RequireTimeout), unless the tenant's quota allows manual cleanup: the caller
// learns the rule and the timeouts it may ask for instead of getting a lifetime it did
// not ask for.
func (m *Manager) CheckNoExpiry(timeout *int64, q store.Quotas) error {
	if timeout != nil || !m.cfg.RequireTimeout || q.AllowManualCleanup {
		return nil
	}
	lo, hi := int64(m.cfg.MinTimeout/time.Second), int64(m.cfg.MaxTimeout/time.Second)
	return fault.Errorf(fault.KindInvalid, fault.CodeInvalidExpiration,
		"timeout is required: this gateway keeps no sandbox without expiry; set timeout to %d to %d seconds", lo, hi)
}
