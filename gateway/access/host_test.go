package access

import (
	"context"
	"crypto/subtle"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
	"github.com/sandgate/sandgate/test/promtest"
)

// testHost is the core's part of the feature for these tests, over the real store: API
// keys are the configured admin key or keys stored in Redis, a sandbox is looked up in
// Redis and hidden from other tenants, and what the feature hands the core (events,
// dropped routes) is kept for the test to read. Its clock can be moved forward.
type testHost struct {
	st       *store.Store
	adminKey atomic.Value // string
	offset   atomic.Int64 // clock offset, nanoseconds

	mu      sync.Mutex
	queued  []store.Event
	emitted []store.Event
	dropped []string
}

func (h *testHost) Now() time.Time { return time.Now().Add(time.Duration(h.offset.Load())) }

func (h *testHost) Authenticate(ctx context.Context, apiKey string) (principal.Caller, error) {
	if admin := h.AdminKey(); admin != "" && subtle.ConstantTimeCompare([]byte(admin), []byte(apiKey)) == 1 {
		return principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: principal.AdminKeyID, KeyRole: principal.RoleAdmin}, nil
	}
	k, err := h.st.LookupKey(ctx, apiKey)
	if err != nil {
		return principal.Caller{}, fault.Errorf(fault.KindUnauthenticated, "INVALID_API_KEY", "the API key is not valid")
	}
	return principal.Caller{Tenant: k.Tenant, Admin: k.Role == principal.RoleAdmin, KeyID: k.ID, KeyRole: k.Role}, nil
}

func (h *testHost) AdminKey() string {
	admin, _ := h.adminKey.Load().(string)
	return admin
}

func (h *testHost) Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error) {
	sb, err := h.st.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Admin && sb.Tenant != caller.Tenant) {
		return nil, fault.NotFound(id)
	}
	return sb, err
}

func (h *testHost) DropRoute(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = append(h.dropped, id)
}

func (h *testHost) Emit(_ context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.emitted = append(h.emitted, store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Data: data})
}

func (h *testHost) QueueEvent(ev store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queued = append(h.queued, ev)
}

// emittedTypes are the types of the events emitted so far.
func (h *testHost) emittedTypes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var types []string
	for _, ev := range h.emitted {
		types = append(types, ev.Type)
	}
	return types
}

var _ Host = (*testHost)(nil)

// started is a Manager on real dependencies with its test host.
type started struct {
	m       *Manager
	d       coredeps.Deps
	host    *testHost
	metrics *metrics.Set
}

const testAdminKey = "admin-secret"

func startManager(t *testing.T, cfg Config) started {
	t.Helper()
	d := coredeps.Start(t)
	h := &testHost{st: d.Store}
	h.adminKey.Store(testAdminKey)
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 24 * time.Hour
	}
	if cfg.RenewCooldown == 0 {
		cfg.RenewCooldown = time.Minute
	}
	set := metrics.New()
	m := New(cfg, d.Store, d.Policy, set, h, d.Log)
	t.Cleanup(m.Stop)
	return started{m: m, d: d, host: h, metrics: set}
}

// putSandbox stores a Running sandbox of tenant with extensions ext.
func (s started) putSandbox(t *testing.T, tenant string, ext map[string]string, expiresAt *time.Time) *store.Sandbox {
	t.Helper()
	now := time.Now().UTC()
	sb := &store.Sandbox{
		ID: uuid.NewString(), Tenant: tenant, Image: "test", State: "Running", CreatedAt: now, LastTransitionAt: now,
		AccessToken: randomToken(24), Extensions: ext, ExpiresAt: expiresAt,
	}
	if err := s.d.Store.CreateSandbox(context.Background(), sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb
}

// putKey stores an API key of tenant with role and returns its secret.
func (s started) putKey(t *testing.T, tenant, id, role string) string {
	t.Helper()
	secret := "key-" + uuid.NewString()
	if err := s.d.Store.PutKey(context.Background(), secret, &store.APIKey{ID: id, Tenant: tenant, Role: role, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// renewCount is the renew_on_access_total series of outcome.
func (s started) renewCount(t *testing.T, outcome string) float64 {
	t.Helper()
	return promtest.Counter(t, s.metrics.Collectors(), metrics.Namespace+"_renew_on_access_total", "outcome", outcome)
}

// wantCode fails unless err is a fault.Error of kind and code.
func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok || e.Kind != kind || e.Code != code {
		t.Fatalf("err = %v, want %s %s", err, kind, code)
	}
}
