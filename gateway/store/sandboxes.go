package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
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
	// AgentAuth is AgentAuthSigned for a sandbox whose agent takes signed calls; empty
	// for one made by a gateway that predates them, whose agent takes its token itself.
	AgentAuth   string `json:"agentAuth,omitempty"`
	EgressToken string `json:"egressToken,omitempty"`
	AccessToken string `json:"accessToken,omitempty"`
	Pool        string `json:"pool,omitempty"`
	Batch       string `json:"batch,omitempty"`
	// SnapshotID is the snapshot the sandbox was created from (POST /v1/sandboxes with
	// snapshotId).
	SnapshotID string `json:"snapshotId,omitempty"`
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

// Each sandbox is a hash {json, rev, tenant, pool, ucpu, umem} in its tenant's slot;
// the tenant's index is a sorted set by creation time (newest first on read) and its
// expiry schedule a sorted set by expiresAt. The scripts keep them and the usage
// counters in step, all in the tenant's slot (layout.go).
var putScript = newOpScript(`
-- KEYS: record, tenantIndex, expiry, tenantUsage, (op token, opScript)
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
  redis.call('HINCRBY', KEYS[4], 'sandboxes', 1)
  oldCPU, oldMem = 0, 0
end
if tonumber(ARGV[8]) ~= oldCPU then redis.call('HINCRBY', KEYS[4], 'cpu', tonumber(ARGV[8]) - oldCPU) end
if tonumber(ARGV[9]) ~= oldMem then redis.call('HINCRBY', KEYS[4], 'mem', tonumber(ARGV[9]) - oldMem) end
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[3], ARGV[2])
else
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
end
return rev
`)

// deleteScript removes a record from its tenant's slot. A claimed pool member leaves
// its pool's allocated set here when the pool is the tenant's own (same slot; the key
// is derived from the tenant's tag); the pool of another tenant is returned, and the
// caller takes the member out of that set with a command of its own.
var deleteScript = newOpScript(`
-- KEYS: record, tenantIndex, expiry, tenantUsage, (op token); ARGV: id, tenant, poolPrefix (the tenant's)
local tenant = redis.call('HGET', KEYS[1], 'tenant')
if not tenant then return {0, ''} end
local other = ''
local pool = redis.call('HGET', KEYS[1], 'pool')
if pool then
  local pt, pn = string.match(pool, '^([^/]*)/(.*)$')
  if pt == ARGV[2] then
    redis.call('SREM', ARGV[3] .. pn .. ':allocated', ARGV[1])
  elseif pt then
    other = pool
  end
end
local cpu = tonumber(redis.call('HGET', KEYS[1], 'ucpu') or '0')
local mem = tonumber(redis.call('HGET', KEYS[1], 'umem') or '0')
redis.call('DEL', KEYS[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[4], 'sandboxes', -1)
  if cpu ~= 0 then redis.call('HINCRBY', KEYS[4], 'cpu', -cpu) end
  if mem ~= 0 then redis.call('HINCRBY', KEYS[4], 'mem', -mem) end
end
redis.call('ZREM', KEYS[3], ARGV[1])
return {1, other}
`)

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
	if sb.Tenant == "" {
		return fmt.Errorf("sandbox %s: no tenant", sb.ID)
	}
	wroteLoc := false
	if expectedRev == "" {
		// A new record: its id must name its tenant's slot before anyone looks it up.
		if err := s.markActive(ctx, sb.Tenant); err != nil {
			return err
		}
		if wroteLoc, err = s.claimLocator(ctx, locSandbox, sb.ID, sb.Tenant); err != nil {
			return err
		}
	} else if t, err := s.locate(ctx, locSandbox, sb.ID); err != nil {
		return err
	} else if t != sb.Tenant {
		return fmt.Errorf("sandbox %s: its record is tenant %s's, not %s's: %w", sb.ID, t, sb.Tenant, ErrConflict)
	}
	keys := []string{s.sandboxKey(sb.Tenant, sb.ID), s.tenantIndex(sb.Tenant), s.expiryKey(sb.Tenant), s.usageKey(sb.Tenant)}
	cpu, mem := s.measure(sb)
	rev, err := putScript.Run(ctx, s, keys, body, sb.ID, sb.CreatedAt.UnixMilli(), expires, expectedRev, sb.Tenant, maxConcurrent, cpu, mem).Int64()
	if wroteLoc && (err != nil || rev < 0) {
		_ = s.dropLocator(ctx, locSandbox, sb.ID, sb.Tenant)
	}
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
	_, cached := s.locs.get(locSandbox, id)
	for attempt := 0; attempt < 2; attempt++ {
		tenant, err := s.locate(ctx, locSandbox, id)
		if err != nil {
			return nil, err
		}
		vals, err := s.rdb.HMGet(ctx, s.sandboxKey(tenant, id), "json", "rev").Result()
		if err != nil {
			return nil, wrap(err)
		}
		if vals[0] != nil {
			return decodeSandbox(vals[0], vals[1])
		}
		if !cached {
			break
		}
		// A cached locator may be stale (a cross-tenant claim moved the record).
		s.locs.drop(locSandbox, id)
		cached = false
	}
	return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
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
	_, err := s.RemoveSandbox(ctx, id)
	return err
}

// RemoveSandbox is DeleteSandbox that also reports whether this call removed the record
// (false: there was none), so that of several removals of one sandbox exactly one
// announces it. A record removed whose follow-up steps failed reports true with the error.
func (s *Store) RemoveSandbox(ctx context.Context, id string) (removed bool, err error) {
	tenant, err := s.locate(ctx, locSandbox, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	keys := []string{s.sandboxKey(tenant, id), s.tenantIndex(tenant), s.expiryKey(tenant), s.usageKey(tenant)}
	res, err := deleteScript.Run(ctx, s, keys, id, tenant, s.tkey(tenant, "pool")+":").Slice()
	if err != nil {
		return false, wrap(err)
	}
	n, _ := res[0].(int64)
	removed = n == 1
	if len(res) == 2 {
		if other, _ := res[1].(string); other != "" {
			// A member claimed from another tenant's pool leaves that pool's set too.
			if pt, pn, ok := strings.Cut(other, "/"); ok {
				if err := s.rdb.SRem(ctx, s.allocKey(pt, pn), id).Err(); err != nil {
					return removed, wrap(err)
				}
			}
		}
	}
	// The locator goes with the record (one whose record the script did not find stays:
	// it may be a create's between its locator and its script), and
	// the change is announced, in one round trip.
	s.locs.drop(locSandbox, id)
	pipe := s.rdb.Pipeline()
	if removed {
		pipe.Del(ctx, s.locKey(locSandbox, id))
	}
	pipe.Publish(ctx, s.changesChannel(), id)
	_, err = pipe.Exec(ctx)
	return removed, wrap(err)
}

// ListSandboxes returns the records of one tenant (all tenants when tenant is ""), newest first.
func (s *Store) ListSandboxes(ctx context.Context, tenant string) ([]*Sandbox, error) {
	tenants := []string{tenant}
	if tenant == "" {
		var err error
		if tenants, err = s.activeTenants(ctx); err != nil {
			return nil, err
		}
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(tenants))
	for i, t := range tenants {
		cmds[i] = pipe.ZRevRange(ctx, s.tenantIndex(t), 0, -1)
	}
	if len(tenants) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, wrap(err)
		}
	}
	var refs []recordRef
	for i, t := range tenants {
		for _, id := range cmds[i].Val() {
			refs = append(refs, recordRef{t, id})
		}
	}
	out, err := s.getMany(ctx, refs)
	if err != nil {
		return nil, err
	}
	if len(tenants) > 1 {
		sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	}
	return out, nil
}

// recordRef names a record: its tenant (slot) and id.
type recordRef struct{ tenant, id string }

func (s *Store) getMany(ctx context.Context, refs []recordRef) ([]*Sandbox, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.HMGet(ctx, s.sandboxKey(r.tenant, r.id), "json", "rev")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	out := make([]*Sandbox, 0, len(refs))
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

// ExpiredSandboxes returns the ids whose expiry is at or before now, from every
// tenant's schedule (up to limit of each).
func (s *Store) ExpiredSandboxes(ctx context.Context, now time.Time, limit int64) ([]string, error) {
	tenants, err := s.activeTenants(ctx)
	if err != nil || len(tenants) == 0 {
		return nil, err
	}
	cmds, err := perTenant(ctx, s, tenants, func(p redis.Pipeliner, t string) *redis.StringSliceCmd {
		return p.ZRangeByScore(ctx, s.expiryKey(t), &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: limit,
		})
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for i, t := range tenants {
		for _, id := range cmds[i].Val() {
			s.locs.put(locSandbox, id, t)
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// AgentAuthSigned is Sandbox.AgentAuth of a sandbox whose agent takes signed calls.
const AgentAuthSigned = "signed"

// AgentCredential is what calls sb's agent (package agentauth): its token, marked
// legacy for an agent that predates signed calls.
func (sb *Sandbox) AgentCredential() string {
	if sb.AgentAuth == AgentAuthSigned || sb.AgentToken == "" {
		return sb.AgentToken
	}
	return agentauth.Legacy(sb.AgentToken)
}

// GetSandboxes reads several records (one round trip for the records, one more for the
// locators this process has not cached); missing ones are skipped.
func (s *Store) GetSandboxes(ctx context.Context, ids []string) ([]*Sandbox, error) {
	refs := make([]recordRef, 0, len(ids))
	var unknown []string
	for _, id := range ids {
		if t, ok := s.locs.get(locSandbox, id); ok {
			refs = append(refs, recordRef{t, id})
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(unknown))
		for i, id := range unknown {
			cmds[i] = pipe.Get(ctx, s.locKey(locSandbox, id))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, wrap(err)
		}
		for i, id := range unknown {
			if t := cmds[i].Val(); t != "" {
				s.locs.put(locSandbox, id, t)
				refs = append(refs, recordRef{t, id})
			}
		}
	}
	out, err := s.getMany(ctx, refs)
	if err != nil || len(out) == len(ids) || len(unknown) == len(ids) {
		return out, err
	}
	// A cached locator may be stale: read the missing ones afresh, one by one.
	got := make(map[string]bool, len(out))
	for _, sb := range out {
		got[sb.ID] = true
	}
	for _, r := range refs {
		if got[r.id] {
			continue
		}
		if sb, err := s.GetSandbox(ctx, r.id); err == nil {
			out = append(out, sb)
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	return out, nil
}
