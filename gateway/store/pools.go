package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// A tenant's pools live in its slot: the definitions in one hash (name → JSON), each
// pool's ready list and allocated set, and the tenant's warm members (keys.go).
func (s *Store) poolsKey(tenant string) string { return s.tkey(tenant, "pools") }
func (s *Store) readyKey(tenant, name string) string {
	return s.tkey(tenant, "pool", name, "ready")
}
func (s *Store) allocKey(tenant, name string) string {
	return s.tkey(tenant, "pool", name, "allocated")
}
func (s *Store) warmSetKey(tenant string) string  { return s.tkey(tenant, "warm") }
func (s *Store) claimingKey(tenant string) string { return s.tkey(tenant, "claiming") }

// PutPool creates (create=true, ErrConflict when it exists) or replaces a pool.
func (s *Store) PutPool(ctx context.Context, p *Pool, create bool) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pool: %w", err)
	}
	if err := s.markActive(ctx, p.Tenant); err != nil {
		return err
	}
	if create {
		ok, err := s.rdb.HSetNX(ctx, s.poolsKey(p.Tenant), p.Name, body).Result()
		if err != nil {
			return wrap(err)
		}
		if !ok {
			return fmt.Errorf("pool %s: %w", p.Name, ErrConflict)
		}
		return nil
	}
	return wrap(s.rdb.HSet(ctx, s.poolsKey(p.Tenant), p.Name, body).Err())
}

// GetPool reads one pool.
func (s *Store) GetPool(ctx context.Context, tenant, name string) (*Pool, error) {
	body, err := s.rdb.HGet(ctx, s.poolsKey(tenant), name).Result()
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
	tenants := []string{tenant}
	if tenant == "" {
		var err error
		if tenants, err = s.activeTenants(ctx); err != nil {
			return nil, err
		}
	}
	out := []*Pool{}
	cmds, err := perTenant(ctx, s, tenants, func(p redis.Pipeliner, t string) *redis.MapStringStringCmd {
		return p.HGetAll(ctx, s.poolsKey(t))
	})
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		for _, body := range c.Val() {
			var p Pool
			if json.Unmarshal([]byte(body), &p) == nil {
				out = append(out, &p)
			}
		}
	}
	return out, nil
}

// DeletePool removes the pool definition and returns the ids of its warm sandboxes,
// which the caller removes from the runtime.
func (s *Store) DeletePool(ctx context.Context, tenant, name string) ([]string, error) {
	pipe := s.rdb.TxPipeline()
	ids := pipe.LRange(ctx, s.readyKey(tenant, name), 0, -1)
	pipe.HDel(ctx, s.poolsKey(tenant), name)
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

// WarmIDs returns the warm (unclaimed) pool members of every tenant.
func (s *Store) WarmIDs(ctx context.Context) (map[string]bool, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	cmds, err := perTenant(ctx, s, tenants, func(p redis.Pipeliner, t string) *redis.StringSliceCmd {
		return p.SMembers(ctx, s.warmSetKey(t))
	})
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		for _, id := range c.Val() {
			out[id] = true
		}
	}
	return out, nil
}

var addWarmScript = redis.NewScript(`
-- KEYS: record, ready, warmSet, pools; ARGV: json, id, tenant, poolKey, cpuMillis, memoryBytes, poolName
if redis.call('HEXISTS', KEYS[4], ARGV[7]) == 0 then return 0 end
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
	if err := s.markActive(ctx, sb.Tenant); err != nil {
		return false, err
	}
	wrote, err := s.claimLocator(ctx, locSandbox, sb.ID, sb.Tenant)
	if err != nil {
		return false, err
	}
	cpu, mem := s.measure(sb)
	n, err := addWarmScript.Run(ctx, s.rdb, []string{s.sandboxKey(sb.Tenant, sb.ID), s.readyKey(sb.Tenant, sb.Pool), s.warmSetKey(sb.Tenant), s.poolsKey(sb.Tenant)},
		body, sb.ID, sb.Tenant, PoolKey(sb.Tenant, sb.Pool), cpu, mem, sb.Pool).Int()
	if wrote && (err != nil || n != 1) {
		_ = s.dropLocator(ctx, locSandbox, sb.ID, sb.Tenant)
	}
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
	n, err := removeWarmScript.Run(ctx, s.rdb, []string{s.sandboxKey(tenant, id), s.readyKey(tenant, pool), s.warmSetKey(tenant)}, id).Int()
	if err != nil {
		return false, wrap(err)
	}
	if n > 0 {
		if err := s.dropLocator(ctx, locSandbox, id, tenant); err != nil {
			return true, err
		}
	}
	return n > 0, nil
}

// claimScript pops up to N warm sandboxes of one pool and binds them to the pool's own
// tenant in a single step, in that tenant's slot: the record gets the claim's fields
// (metadata, expiry, batch…), joins the tenant's index and the expiry schedule, and
// counts as allocated. The records' keys are derived from the tenant's tag (ARGV[5]),
// so that they are in the slot of the declared keys. A claim from another tenant's pool
// is claimAcross.
var claimScript = redis.NewScript(`
-- KEYS: ready, warmSet, alloc, tenantIndex, expiry, tenantUsage
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
      redis.call('HINCRBY', KEYS[6], 'sandboxes', 1)
      local cpu = tonumber(redis.call('HGET', key, 'ucpu') or '0')
      local mem = tonumber(redis.call('HGET', key, 'umem') or '0')
      if cpu ~= 0 then redis.call('HINCRBY', KEYS[6], 'cpu', cpu) end
      if mem ~= 0 then redis.call('HINCRBY', KEYS[6], 'mem', mem) end
    end
    if ARGV[4] ~= '' then redis.call('ZADD', KEYS[5], ARGV[4], id) end
    out[#out + 1] = js
  end
end
return out
`)

// ClaimPatch holds the fields a claim writes into each warm record.
type ClaimPatch map[string]any

// Claim binds up to n warm sandboxes of a pool to a tenant and returns them: one script
// when the pool is the tenant's own, claimAcross otherwise.
func (s *Store) Claim(ctx context.Context, poolTenant, pool, tenant string, n int, patch ClaimPatch, createdMs int64, expiresMs string) ([]*Sandbox, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	var res []string
	if poolTenant != tenant {
		res, err = s.claimAcross(ctx, poolTenant, pool, tenant, n, body, createdMs, expiresMs)
	} else {
		keys := []string{s.readyKey(tenant, pool), s.warmSetKey(tenant), s.allocKey(tenant, pool), s.tenantIndex(tenant), s.expiryKey(tenant), s.usageKey(tenant)}
		res, err = claimScript.Run(ctx, s.rdb, keys, n, body, createdMs, expiresMs, s.recordPrefix(tenant), tenant, PoolKey(poolTenant, pool)).StringSlice()
	}
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

// perTenant runs one command per tenant in a pipeline (each on its tenant's own slot) and
// returns the commands in the order of tenants; a missing key is no error.
func perTenant[C redis.Cmder](ctx context.Context, s *Store, tenants []string, cmd func(redis.Pipeliner, string) C) ([]C, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]C, len(tenants))
	for i, t := range tenants {
		cmds[i] = cmd(pipe, t)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	return cmds, nil
}
