// API keys: only the hash of each key is stored, with its tenant, role and id.

package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyHashByID returns the stored hash of the key with id: one HGET, cheap enough for
// every proxied request that carries a key-bound access header. ErrNotFound when the
// key does not exist or was revoked.
func (s *Store) KeyHashByID(ctx context.Context, id string) (string, error) {
	h, err := s.rdb.HGet(ctx, s.keyIDsKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", wrap(err)
	}
	return h, nil
}

// APIKey is an issued key; only its hash is stored.
type APIKey struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Role      string    `json:"role"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

// The API keys share the slot of the sessions ({auth}, layout.go): the revocation and
// the session check read them together.
func (s *Store) keysKey() string                 { return s.authKey("keys") }   // hash of key → APIKey
func (s *Store) keyIDsKey() string               { return s.authKey("keyids") } // key id → hash of key
func (s *Store) tenantKeys(tenant string) string { return s.authKey("tenant", tenant, "keys") }

// HashKey is how keys are stored and looked up.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// PutKey stores a new key under the hash of its secret.
func (s *Store) PutKey(ctx context.Context, secret string, k *APIKey) error {
	body, err := json.Marshal(k)
	if err != nil {
		return err
	}
	h := HashKey(secret)
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, s.keysKey(), h, body)
	pipe.HSet(ctx, s.keyIDsKey(), k.ID, h)
	pipe.SAdd(ctx, s.tenantKeys(k.Tenant), k.ID)
	_, err = pipe.Exec(ctx)
	return wrap(err)
}

// LookupKey finds the key whose secret is given; ErrNotFound when none (or revoked).
func (s *Store) LookupKey(ctx context.Context, secret string) (*APIKey, error) {
	body, err := s.rdb.HGet(ctx, s.keysKey(), HashKey(secret)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, wrap(err)
	}
	var k APIKey
	if err := json.Unmarshal([]byte(body), &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListKeys returns a tenant's keys (never their secrets).
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]*APIKey, error) {
	ids, err := s.rdb.SMembers(ctx, s.tenantKeys(tenant)).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := []*APIKey{}
	for _, id := range ids {
		h, err := s.rdb.HGet(ctx, s.keyIDsKey(), id).Result()
		if err != nil {
			continue
		}
		body, err := s.rdb.HGet(ctx, s.keysKey(), h).Result()
		if err != nil {
			continue
		}
		var k APIKey
		if json.Unmarshal([]byte(body), &k) == nil {
			out = append(out, &k)
		}
	}
	return out, nil
}

var revokeKeyScript = newOpScript(`
-- KEYS: keyIDs, keys, tenantKeys, (op token); ARGV: id
local h = redis.call('HGET', KEYS[1], ARGV[1])
if not h then return 0 end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], h)
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return 1
`)

// RevokeKey deletes a tenant's key at once; ErrNotFound when it is not that tenant's.
func (s *Store) RevokeKey(ctx context.Context, tenant, id string) error {
	n, err := revokeKeyScript.Run(ctx, s, []string{s.keyIDsKey(), s.keysKey(), s.tenantKeys(tenant)}, id).Int()
	if err != nil {
		return wrap(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
