package access

import (
	"context"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

// Console sessions: the web console trades an API key for an HttpOnly cookie whose value
// names a session in Redis (so every replica accepts it). The session is its key: same
// tenant, same role, and it dies with the key (revoked, or for the platform key, changed).

// SessionTTL is how long a session lives from sign-in. The lifetime is fixed, not
// sliding: a stolen cookie is good for at most this long.
const SessionTTL = 12 * time.Hour

// Session is a signed-in console session as the API shows it.
type Session struct {
	Tenant    string    `json:"tenant"`
	Role      string    `json:"role"`
	KeyID     string    `json:"keyId"`
	CSRFToken string    `json:"csrfToken"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// SignIn checks an API key and opens a session for it; token is the cookie value.
func (m *Manager) SignIn(ctx context.Context, apiKey string) (token string, sess *Session, caller principal.Caller, err error) {
	if apiKey == "" {
		return "", nil, principal.Caller{}, fault.Errorf(fault.KindUnauthenticated, fault.CodeMissingAPIKey, "apiKey is required: the API key to sign in with")
	}
	caller, err = m.host.Authenticate(ctx, apiKey)
	if err != nil {
		return "", nil, principal.Caller{}, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	rec := &store.Session{
		KeyID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role(), Admin: caller.Admin,
		CSRFToken: randomToken(32), CreatedAt: now, ExpiresAt: now.Add(SessionTTL),
	}
	if caller.KeyID == principal.AdminKeyID {
		rec.KeyHash = store.HashKey(apiKey)
	}
	token = randomToken(32)
	if err := m.store.PutSession(ctx, token, rec); err != nil {
		return "", nil, principal.Caller{}, err
	}
	return token, sessionView(rec), caller, nil
}

func sessionView(rec *store.Session) *Session {
	return &Session{Tenant: rec.Tenant, Role: rec.Role, KeyID: rec.KeyID, CSRFToken: rec.CSRFToken, ExpiresAt: rec.ExpiresAt}
}

// SessionCaller resolves a session cookie value to its caller. A session whose key was
// revoked (or whose platform key changed) is not valid any more.
func (m *Manager) SessionCaller(ctx context.Context, token string) (principal.Caller, *Session, error) {
	invalid := fault.Errorf(fault.KindUnauthenticated, CodeSessionInvalid, "the console session is not valid (signed out, expired, or its API key was revoked); sign in again")
	if token == "" || len(token) > 256 {
		return principal.Caller{}, nil, invalid
	}
	rec, key, err := m.store.GetSession(ctx, token, principal.AdminKeyID)
	if errors.Is(err, store.ErrNotFound) {
		return principal.Caller{}, nil, invalid
	}
	if err != nil {
		return principal.Caller{}, nil, err
	}
	if time.Now().After(rec.ExpiresAt) {
		return principal.Caller{}, nil, invalid
	}
	var c principal.Caller
	if rec.KeyID == principal.AdminKeyID {
		admin := m.host.AdminKey()
		if admin == "" || subtle.ConstantTimeCompare([]byte(store.HashKey(admin)), []byte(rec.KeyHash)) != 1 {
			return principal.Caller{}, nil, invalid
		}
		c = principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: principal.AdminKeyID, KeyRole: principal.RoleAdmin}
	} else {
		if key == nil || key.ID != rec.KeyID {
			return principal.Caller{}, nil, invalid
		}
		c = principal.Caller{Tenant: key.Tenant, Admin: key.Role == principal.RoleAdmin, KeyID: key.ID, KeyRole: key.Role}
	}
	return c, sessionView(rec), nil
}

// SignOut deletes a session on every gateway; an unknown one is not an error.
func (m *Manager) SignOut(ctx context.Context, token string) error {
	if token == "" || len(token) > 256 {
		return nil
	}
	return m.store.DeleteSession(ctx, token)
}

// CheckCSRF compares a request's X-CSRF-Token with its session's.
func CheckCSRF(sess *Session, got string) error {
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRFToken)) != 1 {
		return fault.Errorf(fault.KindForbidden, CodeCSRFTokenInvalid, "this change needs the X-CSRF-Token header of the console session (GET /v1/session returns it)")
	}
	return nil
}
