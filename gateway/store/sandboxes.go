package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sandbox is the record the gateway keeps for one sandbox: who owns it, when it dies,
// and how to reach it. The runtime is the truth about whether it exists.
type Sandbox struct {
	ID               string            `json:"id"`
	Tenant           string            `json:"tenant"`
	Image            string            `json:"image"`
	Entrypoint       []string          `json:"entrypoint"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	ResourceLimits   map[string]string `json:"resourceLimits,omitempty"`
	Extensions       map[string]string `json:"extensions,omitempty"`
	State            string            `json:"state"`
	Reason           string            `json:"reason,omitempty"`
	Message          string            `json:"message,omitempty"`
	LastTransitionAt time.Time         `json:"lastTransitionAt"`
	CreatedAt        time.Time         `json:"createdAt"`
	ExpiresAt        *time.Time        `json:"expiresAt,omitempty"`
	Address          string            `json:"address,omitempty"`
	AgentToken       string            `json:"agentToken,omitempty"`
	EgressToken      string            `json:"egressToken,omitempty"`
	AccessToken      string            `json:"accessToken,omitempty"`
	Pool             string            `json:"pool,omitempty"`
	Batch            string            `json:"batch,omitempty"`
	// EgressPolicy is the effective egress policy its enforcer last accepted (at create,
	// claim or through the egress API): what a restored enforcer starts with.
	EgressPolicy json.RawMessage `json:"egressPolicy,omitempty"`
	// Owner names the gateway whose create is making this sandbox while it is Pending;
	// when that gateway's heartbeat lapses, another takes the record over (Alive).
	Owner string `json:"owner,omitempty"`
	// PoolVersion is the template version a warm sandbox was built from.
	PoolVersion int64 `json:"poolVersion,omitempty"`
	// LateBind is what a claim left to apply through the member's agent and enforcer
	// (env, entrypoint, egress policy); the gateway clears it once applied, and a
	// member's first call waits for it.
	LateBind *LateBind `json:"lateBind,omitempty"`
	// Rev counts updates; Update refuses a write based on a stale read.
	Rev int64 `json:"rev"`
}

// LateBind is a claim's settings still to be applied to a claimed pool member.
type LateBind struct {
	Env        map[string]string `json:"env,omitempty"`
	Entrypoint bool              `json:"entrypoint,omitempty"`
	// NetworkPolicy is the claim's networkPolicy as JSON text (a string, so that the
	// claim script's cjson round trip cannot change its shape).
	NetworkPolicy string `json:"networkPolicy,omitempty"`
}

// Each sandbox is a hash {json, rev, tenant}; the tenant index and the global index are
// sorted sets by creation time (newest first on read); the expiry schedule is a sorted set
// by expiresAt. The scripts keep the four in step.
var putScript = redis.NewScript(`
-- KEYS: record, tenantIndex, allIndex, expiry, tenantUsage
-- ARGV: json, id, createdMs, expiresMs ('' = none), expectedRev ('' = create), tenant, maxConcurrent ('' = none),
--       cpuMillis, memoryBytes
local cur = redis.call('HGET', KEYS[1], 'rev')
if ARGV[5] == '' then
  if cur then return -1 end
  -- The concurrency quota holds even when several gateways create at once.
  if ARGV[7] ~= '' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[7]) then return -4 end
else
  if not cur then return -2 end
  if cur ~= ARGV[5] then return -3 end
end
local rev = 1
if cur then rev = tonumber(cur) + 1 end
local oldCPU = tonumber(redis.call('HGET', KEYS[1], 'ucpu') or '0')
local oldMem = tonumber(redis.call('HGET', KEYS[1], 'umem') or '0')
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'rev', rev, 'tenant', ARGV[6], 'ucpu', ARGV[8], 'umem', ARGV[9])
-- The tenant's usage counters move with its index (admission reads them, never a list).
if redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[5], 'sandboxes', 1)
  oldCPU, oldMem = 0, 0
end
if tonumber(ARGV[8]) ~= oldCPU then redis.call('HINCRBY', KEYS[5], 'cpu', tonumber(ARGV[8]) - oldCPU) end
if tonumber(ARGV[9]) ~= oldMem then redis.call('HINCRBY', KEYS[5], 'mem', tonumber(ARGV[9]) - oldMem) end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[4], ARGV[2])
else
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
end
return rev
`)

var deleteScript = redis.NewScript(`
-- KEYS: record, allIndex, expiry; ARGV: id, tenantKeyPrefix, poolPrefix
local tenant = redis.call('HGET', KEYS[1], 'tenant')
if not tenant then return 0 end
local pool = redis.call('HGET', KEYS[1], 'pool')
if pool then redis.call('SREM', ARGV[3] .. pool .. ':allocated', ARGV[1]) end
local cpu = tonumber(redis.call('HGET', KEYS[1], 'ucpu') or '0')
local mem = tonumber(redis.call('HGET', KEYS[1], 'umem') or '0')
redis.call('DEL', KEYS[1])
if redis.call('ZREM', ARGV[2] .. tenant .. ':sandboxes', ARGV[1]) == 1 then
  local usage = ARGV[2] .. tenant .. ':usage'
  redis.call('HINCRBY', usage, 'sandboxes', -1)
  if cpu ~= 0 then redis.call('HINCRBY', usage, 'cpu', -cpu) end
  if mem ~= 0 then redis.call('HINCRBY', usage, 'mem', -mem) end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

func (s *Store) sandboxKey(id string) string      { return s.Key("sandbox", id) }
func (s *Store) tenantIndex(tenant string) string { return s.Key("tenant", tenant, "sandboxes") }
func (s *Store) allIndex() string                 { return s.Key("sandboxes") }
func (s *Store) usageKey(tenant string) string    { return s.Key("tenant", tenant, "usage") }
func (s *Store) expiryKey() string                { return s.Key("expiry") }

// ErrQuota reports a tenant at its concurrent-sandbox limit.
var ErrQuota = errors.New("concurrent sandbox quota reached")

// CreateSandbox writes a new record; ErrConflict if the id exists, ErrQuota if the
// tenant already holds maxConcurrent sandboxes (0 = no limit).
func (s *Store) CreateSandbox(ctx context.Context, sb *Sandbox, maxConcurrent int64) error {
	limit := ""
	if maxConcurrent > 0 {
		limit = strconv.FormatInt(maxConcurrent, 10)
	}
	return s.writeSandbox(ctx, sb, "", limit)
}

// UpdateSandbox writes sb if nobody changed it since it was read (sb.Rev).
func (s *Store) UpdateSandbox(ctx context.Context, sb *Sandbox) error {
	return s.writeSandbox(ctx, sb, strconv.FormatInt(sb.Rev, 10), "")
}

func (s *Store) writeSandbox(ctx context.Context, sb *Sandbox, expectedRev, maxConcurrent string) error {
	body, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("encode sandbox: %w", err)
	}
	expires := ""
	if sb.ExpiresAt != nil {
		expires = strconv.FormatInt(sb.ExpiresAt.UnixMilli(), 10)
	}
	keys := []string{s.sandboxKey(sb.ID), s.tenantIndex(sb.Tenant), s.allIndex(), s.expiryKey(), s.usageKey(sb.Tenant)}
	cpu, mem := s.measure(sb)
	rev, err := putScript.Run(ctx, s.rdb, keys, body, sb.ID, sb.CreatedAt.UnixMilli(), expires, expectedRev, sb.Tenant, maxConcurrent, cpu, mem).Int64()
	if err != nil {
		return wrap(err)
	}
	switch rev {
	case -1, -3:
		return fmt.Errorf("sandbox %s: %w", sb.ID, ErrConflict)
	case -2:
		return fmt.Errorf("sandbox %s: %w", sb.ID, ErrNotFound)
	case -4:
		return fmt.Errorf("tenant %s: %w", sb.Tenant, ErrQuota)
	}
	sb.Rev = rev
	// Cached routes of this sandbox are stale now, and live lists (the watch API) show
	// the change, a new record included.
	_ = s.PublishChange(ctx, sb.ID)
	return nil
}

// ModifySandbox applies fn to the current record and writes it back, retrying when
// another writer got there first. fn may return an error to abort.
func (s *Store) ModifySandbox(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	for attempt := 0; attempt < 20; attempt++ {
		sb, err := s.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(sb); err != nil {
			return nil, err
		}
		err = s.UpdateSandbox(ctx, sb)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return sb, nil
	}
	return nil, fmt.Errorf("sandbox %s: %w after retries", id, ErrConflict)
}

// GetSandbox reads one record.
func (s *Store) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	vals, err := s.rdb.HMGet(ctx, s.sandboxKey(id), "json", "rev").Result()
	if err != nil {
		return nil, wrap(err)
	}
	if vals[0] == nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	return decodeSandbox(vals[0], vals[1])
}

func decodeSandbox(body, rev any) (*Sandbox, error) {
	str, _ := body.(string)
	var sb Sandbox
	if err := json.Unmarshal([]byte(str), &sb); err != nil {
		return nil, fmt.Errorf("decode sandbox record: %w", err)
	}
	if r, ok := rev.(string); ok {
		sb.Rev, _ = strconv.ParseInt(r, 10, 64)
	}
	return &sb, nil
}

// DeleteSandbox removes a record and its index entries; a missing record is not an error.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	err := deleteScript.Run(ctx, s.rdb, []string{s.sandboxKey(id), s.allIndex(), s.expiryKey()}, id, s.Key("tenant")+":", s.Key("pool")+":").Err()
	if err == nil {
		_ = s.PublishChange(ctx, id)
	}
	return wrap(err)
}

// ListSandboxes returns the records of one tenant (all tenants when tenant is ""), newest first.
func (s *Store) ListSandboxes(ctx context.Context, tenant string) ([]*Sandbox, error) {
	index := s.allIndex()
	if tenant != "" {
		index = s.tenantIndex(tenant)
	}
	ids, err := s.rdb.ZRevRange(ctx, index, 0, -1).Result()
	if err != nil {
		return nil, wrap(err)
	}
	return s.getMany(ctx, ids)
}

func (s *Store) getMany(ctx context.Context, ids []string) ([]*Sandbox, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.sandboxKey(id), "json", "rev")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	out := make([]*Sandbox, 0, len(ids))
	for _, c := range cmds {
		vals := c.Val()
		if len(vals) < 2 || vals[0] == nil {
			continue // deleted between the index read and now
		}
		sb, err := decodeSandbox(vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, nil
}

// ExpiredSandboxes returns the ids whose expiry is at or before now.
func (s *Store) ExpiredSandboxes(ctx context.Context, now time.Time, limit int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.expiryKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: limit,
	}).Result()
	return ids, wrap(err)
}
