package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tenant is a team using the platform; every sandbox, pool, batch, plugin and audit
// record belongs to one.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Quotas    Quotas    `json:"quotas"`
	CreatedAt time.Time `json:"createdAt"`
}

// Quotas are a tenant's limits; zero means unlimited (or the platform default).
type Quotas struct {
	MaxConcurrent     int64    `json:"maxConcurrent,omitempty"`
	MaxCPUMillis      int64    `json:"maxCpuMillis,omitempty"`
	MaxMemoryBytes    int64    `json:"maxMemoryBytes,omitempty"`
	MaxTimeoutSeconds int64    `json:"maxTimeoutSeconds,omitempty"`
	MaxBatchSize      int64    `json:"maxBatchSize,omitempty"`
	AllowedImages     []string `json:"allowedImages,omitempty"`
	// CreateRate is sandboxes per second refilled into the tenant's bucket; CreateBurst
	// its size (default: max(1, CreateRate)).
	CreateRate  float64 `json:"createRate,omitempty"`
	CreateBurst float64 `json:"createBurst,omitempty"`
	// Runtime, when set, is the OCI runtime every sandbox of the tenant must use.
	Runtime string `json:"runtime,omitempty"`
	// DefaultCPUMillis and DefaultMemoryBytes apply when a request names no limits.
	DefaultCPUMillis   int64 `json:"defaultCpuMillis,omitempty"`
	DefaultMemoryBytes int64 `json:"defaultMemoryBytes,omitempty"`
	// AllowManualCleanup lets the tenant create sandboxes without timeout (they never
	// expire; deleted by hand) on a gateway that otherwise requires a timeout.
	AllowManualCleanup bool `json:"allowManualCleanup,omitempty"`
	// MaxVolumes and MaxVolumeBytes bound one sandbox's volumes (count, pvc storage);
	// HostVolumePrefixes narrows the platform's host volume prefixes for the tenant and
	// DenyHostVolumes refuses it host volumes (decided by the Rego admission policy).
	MaxVolumes         int64    `json:"maxVolumes,omitempty"`
	MaxVolumeBytes     int64    `json:"maxVolumeBytes,omitempty"`
	HostVolumePrefixes []string `json:"hostVolumePrefixes,omitempty"`
	DenyHostVolumes    bool     `json:"denyHostVolumes,omitempty"`
	// MaxSnapshots bounds the snapshots a tenant keeps.
	MaxSnapshots int64 `json:"maxSnapshots,omitempty"`
}

// APIKey is an issued key; only its hash is stored.
type APIKey struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Role      string    `json:"role"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

func (s *Store) tenantsKey() string { return s.Key("tenants") }

// The API keys share the slot of the sessions ({auth}, keys.go): the revocation and
// the session check read them together.
func (s *Store) keysKey() string                 { return s.authKey("keys") }   // hash of key → APIKey
func (s *Store) keyIDsKey() string               { return s.authKey("keyids") } // key id → hash of key
func (s *Store) tenantKeys(tenant string) string { return s.authKey("tenant", tenant, "keys") }

// HashKey is how keys are stored and looked up.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// PutTenant creates (create=true; ErrConflict if it exists) or replaces a tenant.
func (s *Store) PutTenant(ctx context.Context, t *Tenant, create bool) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if create {
		n, err := createFieldScript.Run(ctx, s, []string{s.tenantsKey()}, t.ID, body).Int()
		if err != nil {
			return wrap(err)
		}
		if n != 1 {
			return fmt.Errorf("tenant %s: %w", t.ID, ErrConflict)
		}
		return nil
	}
	return wrap(s.rdb.HSet(ctx, s.tenantsKey(), t.ID, body).Err())
}

// GetTenant reads one tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	body, err := s.rdb.HGet(ctx, s.tenantsKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("tenant %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, wrap(err)
	}
	var t Tenant
	if err := json.Unmarshal([]byte(body), &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTenants returns every tenant.
func (s *Store) ListTenants(ctx context.Context) ([]*Tenant, error) {
	all, err := s.rdb.HGetAll(ctx, s.tenantsKey()).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]*Tenant, 0, len(all))
	for _, body := range all {
		var t Tenant
		if json.Unmarshal([]byte(body), &t) == nil {
			out = append(out, &t)
		}
	}
	return out, nil
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

var bucketScript = newOpScript(`
-- KEYS: bucket, (op token); ARGV: rate/s, burst, nowMs, take
local rate, burst, now, take = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local ok = 0
if tokens >= take then tokens = tokens - take; ok = 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {ok, tostring(tokens)}
`)

// TakeTokens takes n tokens from a tenant's create bucket (shared by every gateway); it
// reports whether there were enough and how many are left.
func (s *Store) TakeTokens(ctx context.Context, tenant string, rate, burst float64, n int, now time.Time) (bool, float64, error) {
	res, err := bucketScript.Run(ctx, s, []string{s.Key("tenant", tenant, "bucket")}, rate, burst, now.UnixMilli(), n).Slice()
	if err != nil {
		return false, 0, wrap(err)
	}
	left, _ := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	ok, _ := res[0].(int64)
	return ok == 1, left, nil
}

// CountSandboxes returns how many sandboxes a tenant holds.
func (s *Store) CountSandboxes(ctx context.Context, tenant string) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.tenantIndex(tenant)).Result()
	return n, wrap(err)
}
