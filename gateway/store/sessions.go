package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Session is a console sign-in: an API key exchanged for a cookie. Only the hash of the
// cookie's value is a Redis key, so that a dump of the store does not hand out sessions.
type Session struct {
	KeyID  string `json:"keyId"`
	Tenant string `json:"tenant"`
	Role   string `json:"role"`
	Admin  bool   `json:"admin,omitempty"`
	// KeyHash is the hash of the platform admin key a session of KeyID "admin" was made
	// with: when the operator changes that key, its sessions end.
	KeyHash   string    `json:"keyHash,omitempty"`
	CSRFToken string    `json:"csrfToken"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (s *Store) sessionKey(token string) string { return s.authKey("session", HashKey(token)) }

// PutSession stores a session under its cookie value until its ExpiresAt.
func (s *Store) PutSession(ctx context.Context, token string, sess *Session) error {
	body, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	ttl := time.Until(sess.ExpiresAt)
	if ttl <= 0 {
		return fmt.Errorf("session already expired")
	}
	return wrap(s.rdb.Set(ctx, s.sessionKey(token), body, ttl).Err())
}

// sessionScript reads a session and, for an issued key, whether that key still exists:
// one round trip per cookie-authenticated request. It returns {session json, key json or
// false}.
var sessionScript = redis.NewScript(`
-- KEYS: session, keyIDs, keys; ARGV: admin key id
local body = redis.call('GET', KEYS[1])
if not body then return false end
local id = string.match(body, '"keyId":"([^"]*)"')
if id == ARGV[1] then return {body, false} end
local h = redis.call('HGET', KEYS[2], id or '')
if not h then return {body, false} end
return {body, redis.call('HGET', KEYS[3], h)}
`)

// GetSession returns the session of a cookie value and, for an issued key (any key id
// but adminKeyID), the key as it stands now (nil when it was revoked). ErrNotFound when
// the session does not exist or expired.
func (s *Store) GetSession(ctx context.Context, token, adminKeyID string) (*Session, *APIKey, error) {
	res, err := sessionScript.Run(ctx, s.rdb, []string{s.sessionKey(token), s.keyIDsKey(), s.keysKey()}, adminKeyID).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, wrap(err)
	}
	body, _ := res[0].(string)
	var sess Session
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		return nil, nil, fmt.Errorf("decode session: %w", err)
	}
	var key *APIKey
	if len(res) > 1 {
		if kb, ok := res[1].(string); ok {
			var k APIKey
			if json.Unmarshal([]byte(kb), &k) == nil {
				key = &k
			}
		}
	}
	return &sess, key, nil
}

// DeleteSession ends a session at once, on every gateway.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	return wrap(s.rdb.Del(ctx, s.sessionKey(token)).Err())
}
