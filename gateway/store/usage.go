package store

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Usage is what a tenant holds now: its sandboxes and the CPU and memory they were
// given. The scripts that create, claim, update and delete records keep it in a hash
// per tenant ({t:<id>}:usage), so that admission reads three numbers instead of
// listing the tenant's sandboxes; RepairUsage recounts it from the records.
type Usage struct {
	Sandboxes   int64
	CPUMillis   int64
	MemoryBytes int64
}

// Meter tells the store the CPU (millis) and memory (bytes) a record counts for.
type Meter func(*Sandbox) (cpuMillis, memoryBytes int64)

// SetMeter sets how records are measured for the usage counters (the gateway parses
// resource limits; the store does not know their syntax). Without one they count 0.
func (s *Store) SetMeter(m Meter) { s.meter = m }

func (s *Store) measure(sb *Sandbox) (int64, int64) {
	if s.meter == nil {
		return 0, 0
	}
	return s.meter(sb)
}

// TenantUsage reads a tenant's usage counters in one round trip.
func (s *Store) TenantUsage(ctx context.Context, tenant string) (Usage, error) {
	vals, err := s.rdb.HMGet(ctx, s.usageKey(tenant), "sandboxes", "cpu", "mem").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Usage{}, wrap(err)
	}
	num := func(i int) int64 {
		if i >= len(vals) {
			return 0
		}
		str, _ := vals[i].(string)
		n, _ := strconv.ParseInt(str, 10, 64)
		return max(n, 0)
	}
	return Usage{Sandboxes: num(0), CPUMillis: num(1), MemoryBytes: num(2)}, nil
}

// recountScript sets a tenant's counters from its index and records in one step, so
// that no create or delete runs between the count and the write.
var recountScript = redis.NewScript(`
-- KEYS: tenantIndex, tenantUsage; ARGV: recordPrefix (the tenant's: its records are in its slot)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local cpu, mem = 0, 0
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', ARGV[1] .. id, 'ucpu', 'umem')
  cpu = cpu + tonumber(v[1] or '0')
  mem = mem + tonumber(v[2] or '0')
end
local old = redis.call('HMGET', KEYS[2], 'sandboxes', 'cpu', 'mem')
local changed = tonumber(old[1] or '0') ~= #ids or tonumber(old[2] or '0') ~= cpu or tonumber(old[3] or '0') ~= mem
if #ids == 0 then
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[2], 'sandboxes', #ids, 'cpu', cpu, 'mem', mem)
end
if changed then return 1 end
return 0
`)

// RepairUsage recounts the usage counters of every tenant that holds sandboxes or has
// counters, first measuring records written before the counters existed. It returns
// the tenants whose counters were wrong. It reads every record: the reconciler runs it,
// off every request's path.
func (s *Store) RepairUsage(ctx context.Context) ([]string, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil {
		return nil, err
	}
	var repaired []string
	for _, t := range tenants {
		if err := s.backfillMeasures(ctx, t); err != nil {
			return repaired, err
		}
		n, err := recountScript.Run(ctx, s.rdb, []string{s.tenantIndex(t), s.usageKey(t)}, s.recordPrefix(t)).Int()
		if err != nil {
			return repaired, wrap(err)
		}
		if n == 1 {
			repaired = append(repaired, t)
		}
	}
	return repaired, nil
}

// backfillMeasures gives the records of a tenant that lack them their CPU and memory
// fields (records written before the usage counters existed).
func (s *Store) backfillMeasures(ctx context.Context, tenant string) error {
	ids, err := s.rdb.ZRange(ctx, s.tenantIndex(tenant), 0, -1).Result()
	if err != nil || len(ids) == 0 {
		return wrap(err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.sandboxKey(tenant, id), "ucpu", "json", "rev")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return wrap(err)
	}
	fix := s.rdb.Pipeline()
	n := 0
	for i, c := range cmds {
		v := c.Val()
		if len(v) < 3 || v[0] != nil || v[1] == nil {
			continue
		}
		sb, err := decodeSandbox(v[1], v[2])
		if err != nil {
			continue
		}
		cpu, mem := s.measure(sb)
		// Only where the record still exists (HSET would recreate a deleted one).
		fix.Eval(ctx, `if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSETNX', KEYS[1], 'ucpu', ARGV[1]); redis.call('HSETNX', KEYS[1], 'umem', ARGV[2]) end return 1`,
			[]string{s.sandboxKey(tenant, ids[i])}, cpu, mem)
		n++
	}
	if n == 0 {
		return nil
	}
	_, err = fix.Exec(ctx)
	return wrap(err)
}
