package gateway

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/distribution/reference"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// tenantQuotas returns the quotas of a tenant (none for one without a record, such as
// the platform's own "default").
func (s *Service) tenantQuotas(ctx context.Context, tenant string) (store.Quotas, error) {
	t, err := s.store.GetTenant(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return store.Quotas{}, nil
	}
	if err != nil {
		return store.Quotas{}, err
	}
	return t.Quotas, nil
}

// admissionRequest is what the admission policy needs of a create.
type admissionRequest struct {
	Image string
	// ImageRegistry and ImageLocal feed the registries rule (see policy.CreateRequest).
	ImageRegistry string
	ImageLocal    bool
	CPUMillis     int64
	MemoryBytes   int64
	Timeout       *int64
	Count         int
	Runtime       string
	Volumes       []policy.Volume
}

// admit checks a create of req.Count sandboxes against the tenant's quotas (Rego) and
// takes that many tokens from its create-rate bucket (shared by every gateway).
func (s *Service) admit(ctx context.Context, caller Caller, req admissionRequest) (store.Quotas, error) {
	defer s.metrics.CreateStage(ctx, metrics.StageAdmission, time.Now())
	q, err := s.tenantQuotas(ctx, caller.Tenant)
	if err != nil {
		return q, err
	}
	usage, err := s.usage(ctx, caller.Tenant)
	if err != nil {
		return q, err
	}
	if req.CPUMillis == 0 {
		req.CPUMillis = q.DefaultCPUMillis
	}
	if req.Image != "" {
		req.ImageRegistry = imageRegistry(req.Image)
		req.ImageLocal = s.imageWillNotBePulled(ctx, req.Image, caller.Tenant)
	}
	if req.MemoryBytes == 0 {
		req.MemoryBytes = q.DefaultMemoryBytes
	}
	if err := s.checkNoExpiry(req.Timeout, q); err != nil {
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
	d := s.policy.Admit(ctx, in)
	s.metrics.PolicyDecision(metrics.PolicyAdmission, d.Allow, start)
	if !d.Allow {
		s.logDecision(caller.Tenant, "sandbox.create", d)
		return q, decisionError(d)
	}
	if q.CreateRate > 0 {
		burst := q.CreateBurst
		if burst <= 0 {
			burst = math.Max(1, q.CreateRate)
		}
		ok, left, err := s.store.TakeTokens(ctx, caller.Tenant, q.CreateRate, burst, max(req.Count, 1), time.Now())
		if err != nil {
			return q, err
		}
		if !ok {
			wait := time.Duration((float64(max(req.Count, 1)) - left) / q.CreateRate * float64(time.Second))
			return q, Errorf(KindQuota, CodeQuotaRate, "create rate quota: %.3g sandboxes per second (burst %.3g) for tenant %s; %.2f tokens left, retry in %s",
				q.CreateRate, burst, caller.Tenant, left, wait.Round(time.Millisecond))
		}
	}
	return q, nil
}

// usage is what a tenant holds now: the counters the store's scripts keep beside the
// tenant's index (one read, whatever the tenant holds).
func (s *Service) usage(ctx context.Context, tenant string) (policy.Usage, error) {
	u, err := s.store.TenantUsage(ctx, tenant)
	if err != nil {
		return policy.Usage{}, err
	}
	return policy.Usage{Sandboxes: u.Sandboxes, CPUMillis: u.CPUMillis, MemoryBytes: u.MemoryBytes}, nil
}

// measureRecord is what a record counts for in its tenant's usage (store.Meter).
func measureRecord(sb *store.Sandbox) (cpuMillis, memoryBytes int64) {
	if c, err := ParseCPU(sb.ResourceLimits["cpu"]); err == nil {
		cpuMillis = c
	}
	if m, err := ParseMemory(sb.ResourceLimits["memory"]); err == nil {
		memoryBytes = m
	}
	return cpuMillis, memoryBytes
}

// imageRegistry is the registry host an image reference names: "docker.io" for a bare
// name (python:3.12, sandgate/base:1), else its first component (127.0.0.1:5000,
// ghcr.io). An unparsable reference gives "" (the runtime refuses it later).
func imageRegistry(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	return reference.Domain(named)
}

// imageWillNotBePulled reports whether a create of image uses what the engine holds:
// always when the gateway never pulls, never when it always pulls, else when the engine
// has the image. The engine is asked only when the registries rule needs the answer.
func (s *Service) imageWillNotBePulled(ctx context.Context, image, tenant string) bool {
	switch {
	case !s.cfg.PullImages && !s.cfg.PullAlways:
		return true
	case s.cfg.PullAlways:
		return false
	case !s.cfg.CheckRegistries:
		return false
	}
	if ic, ok := s.runtime.(runtimes.ImageChecker); ok {
		has, err := ic.HasImage(ctx, image, tenant)
		return err == nil && has
	}
	return false
}

// admissionFor describes a create of count sandboxes of spec for the admission policy.
func admissionFor(spec runtimes.Spec, req CreateRequest, count int) admissionRequest {
	return admissionRequest{Image: spec.Image, CPUMillis: spec.CPUMillis, MemoryBytes: spec.MemoryBytes, Timeout: req.Timeout, Count: count, Runtime: req.Extensions["runtime"], Volumes: state.AdmissionVolumes(spec.Volumes)}
}
