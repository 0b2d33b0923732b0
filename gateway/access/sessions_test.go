package access

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
)

// TestSessions: a session opened with a key resolves to that key's caller until it is
// signed out, its key is revoked, or (for the platform key) the key changes; a session
// needs a key, and its CSRF token is checked.
func TestSessions(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	member := s.putKey(t, "t1", "k1", principal.RoleMember)

	_, _, _, err := s.m.SignIn(ctx, "")
	wantCode(t, err, fault.KindUnauthenticated, fault.CodeMissingAPIKey)
	if _, _, _, err := s.m.SignIn(ctx, "not-a-key"); err == nil {
		t.Fatal("signed in with a key that does not exist")
	}

	tests := []struct {
		name   string
		key    string
		caller principal.Caller
		// end makes the session invalid.
		end func(t *testing.T, token string)
	}{
		{"issued key, revoked", member,
			principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleMember},
			func(t *testing.T, _ string) {
				if err := s.d.Store.RevokeKey(ctx, "t1", "k1"); err != nil {
					t.Fatal(err)
				}
			}},
		{"platform key, changed", testAdminKey,
			principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: principal.AdminKeyID, KeyRole: principal.RoleAdmin},
			func(t *testing.T, _ string) {
				s.host.adminKey.Store("another-admin-secret")
				t.Cleanup(func() { s.host.adminKey.Store(testAdminKey) })
			}},
		{"platform key, signed out", testAdminKey,
			principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: principal.AdminKeyID, KeyRole: principal.RoleAdmin},
			func(t *testing.T, token string) {
				if err := s.m.SignOut(ctx, token); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token, sess, caller, err := s.m.SignIn(ctx, tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if caller != tt.caller {
				t.Fatalf("SignIn caller = %+v, want %+v", caller, tt.caller)
			}
			if sess.Role != tt.caller.Role() || sess.KeyID != tt.caller.KeyID || sess.CSRFToken == "" ||
				sess.ExpiresAt.Sub(time.Now()) > SessionTTL || sess.ExpiresAt.Sub(time.Now()) < SessionTTL-time.Minute {
				t.Fatalf("session %+v", sess)
			}
			got, again, err := s.m.SessionCaller(ctx, token)
			if err != nil || got != tt.caller || again.CSRFToken != sess.CSRFToken {
				t.Fatalf("SessionCaller = %+v, %+v, %v", got, again, err)
			}
			if err := CheckCSRF(again, sess.CSRFToken); err != nil {
				t.Fatalf("CheckCSRF with the session's token: %v", err)
			}
			wantCode(t, CheckCSRF(again, ""), fault.KindForbidden, CodeCSRFTokenInvalid)
			wantCode(t, CheckCSRF(again, sess.CSRFToken+"x"), fault.KindForbidden, CodeCSRFTokenInvalid)

			tt.end(t, token)
			_, _, err = s.m.SessionCaller(ctx, token)
			wantCode(t, err, fault.KindUnauthenticated, CodeSessionInvalid)
		})
	}

	for _, token := range []string{"", "unknown", string(make([]byte, 300))} {
		_, _, err := s.m.SessionCaller(ctx, token)
		wantCode(t, err, fault.KindUnauthenticated, CodeSessionInvalid)
		if err := s.m.SignOut(ctx, token); err != nil {
			t.Errorf("SignOut(%q): %v", token, err)
		}
	}
}
