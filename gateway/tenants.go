package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"math"
	"net/http"
	"regexp"
	"time"

	"github.com/distribution/reference"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// Key roles.
const (
	RoleAdmin       = "admin"
	RoleTenantAdmin = "tenant-admin"
	RoleMember      = "member"
	RoleViewer      = "viewer"
)

// Tenancy error codes.
const (
	CodeTenantNotFound = "TENANT::NOT_FOUND"
	CodeTenantInvalid  = "TENANT::INVALID_PARAMETER"
	CodeKeyNotFound    = "KEY::NOT_FOUND"
	CodeQuotaRate      = "QUOTA::CREATE_RATE"
	CodeQuotaConcur    = "QUOTA::CONCURRENT_SANDBOXES"
)

// Resource names what an action is about, for the access policy.
type Resource struct {
	Kind   string
	ID     string
	Tenant string
}

// MissingKeyMessage answers a request without an API key. sandgate always needs one
// (unlike an OpenSandbox server run with api_key = ""), so the answer says where it is.
const MissingKeyMessage = "an API key is required in the OPEN-SANDBOX-API-KEY header (or X-API-Key, or Authorization: Bearer). " +
	"sandgate always wants one: `make run` prints the platform key when it starts and keeps it in .sandgate/api-key " +
	"(or set SANDGATE_API_KEY); an admin issues tenant keys with POST /v1/tenants/{id}/keys"

// Authenticate resolves an API key: the configured platform key, or an issued key.
func (s *Service) Authenticate(ctx context.Context, key string) (Caller, error) {
	if key == "" {
		return Caller{}, Errorf(http.StatusUnauthorized, CodeMissingAPIKey, "%s", MissingKeyMessage)
	}
	if admin, _ := s.adminKey.Load().(string); admin != "" && subtle.ConstantTimeCompare([]byte(key), []byte(admin)) == 1 {
		return Caller{Tenant: DefaultTenant, Admin: true, KeyID: "admin", KeyRole: RoleAdmin}, nil
	}
	k, err := s.store.LookupKey(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return Caller{}, Errorf(http.StatusUnauthorized, CodeInvalidAPIKey, "the API key is not valid")
	}
	if err != nil {
		return Caller{}, err
	}
	return Caller{Tenant: k.Tenant, Admin: k.Role == RoleAdmin, KeyID: k.ID, KeyRole: k.Role}, nil
}

// SetAdminKey sets the platform admin key (tenant "default", role admin).
func (s *Service) SetAdminKey(key string) { s.adminKey.Store(key) }

// Authorize asks the Rego access policy whether caller may do action on res. A resource
// of another tenant is reported as not found, never as forbidden. Every decision goes
// to the tenant's audit stream with its id and input hash.
func (s *Service) Authorize(ctx context.Context, caller Caller, action string, res Resource, method, path string, body any) error {
	in := policy.AccessInput{
		Principal: policy.Principal{Kind: credentialOf(ctx), ID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role()},
		Tenant:    caller.Tenant,
		Action:    action,
		Resource:  policy.Resource{Kind: res.Kind, ID: res.ID, Tenant: res.Tenant},
		Request:   policy.Request{Method: method, Path: path, Body: body},
	}
	d := s.policy.Access(ctx, in)
	s.logDecision(caller.Tenant, action, d)
	if d.Allow {
		return nil
	}
	status := d.HTTPStatus()
	if status == http.StatusNotFound {
		return Errorf(http.StatusNotFound, d.Code, "not found")
	}
	if d.Code == policy.CodeEvaluationFailed {
		s.log.Error("access policy failed; denying", "decision", d)
	}
	return &Error{Status: status, Code: d.Code, Message: d.Message}
}

// logDecision queues a policy decision for the audit stream (batched, off the request path).
func (s *Service) logDecision(tenant, action string, d policy.Decision) {
	typ := "policy.decision"
	if !d.Allow {
		typ = "policy.denied"
	}
	ev := store.Event{Type: typ, Tenant: tenant, Time: time.Now().UTC(), Data: map[string]any{
		"action": action, "allow": d.Allow, "code": d.Code, "message": d.Message,
		"decisionId": d.DecisionID, "inputHash": d.InputHash, "policyVersion": d.PolicyVersion,
	}}
	s.queueEvent(ev)
}

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
}

// admit checks a create of req.Count sandboxes against the tenant's quotas (Rego) and
// takes that many tokens from its create-rate bucket (shared by every gateway).
func (s *Service) admit(ctx context.Context, caller Caller, req admissionRequest) (store.Quotas, error) {
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
		req.ImageLocal = s.imageWillNotBePulled(ctx, req.Image)
	}
	if req.MemoryBytes == 0 {
		req.MemoryBytes = q.DefaultMemoryBytes
	}
	in := policy.AdmissionInput{
		Tenant: policy.TenantQuotas{ID: caller.Tenant, Quotas: policy.Quotas{
			MaxConcurrent: q.MaxConcurrent, MaxCPUMillis: q.MaxCPUMillis, MaxMemoryBytes: q.MaxMemoryBytes,
			MaxTimeoutSeconds: q.MaxTimeoutSeconds, MaxBatchSize: q.MaxBatchSize, AllowedImages: q.AllowedImages, Runtime: q.Runtime,
		}},
		Usage: usage,
		Request: policy.CreateRequest{Image: req.Image, CPUMillis: req.CPUMillis, MemoryBytes: req.MemoryBytes, TimeoutSeconds: req.Timeout, Count: req.Count, Runtime: req.Runtime,
			ImageRegistry: req.ImageRegistry, ImageLocal: req.ImageLocal},
	}
	d := s.policy.Admit(ctx, in)
	if !d.Allow {
		s.logDecision(caller.Tenant, "sandbox.create", d)
		return q, &Error{Status: d.HTTPStatus(), Code: d.Code, Message: d.Message}
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
			return q, Errorf(http.StatusTooManyRequests, CodeQuotaRate, "create rate quota: %.3g sandboxes per second (burst %.3g) for tenant %s; %.2f tokens left, retry in %s",
				q.CreateRate, burst, caller.Tenant, left, wait.Round(time.Millisecond))
		}
	}
	return q, nil
}

// usage sums what a tenant holds now.
func (s *Service) usage(ctx context.Context, tenant string) (policy.Usage, error) {
	recs, err := s.store.ListSandboxes(ctx, tenant)
	if err != nil {
		return policy.Usage{}, err
	}
	u := policy.Usage{Sandboxes: int64(len(recs))}
	for _, r := range recs {
		if c, err := ParseCPU(r.ResourceLimits["cpu"]); err == nil {
			u.CPUMillis += c
		}
		if m, err := ParseMemory(r.ResourceLimits["memory"]); err == nil {
			u.MemoryBytes += m
		}
	}
	return u, nil
}

// ---- tenants and keys ------------------------------------------------------------

// TenantRequest is the body of POST /v1/tenants and PATCH /v1/tenants/{id}.
type TenantRequest struct {
	Name   string        `json:"name"`
	Quotas *store.Quotas `json:"quotas,omitempty"`
}

var tenantNameRe = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_. ]{0,62}$`)

// CreateTenant makes a tenant (platform admins only, by policy).
func (s *Service) CreateTenant(ctx context.Context, req TenantRequest) (*store.Tenant, error) {
	if !tenantNameRe.MatchString(req.Name) {
		return nil, Errorf(400, CodeTenantInvalid, "name %q: 1-63 letters, digits, spaces and -_. starting with a letter or digit", req.Name)
	}
	t := &store.Tenant{ID: uuid.NewString(), Name: req.Name, CreatedAt: time.Now().UTC()}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	if err := s.store.PutTenant(ctx, t, true); err != nil {
		return nil, err
	}
	return t, nil
}

func validateQuotas(q store.Quotas) error {
	if q.MaxConcurrent < 0 || q.MaxCPUMillis < 0 || q.MaxMemoryBytes < 0 || q.MaxTimeoutSeconds < 0 || q.MaxBatchSize < 0 || q.CreateRate < 0 || q.CreateBurst < 0 {
		return Errorf(400, CodeTenantInvalid, "quotas must not be negative")
	}
	return nil
}

// GetTenant returns one tenant.
func (s *Service) GetTenant(ctx context.Context, id string) (*store.Tenant, error) {
	t, err := s.store.GetTenant(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(http.StatusNotFound, CodeTenantNotFound, "tenant %s not found", id)
	}
	return t, err
}

// ListTenants returns every tenant.
func (s *Service) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	return s.store.ListTenants(ctx)
}

// UpdateTenant changes a tenant's name or quotas.
func (s *Service) UpdateTenant(ctx context.Context, id string, req TenantRequest) (*store.Tenant, error) {
	t, err := s.GetTenant(ctx, id)
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		if !tenantNameRe.MatchString(req.Name) {
			return nil, Errorf(400, CodeTenantInvalid, "name %q is not valid", req.Name)
		}
		t.Name = req.Name
	}
	if req.Quotas != nil {
		if err := validateQuotas(*req.Quotas); err != nil {
			return nil, err
		}
		t.Quotas = *req.Quotas
	}
	return t, s.store.PutTenant(ctx, t, false)
}

// IssuedKey is the answer to a key creation: the secret is shown this once.
type IssuedKey struct {
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	Role      string    `json:"role"`
	Tenant    string    `json:"tenant"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateKey issues a key of role for tenant.
func (s *Service) CreateKey(ctx context.Context, tenant, role string) (*IssuedKey, error) {
	switch role {
	case RoleAdmin, RoleTenantAdmin, RoleMember, RoleViewer:
	default:
		return nil, Errorf(400, CodeTenantInvalid, "role %q: want admin, tenant-admin, member or viewer", role)
	}
	if tenant != DefaultTenant {
		if _, err := s.GetTenant(ctx, tenant); err != nil {
			return nil, err
		}
	}
	secret := "sg_" + randomToken(24)
	k := &store.APIKey{ID: uuid.NewString(), Tenant: tenant, Role: role, Prefix: secret[:9], CreatedAt: time.Now().UTC()}
	if err := s.store.PutKey(ctx, secret, k); err != nil {
		return nil, err
	}
	return &IssuedKey{ID: k.ID, Key: secret, Role: role, Tenant: tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt}, nil
}

// ListKeys returns a tenant's keys without their secrets.
func (s *Service) ListKeys(ctx context.Context, tenant string) ([]IssuedKey, error) {
	keys, err := s.store.ListKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]IssuedKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, IssuedKey{ID: k.ID, Role: k.Role, Tenant: k.Tenant, Prefix: k.Prefix, CreatedAt: k.CreatedAt})
	}
	return out, nil
}

// RevokeKey deletes a key; it stops working at once on every gateway.
func (s *Service) RevokeKey(ctx context.Context, tenant, id string) error {
	err := s.store.RevokeKey(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Errorf(http.StatusNotFound, CodeKeyNotFound, "key %s not found", id)
	}
	return err
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
func (s *Service) imageWillNotBePulled(ctx context.Context, image string) bool {
	switch {
	case !s.cfg.PullImages && !s.cfg.PullAlways:
		return true
	case s.cfg.PullAlways:
		return false
	case !s.cfg.CheckRegistries:
		return false
	}
	type imageChecker interface {
		HasImage(ctx context.Context, image string) (bool, error)
	}
	if ic, ok := s.runtime.(imageChecker); ok {
		has, err := ic.HasImage(ctx, image)
		return err == nil && has
	}
	return false
}
