package access

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
)

// TestLinksAndCookies: a signed link and a preview cookie verify for their sandbox and
// port only, are not each other, expire on the gateway's clock, and a malformed token
// is refused without reading the keys.
func TestLinksAndCookies(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	link, err := s.m.SignLink(ctx, "sb1", 8000, exp)
	if err != nil {
		t.Fatal(err)
	}
	cookie, err := s.m.SessionCookie(ctx, "sb1", 8000, exp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.m.VerifyLink(ctx, link, "sb1", 8000)
	if err != nil || !got.Equal(exp) {
		t.Fatalf("VerifyLink = %v, %v; want %v", got, err, exp)
	}
	if err := s.m.VerifyCookie(ctx, cookie, "sb1", 8000); err != nil {
		t.Fatalf("VerifyCookie: %v", err)
	}

	refused := []struct {
		name   string
		verify func() error
		code   string
	}{
		{"link for another sandbox", func() error { _, err := s.m.VerifyLink(ctx, link, "sb2", 8000); return err }, CodeLinkInvalid},
		{"link for another port", func() error { _, err := s.m.VerifyLink(ctx, link, "sb1", 8001); return err }, CodeLinkInvalid},
		{"cookie as a link", func() error { _, err := s.m.VerifyLink(ctx, cookie, "sb1", 8000); return err }, CodeLinkInvalid},
		{"link as a cookie", func() error { return s.m.VerifyCookie(ctx, link, "sb1", 8000) }, CodeLinkInvalid},
		{"malformed", func() error { return s.m.VerifyCookie(ctx, "not-a-token", "sb1", 8000) }, CodeLinkInvalid},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.verify(), fault.KindUnauthenticated, tt.code)
		})
	}

	t.Run("expired on the gateway's clock", func(t *testing.T) {
		s.host.offset.Store(int64(2 * time.Hour))
		defer s.host.offset.Store(0)
		_, err := s.m.VerifyLink(ctx, link, "sb1", 8000)
		wantCode(t, err, fault.KindUnauthenticated, CodeLinkExpired)
	})
}

// TestRotateLinkKeys: only the platform admin rotates; a link signed before a rotation
// verifies after it (on this gateway at once, the rotation dropping the loaded keys),
// and one signed after it carries the new key.
func TestRotateLinkKeys(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	exp := time.Now().Add(time.Hour)
	before, err := s.m.SignLink(ctx, "sb1", 8000, exp)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.m.RotateLinkKeys(ctx, principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleTenantAdmin})
	wantCode(t, err, fault.KindForbidden, fault.CodeForbidden)

	kid, err := s.m.RotateLinkKeys(ctx, principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: principal.AdminKeyID})
	if err != nil || kid == "" {
		t.Fatalf("RotateLinkKeys = %q, %v", kid, err)
	}
	if _, err := s.m.VerifyLink(ctx, before, "sb1", 8000); err != nil {
		t.Fatalf("a link signed before the rotation: %v", err)
	}
	after, err := s.m.SignLink(ctx, "sb1", 8000, exp)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatal("the link signed after the rotation is the one signed before")
	}
	if _, err := s.m.VerifyLink(ctx, after, "sb1", 8000); err != nil {
		t.Fatalf("a link signed after the rotation: %v", err)
	}
}

// TestLinkKeysThroughAnOutage: keys loaded before Redis went away keep signing and
// verifying through the outage; a gateway that never loaded any cannot sign.
func TestLinkKeysThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	exp := time.Now().Add(time.Hour)
	link, err := s.m.SignLink(ctx, "sb1", 8000, exp)
	if err != nil {
		t.Fatal(err)
	}
	fresh := New(Config{}, s.d.Store, s.d.Policy, nil, s.host, s.d.Log)
	defer fresh.Stop()
	s.d.Redis.Stop()
	defer func() { _ = s.d.Redis.Start() }()
	s.m.links.mu.Lock()
	s.m.links.loadedAt = time.Time{} // due to be read again
	s.m.links.mu.Unlock()

	if _, err := s.m.VerifyLink(ctx, link, "sb1", 8000); err != nil {
		t.Fatalf("verify through the outage: %v", err)
	}
	if _, err := s.m.SignLink(ctx, "sb1", 8000, exp); err != nil {
		t.Fatalf("sign through the outage: %v", err)
	}
	if _, err := fresh.SignLink(ctx, "sb1", 8000, exp); err == nil {
		t.Fatal("a gateway without keys signed a link through the outage")
	}
}
