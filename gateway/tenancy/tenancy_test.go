package tenancy

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: the keys it is told were
// revoked are kept for the test to read.
type testHost struct {
	mu      sync.Mutex
	revoked []string
}

func (h *testHost) KeyRevoked(_ context.Context, keyID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.revoked = append(h.revoked, keyID)
}

func (h *testHost) revokedKeys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.revoked...)
}

var _ Host = (*testHost)(nil)

func newManager(t *testing.T) (*Manager, *testHost, coredeps.Deps) {
	t.Helper()
	d := coredeps.Start(t)
	host := &testHost{}
	return New(d.Store, host, d.Log), host, d
}

// wantFault fails unless err is a fault of kind and code.
func wantFault(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok {
		t.Fatalf("err = %v, want a %s fault %s", err, kind, code)
	}
	if e.Kind != kind || e.Code != code {
		t.Fatalf("err = %s %s (%s), want %s %s", e.Kind, e.Code, e.Message, kind, code)
	}
}

func TestTenantRequestsRefused(t *testing.T) {
	m, _, _ := newManager(t)
	ctx := context.Background()
	existing, err := m.CreateTenant(ctx, TenantRequest{Name: "acme", Quotas: &store.Quotas{MaxConcurrent: 3}})
	if err != nil {
		t.Fatal(err)
	}
	negative := []store.Quotas{
		{MaxConcurrent: -1}, {MaxCPUMillis: -1}, {MaxMemoryBytes: -1}, {MaxTimeoutSeconds: -1},
		{MaxBatchSize: -1}, {CreateRate: -1}, {CreateBurst: -1},
	}
	for _, tt := range []struct {
		name string
		req  TenantRequest
	}{
		{"empty name", TenantRequest{Name: ""}},
		{"name starting with a dash", TenantRequest{Name: "-acme"}},
		{"name with a slash", TenantRequest{Name: "acme/evil"}},
		{"name with a newline", TenantRequest{Name: "acme\nevil"}},
		{"name of 64 characters", TenantRequest{Name: strings.Repeat("a", 64)}},
	} {
		t.Run("create: "+tt.name, func(t *testing.T) {
			_, err := m.CreateTenant(ctx, tt.req)
			wantFault(t, err, fault.KindInvalid, CodeTenantInvalid)
		})
		if tt.req.Name != "" {
			t.Run("update: "+tt.name, func(t *testing.T) {
				_, err := m.UpdateTenant(ctx, existing.ID, tt.req)
				wantFault(t, err, fault.KindInvalid, CodeTenantInvalid)
			})
		}
	}
	for i, q := range negative {
		t.Run("negative quota "+string(rune('a'+i)), func(t *testing.T) {
			_, err := m.CreateTenant(ctx, TenantRequest{Name: "neg", Quotas: &q})
			wantFault(t, err, fault.KindInvalid, CodeTenantInvalid)
			_, err = m.UpdateTenant(ctx, existing.ID, TenantRequest{Quotas: &q})
			wantFault(t, err, fault.KindInvalid, CodeTenantInvalid)
		})
	}
	// Nothing refused was stored: one tenant, unchanged.
	list, err := m.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "acme" || !reflect.DeepEqual(list[0].Quotas, store.Quotas{MaxConcurrent: 3}) {
		t.Errorf("tenants after refused requests = %+v, want acme alone with MaxConcurrent 3", list)
	}
	_, err = m.GetTenant(ctx, "no-such-tenant")
	wantFault(t, err, fault.KindNotFound, CodeTenantNotFound)
	_, err = m.UpdateTenant(ctx, "no-such-tenant", TenantRequest{Name: "x"})
	wantFault(t, err, fault.KindNotFound, CodeTenantNotFound)
}

func TestTenantLifecycle(t *testing.T) {
	m, _, _ := newManager(t)
	ctx := context.Background()
	a, err := m.CreateTenant(ctx, TenantRequest{Name: "Team A.1_x", Quotas: &store.Quotas{MaxConcurrent: 2, CreateRate: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateTenant(ctx, TenantRequest{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.ID == "" {
		t.Fatalf("tenant ids %q and %q: want two distinct ids", a.ID, b.ID)
	}
	// A name alone keeps the quotas; quotas alone keep the name.
	if _, err := m.UpdateTenant(ctx, a.ID, TenantRequest{Name: "renamed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpdateTenant(ctx, b.ID, TenantRequest{Quotas: &store.Quotas{MaxBatchSize: 4}}); err != nil {
		t.Fatal(err)
	}
	got, err := m.GetTenant(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "renamed" || !reflect.DeepEqual(got.Quotas, store.Quotas{MaxConcurrent: 2, CreateRate: 1.5}) {
		t.Errorf("tenant a = %+v, want renamed with its quotas kept", got)
	}
	got, err = m.GetTenant(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "b" || !reflect.DeepEqual(got.Quotas, store.Quotas{MaxBatchSize: 4}) {
		t.Errorf("tenant b = %+v, want b with MaxBatchSize 4", got)
	}
	list, err := m.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Errorf("ListTenants = %d tenants, want 2", len(list))
	}
}

func TestKeys(t *testing.T) {
	m, host, d := newManager(t)
	ctx := context.Background()
	tn, err := m.CreateTenant(ctx, TenantRequest{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}

	_, err = m.CreateKey(ctx, tn.ID, "king")
	wantFault(t, err, fault.KindInvalid, CodeTenantInvalid)
	_, err = m.CreateKey(ctx, "no-such-tenant", principal.RoleMember)
	wantFault(t, err, fault.KindNotFound, CodeTenantNotFound)

	// The default tenant has no record and takes keys all the same.
	if _, err := m.CreateKey(ctx, principal.DefaultTenant, principal.RoleAdmin); err != nil {
		t.Fatalf("key of the default tenant: %v", err)
	}

	issued := map[string]*IssuedKey{}
	for _, role := range []string{principal.RoleTenantAdmin, principal.RoleMember, principal.RoleViewer} {
		k, err := m.CreateKey(ctx, tn.ID, role)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(k.Key, "sg_") || len(k.Key) != 3+48 || k.Prefix != k.Key[:9] {
			t.Errorf("issued key %q prefix %q: want sg_ and 48 hex digits, the prefix its first 9 characters", k.Key, k.Prefix)
		}
		// The secret authenticates as the key of that tenant and role.
		stored, err := d.Store.LookupKey(ctx, k.Key)
		if err != nil {
			t.Fatal(err)
		}
		if stored.ID != k.ID || stored.Tenant != tn.ID || stored.Role != role {
			t.Errorf("stored key = %+v, want id %s of tenant %s, role %s", stored, k.ID, tn.ID, role)
		}
		issued[k.ID] = k
	}

	listed, err := m.ListKeys(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(issued) {
		t.Fatalf("ListKeys = %d keys, want %d", len(listed), len(issued))
	}
	for _, k := range listed {
		if k.Key != "" {
			t.Errorf("ListKeys shows the secret of key %s", k.ID)
		}
		if want := issued[k.ID]; want == nil || want.Role != k.Role || want.Prefix != k.Prefix || k.Tenant != tn.ID {
			t.Errorf("listed key %+v does not match the issued one", k)
		}
	}

	var victim *IssuedKey
	for _, k := range issued {
		victim = k
		break
	}
	// Another tenant cannot revoke it by its id.
	err = m.RevokeKey(ctx, "other-tenant", victim.ID)
	wantFault(t, err, fault.KindNotFound, CodeKeyNotFound)
	if _, err := d.Store.LookupKey(ctx, victim.Key); err != nil {
		t.Fatalf("key revoked through another tenant: %v", err)
	}
	if got := host.revokedKeys(); len(got) != 0 {
		t.Fatalf("host told of revocations %v before any", got)
	}

	if err := m.RevokeKey(ctx, tn.ID, victim.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Store.LookupKey(ctx, victim.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoked key still looks up: %v", err)
	}
	if got := host.revokedKeys(); len(got) != 1 || got[0] != victim.ID {
		t.Errorf("host told of revocations %v, want [%s]", got, victim.ID)
	}
	err = m.RevokeKey(ctx, tn.ID, victim.ID)
	wantFault(t, err, fault.KindNotFound, CodeKeyNotFound)
	if got := host.revokedKeys(); len(got) != 1 {
		t.Errorf("a second revocation told the host again: %v", got)
	}
	listed, err = m.ListKeys(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(issued)-1 {
		t.Errorf("ListKeys after a revocation = %d keys, want %d", len(listed), len(issued)-1)
	}
}

// TestStoreUnreachable: with Redis gone every operation fails with the store's error,
// nothing is issued and no revocation is announced.
func TestStoreUnreachable(t *testing.T) {
	m, host, d := newManager(t)
	ctx := context.Background()
	tn, err := m.CreateTenant(ctx, TenantRequest{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	d.Redis.Stop()
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"create tenant", func() error { _, err := m.CreateTenant(ctx, TenantRequest{Name: "b"}); return err }},
		{"get tenant", func() error { _, err := m.GetTenant(ctx, tn.ID); return err }},
		{"list tenants", func() error { _, err := m.ListTenants(ctx); return err }},
		{"update tenant", func() error { _, err := m.UpdateTenant(ctx, tn.ID, TenantRequest{Name: "c"}); return err }},
		{"create key", func() error { _, err := m.CreateKey(ctx, principal.DefaultTenant, principal.RoleMember); return err }},
		{"list keys", func() error { _, err := m.ListKeys(ctx, tn.ID); return err }},
		{"revoke key", func() error { return m.RevokeKey(ctx, tn.ID, "k1") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("err = %v, want store.ErrUnavailable", err)
			}
		})
	}
	if got := host.revokedKeys(); len(got) != 0 {
		t.Errorf("host told of revocations %v with the store unreachable", got)
	}
}
