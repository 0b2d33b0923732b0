package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// Console sessions: the web console trades an API key for an HttpOnly cookie whose value
// names a session in Redis (so every replica accepts it). The session is its key: same
// tenant, same role, and it dies with the key (revoked, or for the platform key, changed).

// SessionTTL is how long a session lives from sign-in. The lifetime is fixed, not
// sliding: a stolen cookie is good for at most this long.
const SessionTTL = 12 * time.Hour

// CredSession is the principal kind of a request authenticated by a console session.
const CredSession = "session"

// Session is a signed-in console session as the API shows it.
type Session struct {
	Tenant    string    `json:"tenant"`
	Role      string    `json:"role"`
	KeyID     string    `json:"keyId"`
	CSRFToken string    `json:"csrfToken"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// SignIn checks an API key and opens a session for it; token is the cookie value.
func (s *Service) SignIn(ctx context.Context, apiKey string) (token string, sess *Session, caller Caller, err error) {
	if apiKey == "" {
		return "", nil, Caller{}, Errorf(KindUnauthenticated, CodeMissingAPIKey, "apiKey is required: the API key to sign in with")
	}
	caller, err = s.Authenticate(ctx, apiKey)
	if err != nil {
		return "", nil, Caller{}, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	rec := &store.Session{
		KeyID: caller.KeyID, Tenant: caller.Tenant, Role: caller.Role(), Admin: caller.Admin,
		CSRFToken: randomToken(32), CreatedAt: now, ExpiresAt: now.Add(SessionTTL),
	}
	if caller.KeyID == adminKeyID {
		rec.KeyHash = store.HashKey(apiKey)
	}
	token = randomToken(32)
	if err := s.store.PutSession(ctx, token, rec); err != nil {
		return "", nil, Caller{}, err
	}
	return token, sessionView(rec), caller, nil
}

// adminKeyID is the key id of the configured platform admin key.
const adminKeyID = "admin"

func sessionView(rec *store.Session) *Session {
	return &Session{Tenant: rec.Tenant, Role: rec.Role, KeyID: rec.KeyID, CSRFToken: rec.CSRFToken, ExpiresAt: rec.ExpiresAt}
}

// SessionCaller resolves a session cookie value to its caller. A session whose key was
// revoked (or whose platform key changed) is not valid any more.
func (s *Service) SessionCaller(ctx context.Context, token string) (Caller, *Session, error) {
	invalid := Errorf(KindUnauthenticated, CodeSessionInvalid, "the console session is not valid (signed out, expired, or its API key was revoked); sign in again")
	if token == "" || len(token) > 256 {
		return Caller{}, nil, invalid
	}
	rec, key, err := s.store.GetSession(ctx, token, adminKeyID)
	if errors.Is(err, store.ErrNotFound) {
		return Caller{}, nil, invalid
	}
	if err != nil {
		return Caller{}, nil, err
	}
	if time.Now().After(rec.ExpiresAt) {
		return Caller{}, nil, invalid
	}
	var c Caller
	if rec.KeyID == adminKeyID {
		admin, _ := s.adminKey.Load().(string)
		if admin == "" || subtle.ConstantTimeCompare([]byte(store.HashKey(admin)), []byte(rec.KeyHash)) != 1 {
			return Caller{}, nil, invalid
		}
		c = Caller{Tenant: DefaultTenant, Admin: true, KeyID: adminKeyID, KeyRole: RoleAdmin}
	} else {
		if key == nil || key.ID != rec.KeyID {
			return Caller{}, nil, invalid
		}
		c = Caller{Tenant: key.Tenant, Admin: key.Role == RoleAdmin, KeyID: key.ID, KeyRole: key.Role}
	}
	return c, sessionView(rec), nil
}

// SignOut deletes a session on every gateway; an unknown one is not an error.
func (s *Service) SignOut(ctx context.Context, token string) error {
	if token == "" || len(token) > 256 {
		return nil
	}
	return s.store.DeleteSession(ctx, token)
}

// CheckCSRF compares a request's X-CSRF-Token with its session's.
func CheckCSRF(sess *Session, got string) error {
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRFToken)) != 1 {
		return Errorf(KindForbidden, CodeCSRFTokenInvalid, "this change needs the X-CSRF-Token header of the console session (GET /v1/session returns it)")
	}
	return nil
}

// credentialKey marks a request context with the kind of credential that authenticated
// it, so that access decisions and audit records name a console session as one.
type credentialKey struct{}

// WithCredential returns ctx marked as authenticated by a credential of kind.
func WithCredential(ctx context.Context, kind string) context.Context {
	return context.WithValue(ctx, credentialKey{}, kind)
}

func credentialOf(ctx context.Context) string {
	if k, ok := ctx.Value(credentialKey{}).(string); ok && k != "" {
		return k
	}
	return CredAPIKey
}
