package access

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// TestAccessValues: a value verifies for the sandbox and key it was derived for, and is
// refused when malformed, for another sandbox, or once its key is revoked (its own code).
func TestAccessValues(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	sb := s.putSandbox(t, "t1", nil, nil)
	other := s.putSandbox(t, "t1", nil, nil)
	s.putKey(t, "t1", "k1", principal.RoleMember)

	value, err := s.m.HeaderValue(ctx, sb, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(value, AccessValuePrefix+"k1.") {
		t.Fatalf("value %q does not name its key", value)
	}
	if err := s.m.VerifyAccessValue(ctx, sb, value); err != nil {
		t.Fatalf("verify: %v", err)
	}
	admin, err := s.m.HeaderValue(ctx, sb, principal.AdminKeyID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.m.VerifyAccessValue(ctx, sb, admin); err != nil {
		t.Fatalf("verify the admin key's value: %v", err)
	}
	if _, err := s.m.HeaderValue(ctx, sb, "nokey"); err == nil {
		t.Fatal("a value was derived for a key that does not exist")
	}

	refused := []struct {
		name  string
		value string
	}{
		{"no prefix", strings.TrimPrefix(value, AccessValuePrefix)},
		{"no MAC", AccessValuePrefix + "k1"},
		{"empty key", AccessValuePrefix + ".mac"},
		{"wrong MAC", value + "x"},
		{"another sandbox's", mustValue(t, s, other, "k1")},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, s.m.VerifyAccessValue(ctx, sb, tt.value), fault.KindForbidden, fault.CodeForbidden)
		})
	}

	t.Run("revoked key", func(t *testing.T) {
		if err := s.d.Store.RevokeKey(ctx, "t1", "k1"); err != nil {
			t.Fatal(err)
		}
		s.m.KeyChanged("k1")
		wantCode(t, s.m.VerifyAccessValue(ctx, sb, value), fault.KindForbidden, CodeAccessRevoked)
	})
	t.Run("changed platform key", func(t *testing.T) {
		s.host.adminKey.Store("another-admin-secret")
		defer s.host.adminKey.Store(testAdminKey)
		wantCode(t, s.m.VerifyAccessValue(ctx, sb, admin), fault.KindForbidden, fault.CodeForbidden)
		s.host.adminKey.Store("")
		wantCode(t, s.m.VerifyAccessValue(ctx, sb, admin), fault.KindForbidden, CodeAccessRevoked)
	})
}

// mustValue is the value of sb for keyID.
func mustValue(t *testing.T, s started, sb *store.Sandbox, keyID string) string {
	t.Helper()
	value, err := s.m.HeaderValue(context.Background(), sb, keyID)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

// TestKeyBindingsThroughAnOutage: a key this gateway read before Redis went away stays
// bound to its hash through the outage, also once marked stale; an unknown key is not.
func TestKeyBindingsThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	sb := s.putSandbox(t, "t1", nil, nil)
	s.putKey(t, "t1", "k1", principal.RoleMember)
	s.putKey(t, "t1", "k2", principal.RoleMember)
	value, err := s.m.HeaderValue(ctx, sb, "k1")
	if err != nil {
		t.Fatal(err)
	}
	s.d.Redis.Stop()
	defer func() { _ = s.d.Redis.Start() }()
	s.m.KeyBindingsStale()
	if err := s.m.VerifyAccessValue(ctx, sb, value); err != nil {
		t.Fatalf("verify through the outage: %v", err)
	}
	if _, err := s.m.HeaderValue(ctx, sb, "k2"); err == nil {
		t.Fatal("a key never read was bound through the outage")
	}
}

// TestRotateAccess: a rotation replaces the sandbox's secret, so that every value handed
// out before fails; it drops the sandbox's route and emits sandbox.access.rotated.
// Another tenant's sandbox is not found.
func TestRotateAccess(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	sb := s.putSandbox(t, "t1", nil, nil)
	s.putKey(t, "t1", "k1", principal.RoleMember)
	value, err := s.m.HeaderValue(ctx, sb, "k1")
	if err != nil {
		t.Fatal(err)
	}
	owner := principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleMember}

	err = s.m.RotateAccess(ctx, principal.Caller{Tenant: "t2", KeyID: "k9", KeyRole: principal.RoleMember}, sb.ID)
	wantCode(t, err, fault.KindNotFound, fault.CodeNotFound)

	if err := s.m.RotateAccess(ctx, owner, sb.ID); err != nil {
		t.Fatal(err)
	}
	rotated, err := s.d.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.AccessToken == sb.AccessToken {
		t.Fatal("the access secret did not change")
	}
	wantCode(t, s.m.VerifyAccessValue(ctx, rotated, value), fault.KindForbidden, fault.CodeForbidden)
	if s.host.mu.Lock(); !slices.Contains(s.host.dropped, sb.ID) {
		t.Error("the sandbox's route was not dropped")
	}
	s.host.mu.Unlock()
	if types := s.host.emittedTypes(); !slices.Contains(types, "sandbox.access.rotated") {
		t.Errorf("events emitted %v, want sandbox.access.rotated", types)
	}
}
