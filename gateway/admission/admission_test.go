package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: it records each denial
// and answers it as the core does, with the decision's code.
type testHost struct {
	mu     sync.Mutex
	denied []string // "tenant action code"
}

func (h *testHost) Denied(tenant, action string, d policy.Decision) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.denied = append(h.denied, tenant+" "+action+" "+d.Code)
	return fault.Errorf(fault.KindQuota, d.Code, "%s", d.Message)
}

type fixture struct {
	d    coredeps.Deps
	host *testHost
	m    *Manager
}

func newFixture(t *testing.T, cfg Config) fixture {
	t.Helper()
	d := coredeps.Start(t)
	if cfg.MinTimeout == 0 {
		cfg.MinTimeout, cfg.MaxTimeout = time.Minute, time.Hour
	}
	h := &testHost{}
	return fixture{d: d, host: h, m: New(cfg, d.Store, d.Runtime, d.Policy, metrics.New(), h)}
}

func (f fixture) tenant(t *testing.T, id string, q store.Quotas) {
	t.Helper()
	if err := f.d.Store.PutTenant(context.Background(), &store.Tenant{ID: id, Name: id, Quotas: q, CreatedAt: time.Now().UTC()}, true); err != nil {
		t.Fatal(err)
	}
}

func codeOf(err error) string {
	if e, ok := fault.AsError(err); ok {
		return e.Code
	}
	return ""
}

func TestTenantQuotas(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	if q, err := f.m.TenantQuotas(ctx, "default"); err != nil || q.MaxConcurrent != 0 || q.CreateRate != 0 {
		t.Fatalf("quotas of a tenant without a record = %+v, %v; want none", q, err)
	}
	f.tenant(t, "acme", store.Quotas{MaxConcurrent: 3, DefaultCPUMillis: 250})
	if q, err := f.m.TenantQuotas(ctx, "acme"); err != nil || q.MaxConcurrent != 3 || q.DefaultCPUMillis != 250 {
		t.Fatalf("quotas = %+v, %v", q, err)
	}
	f.d.Redis.Stop()
	if _, err := f.m.TenantQuotas(ctx, "acme"); err == nil {
		t.Fatal("quotas read without a store")
	}
	if _, err := f.m.Admit(ctx, principal.Caller{Tenant: "acme"}, Request{Image: "python:3.12", Count: 1}); err == nil {
		t.Fatal("admitted without a store")
	}
}

// TestAdmitConcurrent: the admission policy judges what the tenant holds (the store's
// usage counters) plus what it asks for; a denial goes through the host.
func TestAdmitConcurrent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	f.tenant(t, "acme", store.Quotas{MaxConcurrent: 2})
	acme := principal.Caller{Tenant: "acme"}
	if _, err := f.m.Admit(ctx, acme, Request{Image: "python:3.12", Count: 2}); err != nil {
		t.Fatalf("two of two refused: %v", err)
	}
	now := time.Now().UTC()
	if err := f.d.Store.CreateSandbox(ctx, &store.Sandbox{ID: uuid.NewString(), Tenant: "acme", State: "Running", CreatedAt: now, LastTransitionAt: now}, 0); err != nil {
		t.Fatal(err)
	}
	_, err := f.m.Admit(ctx, acme, Request{Image: "python:3.12", Count: 2})
	if codeOf(err) != policy.CodeQuotaConcurrent {
		t.Fatalf("a third sandbox: %v, want %s", err, policy.CodeQuotaConcurrent)
	}
	if len(f.host.denied) != 1 || f.host.denied[0] != "acme sandbox.create "+policy.CodeQuotaConcurrent {
		t.Fatalf("denials told the host: %v", f.host.denied)
	}
	if _, err := f.m.Admit(ctx, acme, Request{Image: "python:3.12", Count: 1}); err != nil {
		t.Fatalf("a second sandbox refused: %v", err)
	}
}

// TestAdmitCreateRate: the tenant's bucket gives burst tokens, then refuses with the
// time to wait.
func TestAdmitCreateRate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	f.tenant(t, "slow", store.Quotas{CreateRate: 0.001})
	slow := principal.Caller{Tenant: "slow"}
	if _, err := f.m.Admit(ctx, slow, Request{Image: "python:3.12", Count: 1}); err != nil {
		t.Fatalf("the first create refused: %v", err)
	}
	_, err := f.m.Admit(ctx, slow, Request{Image: "python:3.12", Count: 1})
	e, ok := fault.AsError(err)
	if !ok || e.Code != CodeQuotaRate || e.Kind != fault.KindQuota {
		t.Fatalf("the second create: %v, want %s", err, CodeQuotaRate)
	}
	if len(f.host.denied) != 0 {
		t.Fatalf("a rate refusal is not the policy's denial: %v", f.host.denied)
	}
}

func TestCheckNoExpiry(t *testing.T) {
	ten := int64(600)
	for _, tt := range []struct {
		name    string
		require bool
		timeout *int64
		quotas  store.Quotas
		refused bool
	}{
		{"not required", false, nil, store.Quotas{}, false},
		{"required, given", true, &ten, store.Quotas{}, false},
		{"required, absent", true, nil, store.Quotas{}, true},
		{"required, the tenant may clean up", true, nil, store.Quotas{AllowManualCleanup: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Config{RequireTimeout: tt.require, MinTimeout: time.Minute, MaxTimeout: time.Hour}, nil, nil, nil, nil, nil)
			err := m.CheckNoExpiry(tt.timeout, tt.quotas)
			if (err != nil) != tt.refused {
				t.Fatalf("CheckNoExpiry = %v, refused want %v", err, tt.refused)
			}
			if err != nil && codeOf(err) != fault.CodeInvalidExpiration {
				t.Fatalf("code %q", codeOf(err))
			}
		})
	}
}

// TestAdmitNoExpiry: a create without timeout is refused before the policy is asked.
func TestAdmitNoExpiry(t *testing.T) {
	f := newFixture(t, Config{RequireTimeout: true})
	_, err := f.m.Admit(context.Background(), principal.Caller{Tenant: "default"}, Request{Image: "python:3.12", Count: 1})
	if codeOf(err) != fault.CodeInvalidExpiration {
		t.Fatalf("Admit = %v, want %s", err, fault.CodeInvalidExpiration)
	}
}

func TestImageFacts(t *testing.T) {
	for image, want := range map[string]string{
		"python:3.12":               "docker.io",
		"sandgate/base:1":           "docker.io",
		"127.0.0.1:5000/team/app:2": "127.0.0.1:5000",
		"bad image!":                "",
	} {
		if got := imageRegistry(image); got != want {
			t.Errorf("imageRegistry(%q) = %q, want %q", image, got, want)
		}
	}
	d := coredeps.Start(t)
	for _, tt := range []struct {
		name  string
		cfg   Config
		local bool
	}{
		{"never pulls", Config{}, true},
		{"always pulls", Config{PullImages: true, PullAlways: true}, false},
		{"pulls what is missing, not asked", Config{PullImages: true}, false},
		// The in-process runtime holds no images and cannot say which it has.
		{"pulls what is missing, asked", Config{PullImages: true, CheckRegistries: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := New(tt.cfg, d.Store, d.Runtime, d.Policy, metrics.New(), &testHost{})
			if got := m.imageWillNotBePulled(context.Background(), "python:3.12", "acme"); got != tt.local {
				t.Fatalf("imageWillNotBePulled = %v, want %v", got, tt.local)
			}
		})
	}
}
