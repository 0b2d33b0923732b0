package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Pool is a named template with capacity bounds; the gateway keeps warm sandboxes of it.
type Pool struct {
	Tenant   string          `json:"tenant"`
	Name     string          `json:"name"`
	Template json.RawMessage `json:"template"`
	Capacity Capacity        `json:"capacitySpec"`
	// Version changes with the template; warm sandboxes of an older version are replaced.
	Version   int64  `json:"version"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
}

// Capacity bounds a pool: available (idle, warm) within [BufferMin, BufferMax], and
// total (available + starting + allocated) within [PoolMin, PoolMax].
type Capacity struct {
	BufferMin int `json:"bufferMin"`
	BufferMax int `json:"bufferMax"`
	PoolMin   int `json:"poolMin"`
	PoolMax   int `json:"poolMax"`
}

// PoolKey identifies a pool across tenants.
func PoolKey(tenant, name string) string { return tenant + "/" + name }

func (s *Store) poolsKey() string { return s.Key("pools") }
func (s *Store) readyKey(tenant, name string) string {
	return s.Key("pool", PoolKey(tenant, name), "ready")
}
func (s *Store) allocKey(tenant, name string) string {
	return s.Key("pool", PoolKey(tenant, name), "allocated")
}
func (s *Store) warmSetKey() string { return s.Key("warm") }

// PutPool creates (create=true, ErrConflict when it exists) or replaces a pool.
func (s *Store) PutPool(ctx context.Context, p *Pool, create bool) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pool: %w", err)
	}
	if create {
		ok, err := s.rdb.HSetNX(ctx, s.poolsKey(), PoolKey(p.Tenant, p.Name), body).Result()
		if err != nil {
			return wrap(err)
		}
		if !ok {
			return fmt.Errorf("pool %s: %w", p.Name, ErrConflict)
		}
		return nil
	}
	return wrap(s.rdb.HSet(ctx, s.poolsKey(), PoolKey(p.Tenant, p.Name), body).Err())
}

// GetPool reads one pool.
func (s *Store) GetPool(ctx context.Context, tenant, name string) (*Pool, error) {
	body, err := s.rdb.HGet(ctx, s.poolsKey(), PoolKey(tenant, name)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("pool %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, wrap(err)
	}
	var p Pool
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return nil, fmt.Errorf("decode pool: %w", err)
	}
	return &p, nil
}

// ListPools returns the pools of tenant ("" = every tenant).
func (s *Store) ListPools(ctx context.Context, tenant string) ([]*Pool, error) {
	all, err := s.rdb.HGetAll(ctx, s.poolsKey()).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := []*Pool{}
	for key, body := range all {
		if tenant != "" && !strings.HasPrefix(key, tenant+"/") {
			continue
		}
		var p Pool
		if json.Unmarshal([]byte(body), &p) == nil {
			out = append(out, &p)
		}
	}
	return out, nil
}

// DeletePool removes the pool definition and returns the ids of its warm sandboxes,
// which the caller removes from the runtime.
func (s *Store) DeletePool(ctx context.Context, tenant, name string) ([]string, error) {
	pipe := s.rdb.TxPipeline()
	ids := pipe.LRange(ctx, s.readyKey(tenant, name), 0, -1)
	pipe.HDel(ctx, s.poolsKey(), PoolKey(tenant, name))
	pipe.Del(ctx, s.readyKey(tenant, name))
	pipe.Del(ctx, s.allocKey(tenant, name))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap(err)
	}
	return ids.Val(), nil
}

// PoolCounts are the live numbers of a pool.
type PoolCounts struct {
	Available int64
	Allocated int64
}

// CountPool reads a pool's available and allocated numbers in one round trip.
func (s *Store) CountPool(ctx context.Context, tenant, name string) (PoolCounts, error) {
	pipe := s.rdb.Pipeline()
	a := pipe.LLen(ctx, s.readyKey(tenant, name))
	b := pipe.SCard(ctx, s.allocKey(tenant, name))
	if _, err := pipe.Exec(ctx); err != nil {
		return PoolCounts{}, wrap(err)
	}
	return PoolCounts{Available: a.Val(), Allocated: b.Val()}, nil
}

// ReadyMembers lists the warm sandboxes waiting in a pool.
func (s *Store) ReadyMembers(ctx context.Context, tenant, name string) ([]string, error) {
	ids, err := s.rdb.LRange(ctx, s.readyKey(tenant, name), 0, -1).Result()
	return ids, wrap(err)
}

// IsWarm reports which of ids are warm (unclaimed) pool members.
func (s *Store) WarmIDs(ctx context.Context) (map[string]bool, error) {
	ids, err := s.rdb.SMembers(ctx, s.warmSetKey()).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

var addWarmScript = redis.NewScript(`
-- KEYS: record, ready, warmSet, pools; ARGV: json, id, tenant, poolKey, cpuMillis, memoryBytes
if redis.call('HEXISTS', KEYS[4], ARGV[4]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'rev', 1, 'tenant', ARGV[3], 'pool', ARGV[4], 'ucpu', ARGV[5], 'umem', ARGV[6])
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
`)

// AddWarm records a started, answering sandbox as available in its pool. It reports false
// when the pool was deleted meanwhile (the caller then removes the sandbox).
func (s *Store) AddWarm(ctx context.Context, sb *Sandbox) (bool, error) {
	body, err := json.Marshal(sb)
	if err != nil {
		return false, err
	}
	cpu, mem := s.measure(sb)
	n, err := addWarmScript.Run(ctx, s.rdb, []string{s.sandboxKey(sb.ID), s.readyKey(sb.Tenant, sb.Pool), s.warmSetKey(), s.poolsKey()},
		body, sb.ID, sb.Tenant, PoolKey(sb.Tenant, sb.Pool), cpu, mem).Int()
	return n == 1, wrap(err)
}

var removeWarmScript = redis.NewScript(`
-- KEYS: record, ready, warmSet; ARGV: id
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
if removed > 0 then redis.call('DEL', KEYS[1]) end
return removed
`)

// RemoveWarm takes an unclaimed member out of its pool; false when it was claimed meanwhile.
func (s *Store) RemoveWarm(ctx context.Context, tenant, pool, id string) (bool, error) {
	n, err := removeWarmScript.Run(ctx, s.rdb, []string{s.sandboxKey(id), s.readyKey(tenant, pool), s.warmSetKey()}, id).Int()
	return n > 0, wrap(err)
}

// claimScript pops up to N warm sandboxes of one pool and binds them to the caller in a
// single step: the record gets the claim's fields (tenant, metadata, expiry, batch…),
// joins the tenant's index and the expiry schedule, and counts as allocated.
var claimScript = redis.NewScript(`
-- KEYS: ready, warmSet, alloc, tenantIndex, allIndex, expiry, tenantUsage
-- ARGV: n, patchJSON, createdMs, expiresMs ('' = none), recordPrefix, tenant, poolKey
local n = tonumber(ARGV[1])
local patch = cjson.decode(ARGV[2])
local out = {}
for i = 1, n do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  local key = ARGV[5] .. id
  local body = redis.call('HGET', key, 'json')
  redis.call('SREM', KEYS[2], id)
  if body then
    local sb = cjson.decode(body)
    for k, v in pairs(patch) do sb[k] = v end
    local rev = tonumber(redis.call('HGET', key, 'rev') or '0') + 1
    sb['rev'] = rev
    local js = cjson.encode(sb)
    redis.call('HSET', key, 'json', js, 'rev', rev, 'tenant', ARGV[6], 'pool', ARGV[7])
    redis.call('SADD', KEYS[3], id)
    if redis.call('ZADD', KEYS[4], ARGV[3], id) == 1 then
      redis.call('HINCRBY', KEYS[7], 'sandboxes', 1)
      local cpu = tonumber(redis.call('HGET', key, 'ucpu') or '0')
      local mem = tonumber(redis.call('HGET', key, 'umem') or '0')
      if cpu ~= 0 then redis.call('HINCRBY', KEYS[7], 'cpu', cpu) end
      if mem ~= 0 then redis.call('HINCRBY', KEYS[7], 'mem', mem) end
    end
    redis.call('ZADD', KEYS[5], ARGV[3], id)
    if ARGV[4] ~= '' then redis.call('ZADD', KEYS[6], ARGV[4], id) end
    out[#out + 1] = js
  end
end
return out
`)

// ClaimPatch holds the fields a claim writes into each warm record.
type ClaimPatch map[string]any

// Claim binds up to n warm sandboxes of a pool to a tenant in one script and returns them.
func (s *Store) Claim(ctx context.Context, poolTenant, pool, tenant string, n int, patch ClaimPatch, createdMs int64, expiresMs string) ([]*Sandbox, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	keys := []string{s.readyKey(poolTenant, pool), s.warmSetKey(), s.allocKey(poolTenant, pool), s.tenantIndex(tenant), s.allIndex(), s.expiryKey(), s.usageKey(tenant)}
	res, err := claimScript.Run(ctx, s.rdb, keys, n, body, createdMs, expiresMs, s.Key("sandbox")+":", tenant, PoolKey(poolTenant, pool)).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	out := make([]*Sandbox, 0, len(res))
	for _, js := range res {
		var sb Sandbox
		if err := json.Unmarshal([]byte(js), &sb); err != nil {
			return nil, fmt.Errorf("decode claimed sandbox: %w", err)
		}
		out = append(out, &sb)
	}
	return out, nil
}

// AllocatedMembers lists the claimed, still-recorded sandboxes of a pool.
func (s *Store) AllocatedMembers(ctx context.Context, tenant, name string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.allocKey(tenant, name)).Result()
	return ids, wrap(err)
}
