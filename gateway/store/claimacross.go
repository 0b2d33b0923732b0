package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A claim from another tenant's pool (an admin acting as a tenant claims from the
// default tenant's pool) cannot be one script: the pool is in the pool tenant's slot,
// the claimed records belong in the claimer's. It takes four steps, each on one slot:
//
//  1. pop (pool's slot): take up to n ids off the ready list, count them allocated and
//     park each in the pool tenant's claiming hash (id → claimer|ms|pool); the records
//     stay where they are, and the ids stay in the warm set, so the reconciler never
//     sees a member that is neither warm nor claimed;
//  2. bind (claimer's slot): write the claimed records, the claimer's index, expiry and
//     usage counters;
//  3. point the ids' locators at the claimer;
//  4. finish (pool's slot): drop the old records, the warm entries and the parked ids.
//
// A gateway that dies between two steps leaves the ids parked; RepairClaims (the
// reconciler) finishes a claim whose records reached the claimer and gives the others
// back to their pool.

// popAcrossScript runs once however often it is sent (opscript.go): a pop sent again,
// its answer late, answers the members the first run parked for it (read afresh) and
// pops no more. bindAcrossScript needs no token: it writes what its arguments say, and
// counts a member only when it joins the claimer's index, so a second run changes
// nothing; finishAcrossScript and giveBackScript only remove.
var popAcrossScript = redis.NewScript(`
-- KEYS: ready, alloc, claiming, warmSet, op token; ARGV: n, recordPrefix (pool tenant's), parked value
local out = {}
local function add(id, v)
  out[#out + 1] = id
  out[#out + 1] = v[1]
  out[#out + 1] = v[2] or '0'
  out[#out + 1] = v[3] or '0'
  out[#out + 1] = v[4] or '0'
end
local done = redis.call('GET', KEYS[5])
if done then
  for id in string.gmatch(done, '[^\n]+') do
    if redis.call('HGET', KEYS[3], id) == ARGV[3] then
      local v = redis.call('HMGET', ARGV[2] .. id, 'json', 'rev', 'ucpu', 'umem')
      if v[1] then add(id, v) end
    end
  end
  return out
end
local taken = {}
for i = 1, tonumber(ARGV[1]) do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  local v = redis.call('HMGET', ARGV[2] .. id, 'json', 'rev', 'ucpu', 'umem')
  if v[1] then
    redis.call('SADD', KEYS[2], id)
    redis.call('HSET', KEYS[3], id, ARGV[3])
    add(id, v)
    taken[#taken + 1] = id
  else
    redis.call('SREM', KEYS[4], id)
  end
end
if #taken > 0 then redis.call('SET', KEYS[5], table.concat(taken, '\n'), 'PX', ` + opTTL + `) end
return out
`)

var bindAcrossScript = redis.NewScript(`
-- KEYS: tenantIndex, expiry, tenantUsage
-- ARGV: patchJSON, createdMs, expiresMs ('' = none), recordPrefix (claimer's), tenant, poolKey,
--       then per member: id, json, rev, cpuMillis, memoryBytes
local patch = cjson.decode(ARGV[1])
local out = {}
for i = 7, #ARGV, 5 do
  local id, rev, cpu, mem = ARGV[i], tonumber(ARGV[i + 2]) + 1, tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local sb = cjson.decode(ARGV[i + 1])
  for k, v in pairs(patch) do sb[k] = v end
  sb['rev'] = rev
  local js = cjson.encode(sb)
  redis.call('HSET', ARGV[4] .. id, 'json', js, 'rev', rev, 'tenant', ARGV[5], 'pool', ARGV[6], 'ucpu', cpu, 'umem', mem)
  if redis.call('ZADD', KEYS[1], ARGV[2], id) == 1 then
    redis.call('HINCRBY', KEYS[3], 'sandboxes', 1)
    if cpu ~= 0 then redis.call('HINCRBY', KEYS[3], 'cpu', cpu) end
    if mem ~= 0 then redis.call('HINCRBY', KEYS[3], 'mem', mem) end
  end
  if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], id) end
  out[#out + 1] = js
end
return out
`)

var finishAcrossScript = redis.NewScript(`
-- KEYS: warmSet, claiming; ARGV: recordPrefix (pool tenant's), ids...
for i = 2, #ARGV do
  redis.call('SREM', KEYS[1], ARGV[i])
  redis.call('DEL', ARGV[1] .. ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return 1
`)

var giveBackScript = redis.NewScript(`
-- KEYS: ready, alloc, claiming; ARGV: ids...
local n = 0
for i = 1, #ARGV do
  if redis.call('HDEL', KEYS[3], ARGV[i]) == 1 then
    redis.call('SREM', KEYS[2], ARGV[i])
    redis.call('LPUSH', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
`)

func (s *Store) claimAcross(ctx context.Context, poolTenant, pool, tenant string, n int, patch []byte, createdMs int64, expiresMs string) ([]string, error) {
	if err := s.markActive(ctx, tenant); err != nil {
		return nil, err
	}
	parked := tenant + "|" + strconv.FormatInt(time.Now().UnixMilli(), 10) + "|" + pool
	ready := s.readyKey(poolTenant, pool)
	popped, err := popAcrossScript.Run(ctx, s.rdb,
		[]string{ready, s.allocKey(poolTenant, pool), s.claimingKey(poolTenant), s.warmSetKey(poolTenant), s.opKey(ready)},
		n, s.recordPrefix(poolTenant), parked).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	if len(popped) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(popped)/5)
	args := []any{patch, createdMs, expiresMs, s.recordPrefix(tenant), tenant, PoolKey(poolTenant, pool)}
	for i := 0; i+4 < len(popped); i += 5 {
		ids = append(ids, popped[i])
		args = append(args, popped[i], popped[i+1], popped[i+2], popped[i+3], popped[i+4])
	}
	res, err := bindAcrossScript.Run(ctx, s.rdb, []string{s.tenantIndex(tenant), s.expiryKey(tenant), s.usageKey(tenant)}, args...).StringSlice()
	if err != nil {
		// Nothing reached the claimer: the members go back to their pool.
		_ = giveBackScript.Run(ctx, s.rdb, []string{s.readyKey(poolTenant, pool), s.allocKey(poolTenant, pool), s.claimingKey(poolTenant)}, toAny(ids)...).Err()
		return nil, wrap(err)
	}
	if err := s.finishAcross(ctx, poolTenant, tenant, ids); err != nil {
		// The records are the claimer's; RepairClaims finishes the move.
		return nil, err
	}
	return res, nil
}

// finishAcross points the ids' locators at tenant and drops what their pool tenant's
// slot still holds of them.
func (s *Store) finishAcross(ctx context.Context, poolTenant, tenant string, ids []string) error {
	pipe := s.rdb.Pipeline()
	for _, id := range ids {
		pipe.Set(ctx, s.locKey(locSandbox, id), tenant, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap(err)
	}
	for _, id := range ids {
		s.locs.put(locSandbox, id, tenant)
	}
	return wrap(finishAcrossScript.Run(ctx, s.rdb, []string{s.warmSetKey(poolTenant), s.claimingKey(poolTenant)},
		append([]any{s.recordPrefix(poolTenant)}, toAny(ids)...)...).Err())
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// RepairClaims settles cross-tenant claims parked longer than olderThan (their gateway
// died halfway): a member whose record reached its claimer is moved there for good,
// any other goes back to its pool's ready list. It returns how many it settled.
func (s *Store) RepairClaims(ctx context.Context, olderThan time.Duration) (int, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil || len(tenants) == 0 {
		return 0, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(tenants))
	for i, t := range tenants {
		cmds[i] = pipe.HGetAll(ctx, s.claimingKey(t))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, wrap(err)
	}
	cutoff := time.Now().Add(-olderThan).UnixMilli()
	settled := 0
	for i, pt := range tenants {
		for id, v := range cmds[i].Val() {
			parts := strings.SplitN(v, "|", 3)
			if len(parts) != 3 {
				continue
			}
			if ms, _ := strconv.ParseInt(parts[1], 10, 64); ms > cutoff {
				continue // a claim in flight
			}
			claimer, pool := parts[0], parts[2]
			n, err := s.rdb.Exists(ctx, s.sandboxKey(claimer, id)).Result()
			if err != nil {
				return settled, wrap(err)
			}
			if n == 1 {
				err = s.finishAcross(ctx, pt, claimer, []string{id})
			} else {
				err = wrap(giveBackScript.Run(ctx, s.rdb, []string{s.readyKey(pt, pool), s.allocKey(pt, pool), s.claimingKey(pt)}, id).Err())
			}
			if err != nil {
				return settled, fmt.Errorf("settle parked claim of %s: %w", id, err)
			}
			settled++
		}
	}
	return settled, nil
}
