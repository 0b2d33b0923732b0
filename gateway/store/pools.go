package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

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
// pool's ready list and allocated set, and the tenant's warm members (layout.go).
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
		n, err := createFieldScript.Run(ctx, s, []string{s.poolsKey(p.Tenant)}, p.Name, body).Int()
		if err != nil {
			return wrap(err)
		}
		if n != 1 {
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

var addWarmScript = newOpScript(`
-- KEYS: record, ready, warmSet, pools, (op token); ARGV: json, id, tenant, poolKey, cpuMillis, memoryBytes, poolName
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
	n, err := addWarmScript.Run(ctx, s, []string{s.sandboxKey(sb.Tenant, sb.ID), s.readyKey(sb.Tenant, sb.Pool), s.warmSetKey(sb.Tenant), s.poolsKey(sb.Tenant)},
		body, sb.ID, sb.Tenant, PoolKey(sb.Tenant, sb.Pool), cpu, mem, sb.Pool).Int()
	if wrote && (err != nil || n != 1) {
		_ = s.dropLocator(ctx, locSandbox, sb.ID, sb.Tenant)
	}
	if err == nil && n == 1 {
		w := *sb
		w.Rev = 1
		s.warm.put(&w, body)
	}
	return n == 1, wrap(err)
}

var removeWarmScript = newOpScript(`
-- KEYS: record, ready, warmSet, (op token); ARGV: id
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
if removed > 0 then redis.call('DEL', KEYS[1]) end
return removed
`)

// RemoveWarm takes an unclaimed member out of its pool; false when it was claimed meanwhile.
func (s *Store) RemoveWarm(ctx context.Context, tenant, pool, id string) (bool, error) {
	s.warm.drop(id)
	n, err := removeWarmScript.Run(ctx, s, []string{s.sandboxKey(tenant, id), s.readyKey(tenant, pool), s.warmSetKey(tenant)}, id).Int()
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
//
// ARGV[8…] are triples (id, rev, claimed JSON) the gateway prepared for members it knows
// (warmCache): a member popped whose record is still at that rev gets the prepared body
// as it is, without the decode, patch and encode of its record in Lua. Any other member
// is patched here. Each member is returned as two entries, its id and its new JSON (""
// when it was the prepared one, which the caller holds already).
var claimScript = redis.NewScript(`
-- KEYS: ready, warmSet, alloc, tenantIndex, expiry, tenantUsage, done (this claim's token)
-- ARGV: n, patchJSON, createdMs, expiresMs ('' = none), recordPrefix, tenant, poolKey,
--       then per prepared member: id, rev, claimed JSON
local done = redis.call('GET', KEYS[7])
if done then
  -- This claim ran already; the client sent it again (its answer came after the read
  -- deadline). The same members are the answer: each '+id' (prepared) or '-id'.
  local again = {}
  for m in string.gmatch(done, '[^\n]+') do
    local id = string.sub(m, 2)
    if string.sub(m, 1, 1) == '+' then
      again[#again + 1] = id
      again[#again + 1] = ''
    else
      local js = redis.call('HGET', ARGV[5] .. id, 'json')
      if js then
        again[#again + 1] = id
        again[#again + 1] = js
      end
    end
  end
  return again
end
local popped = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not popped then return {} end
local prepared = {}
for i = 8, #ARGV, 3 do prepared[ARGV[i]] = i end
local patch
local out, bound, expiring, use, marks = {}, {}, {}, {}, {}
for _, id in ipairs(popped) do
  local key = ARGV[5] .. id
  local v = redis.call('HMGET', key, 'rev', 'ucpu', 'umem')
  local p = prepared[id]
  local js
  if p and v[1] == ARGV[p + 1] then
    -- A prepared record: unchanged since this pool of this tenant had it added, so its
    -- tenant and pool fields are the claim's already.
    js = ARGV[p + 2]
    redis.call('HSET', key, 'json', js, 'rev', v[1] + 1)
    out[#out + 1] = id
    out[#out + 1] = ''
    marks[#marks + 1] = '+' .. id
  else
    local body = redis.call('HGET', key, 'json')
    if body then
      if not patch then patch = cjson.decode(ARGV[2]) end
      local sb = cjson.decode(body)
      for k, x in pairs(patch) do sb[k] = x end
      sb['rev'] = tonumber(v[1] or '0') + 1
      js = cjson.encode(sb)
      redis.call('HSET', key, 'json', js, 'rev', tonumber(v[1] or '0') + 1, 'tenant', ARGV[6], 'pool', ARGV[7])
      out[#out + 1] = id
      out[#out + 1] = js
      marks[#marks + 1] = '-' .. id
    end
  end
  if js then
    bound[#bound + 1] = id
    use[#bound] = v
    expiring[#expiring + 1] = ARGV[4]
    expiring[#expiring + 1] = id
  end
end
-- The set commands take the members in chunks (Lua's stack bounds unpack). A member
-- counts towards the tenant's usage once: when it joins the tenant's index.
local sn, scpu, smem, counted = 0, 0, 0, {}
for i = 1, #bound, 500 do
  local j = math.min(i + 499, #bound)
  local scores = redis.call('ZMSCORE', KEYS[4], unpack(bound, i, j))
  local add = {}
  for k = i, j do
    if not scores[k - i + 1] and not counted[bound[k]] then
      counted[bound[k]] = true
      add[#add + 1] = ARGV[3]
      add[#add + 1] = bound[k]
      sn = sn + 1
      scpu = scpu + tonumber(use[k][2] or '0')
      smem = smem + tonumber(use[k][3] or '0')
    end
  end
  if #add > 0 then redis.call('ZADD', KEYS[4], unpack(add)) end
end
for i = 1, #popped, 500 do redis.call('SREM', KEYS[2], unpack(popped, i, math.min(i + 499, #popped))) end
for i = 1, #bound, 500 do redis.call('SADD', KEYS[3], unpack(bound, i, math.min(i + 499, #bound))) end
if ARGV[4] ~= '' then
  for i = 1, #expiring, 1000 do redis.call('ZADD', KEYS[5], unpack(expiring, i, math.min(i + 999, #expiring))) end
end
if sn ~= 0 then redis.call('HINCRBY', KEYS[6], 'sandboxes', sn) end
if scpu ~= 0 then redis.call('HINCRBY', KEYS[6], 'cpu', scpu) end
if smem ~= 0 then redis.call('HINCRBY', KEYS[6], 'mem', smem) end
if #marks > 0 then redis.call('SET', KEYS[7], table.concat(marks, '\n'), 'PX', ` + opTTL + `) end
return out
`)

// ClaimPatch holds the fields a claim writes into each warm record, by their JSON names.
type ClaimPatch map[string]any

// applyTo sets the patch's fields on sb as the claim script's patch of the record's
// JSON would; false when the patch holds a field or a type it does not know (the
// script then patches the record).
func (p ClaimPatch) applyTo(sb *Sandbox) bool {
	for k, v := range p {
		ok := true
		switch k {
		case "tenant":
			sb.Tenant, ok = v.(string)
		case "state":
			sb.State, ok = v.(string)
		case "batch":
			sb.Batch, ok = v.(string)
		case "metadata":
			sb.Metadata, ok = v.(map[string]string)
		case "extensions":
			sb.Extensions, ok = v.(map[string]string)
		case "entrypoint":
			sb.Entrypoint, ok = v.([]string)
		case "lateBind":
			sb.LateBind, ok = v.(*LateBind)
		case "createdAt", "lastTransitionAt", "expiresAt":
			var t time.Time
			if t, ok = v.(time.Time); !ok {
				break
			}
			t = t.Round(0)
			switch k {
			case "createdAt":
				sb.CreatedAt = t
			case "lastTransitionAt":
				sb.LastTransitionAt = t
			default:
				sb.ExpiresAt = &t
			}
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return true
}

// warmCache holds the warm records this process added (AddWarm) as it wrote them, so
// that a claim of them can write and return each claimed record without decoding it
// (in the script, then again here): at 1000 members that decoding was most of a
// batch's bound time. An entry is only a guess: the script uses the prepared body only
// when the record is still at the entry's rev.
type warmCache struct {
	mu sync.Mutex
	m  map[string]*warmEntry
	// order lists each pool's members (by PoolKey) in the order this process added
	// them, the order AddWarm pushed them onto the pool's ready list: its head is what a
	// claim pops next, when no other gateway adds to the pool, so that a claim prepares
	// without asking Redis for the head (takeHead). Ids whose entries are gone are
	// skipped there, and compacted away when they pile up.
	order map[string][]string
}

// warmEntry is a warm record with its JSON split at AddWarm (off any claim's path), so
// that a claim splices the claimed record's JSON instead of encoding it: the members the
// claim does not touch are copied as they are (rest), the fields it writes come from the
// claim's patch, encoded once for all its members (claimJSON), or else from the record
// (own).
type warmEntry struct {
	sb *Sandbox
	// misses counts the claims that prepared the entry and did not pop it (putBack).
	misses int
	rest   []byte       // the record's JSON members but claimFields, comma-separated
	own    []jsonMember // the record's values of claimFields (rev aside), by name
}

// jsonMember is one `"name":value` of a JSON object, encoded.
type jsonMember struct {
	name    string
	encoded []byte
}

// claimFields are the record fields (JSON names) a claim writes: the ClaimPatch keys
// applyTo knows, and rev. A prepared body takes them from the claim or the record and
// everything else from the record's rest.
var claimFields = map[string]bool{"tenant": true, "state": true, "batch": true, "metadata": true, "extensions": true,
	"entrypoint": true, "lateBind": true, "createdAt": true, "lastTransitionAt": true, "expiresAt": true, "rev": true}

// newWarmEntry splits body, sb's JSON, into the parts of a warmEntry.
func newWarmEntry(sb *Sandbox, body []byte) (*warmEntry, error) {
	members, err := splitObject(body)
	if err != nil {
		return nil, err
	}
	e := &warmEntry{sb: sb}
	for _, m := range members {
		switch {
		case m.name == "rev":
		case claimFields[m.name]:
			e.own = append(e.own, m)
		default:
			if len(e.rest) > 0 {
				e.rest = append(e.rest, ',')
			}
			e.rest = append(e.rest, m.encoded...)
		}
	}
	return e, nil
}

// splitObject returns the members of a JSON object, each encoded, sorted by name.
func splitObject(body []byte) ([]jsonMember, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	out := make([]jsonMember, 0, len(m))
	for name, v := range m {
		q, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		out = append(out, jsonMember{name: name, encoded: append(append(q, ':'), v...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// claimJSON encodes the fields of a claim's patch as the record's JSON members
// (comma-terminated), as encoding a Sandbox with them set would: a field the record's
// encoding leaves out (omitempty) is left out here too. False when the patch holds a
// field a prepared body cannot take.
func (p ClaimPatch) claimJSON() ([]byte, bool) {
	for k := range p {
		if !claimFields[k] || k == "rev" {
			return nil, false
		}
	}
	var z Sandbox
	if !p.applyTo(&z) {
		return nil, false
	}
	body, err := json.Marshal(&z)
	if err != nil {
		return nil, false
	}
	members, err := splitObject(body)
	if err != nil {
		return nil, false
	}
	var out []byte
	for _, m := range members {
		if _, ok := p[m.name]; ok {
			out = append(append(out, m.encoded...), ',')
		}
	}
	return out, true
}

// claimedBody is the JSON of e's record with a claim's fields (patch, encoded as
// claimJSON) and its new rev: the same record as encoding the claimed Sandbox, its
// members in another order.
func (e *warmEntry) claimedBody(patch ClaimPatch, claimed []byte, rev int64) []byte {
	buf := make([]byte, 0, len(claimed)+len(e.rest)+256)
	buf = append(buf, '{')
	buf = append(buf, claimed...)
	for _, m := range e.own {
		if _, ok := patch[m.name]; !ok {
			buf = append(append(buf, m.encoded...), ',')
		}
	}
	buf = append(buf, `"rev":`...)
	buf = strconv.AppendInt(buf, rev, 10)
	if len(e.rest) > 0 {
		buf = append(append(buf, ','), e.rest...)
	}
	return append(buf, '}')
}

// warmCacheMax bounds the cache; members claimed or removed through other gateways
// leave entries behind, and past the bound it starts afresh.
const warmCacheMax = 50000

// put caches sb, written as body. A body that does not split is not cached (its claim
// patches it in the script).
func (c *warmCache) put(sb *Sandbox, body []byte) {
	e, err := newWarmEntry(sb, body)
	if err != nil {
		return
	}
	pk := PoolKey(sb.Tenant, sb.Pool)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= warmCacheMax {
		c.m = make(map[string]*warmEntry)
		c.order = make(map[string][]string)
	}
	c.m[sb.ID] = e
	q := append(c.order[pk], sb.ID)
	if len(q) > 1024 && len(q) > 4*len(c.m) {
		// Mostly ids whose entries are gone (removed, claimed through other gateways).
		live := q[:0]
		for _, id := range q {
			if _, ok := c.m[id]; ok {
				live = append(live, id)
			}
		}
		q = live
	}
	c.order[pk] = q
}

// takeHead returns and forgets the entries of the first n members of pool pk this
// process added and still holds, oldest first.
func (c *warmCache) takeHead(pk string, n int) ([]string, map[string]*warmEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.order[pk]
	ids := make([]string, 0, min(n, len(q)))
	known := make(map[string]*warmEntry, min(n, len(q)))
	i := 0
	for ; i < len(q) && len(ids) < n; i++ {
		if e, ok := c.m[q[i]]; ok {
			ids = append(ids, q[i])
			known[q[i]] = e
			delete(c.m, q[i])
		}
	}
	c.order[pk] = q[i:]
	return ids, known
}

// putBack returns to the head of pool pk's order the entries a claim prepared but did
// not pop (another claim, or another gateway, took them or others first). An entry that
// missed twice is dropped: its member is likely gone from the pool, and a claim that
// prepares it again only carries it along.
func (c *warmCache) putBack(pk string, ids []string, entries map[string]*warmEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		return
	}
	back := make([]string, 0, len(ids)+len(c.order[pk]))
	for _, id := range ids {
		e := entries[id]
		if e == nil || e.misses >= 2 {
			continue
		}
		e.misses++
		c.m[id] = e
		back = append(back, id)
	}
	c.order[pk] = append(back, c.order[pk]...)
}

// take returns and forgets the entries of ids.
func (c *warmCache) take(ids []string) map[string]*warmEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*warmEntry, len(ids))
	for _, id := range ids {
		if e, ok := c.m[id]; ok {
			out[id] = e
			delete(c.m, id)
		}
	}
	return out
}

func (c *warmCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (c *warmCache) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m) == 0
}

// Claim binds up to n warm sandboxes of a pool to a tenant and returns them: one script
// when the pool is the tenant's own, claimAcross otherwise.
func (s *Store) Claim(ctx context.Context, poolTenant, pool, tenant string, n int, patch ClaimPatch, createdMs int64, expiresMs string) ([]*Sandbox, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	if poolTenant != tenant {
		res, err := s.claimAcross(ctx, poolTenant, pool, tenant, n, body, createdMs, expiresMs)
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, wrap(err)
		}
		return decodeClaimed(res, nil)
	}
	args := []any{n, body, createdMs, expiresMs, s.recordPrefix(tenant), tenant, PoolKey(poolTenant, pool)}
	prep, args := s.prepareClaim(tenant, pool, n, patch, args)
	// The claim's token key makes it idempotent (opscript.go): the client sends a command
	// again when its answer misses the read deadline (a busy Redis), and a second run of
	// the script would bind more members while those of the first were never returned.
	keys := []string{s.readyKey(tenant, pool), s.warmSetKey(tenant), s.allocKey(tenant, pool), s.tenantIndex(tenant), s.expiryKey(tenant), s.usageKey(tenant), ""}
	keys[6] = s.opKey(keys[0])
	res, err := claimScript.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		// Whether the script ran is unknown: the entries are not put back (a claim
		// that bound them would leave them stale; one that did not, only slower).
		return nil, wrap(err)
	}
	prep.putBack(s, res)
	out := make([]*Sandbox, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, js := res[i], res[i+1]
		if js == "" {
			if sb := prep.sandbox(id); sb != nil {
				out = append(out, sb)
				continue
			}
			return nil, fmt.Errorf("claimed sandbox %s: no prepared record", id)
		}
		got, err := decodeClaimed([]string{js}, out)
		if err != nil {
			return nil, err
		}
		out = got
	}
	return out, nil
}

// preparedClaim is what prepareClaim prepared: the claimed records by id, and the
// cache entries they came from, in the order they were taken.
type preparedClaim struct {
	pk        string
	sandboxes map[string]*Sandbox
	ids       []string
	entries   map[string]*warmEntry
}

// prepareClaim builds the claimed records of the members a claim of n is about to pop
// that this process added, and appends them to the script's args: the head of the
// pool's ready list is the head of the cache's order of the pool (takeHead) when this
// process alone adds to it (it runs the pool manager). It costs no round trip (an
// LRANGE of the head cost one, more than the patches it saved on a small claim), and
// nothing when the cache is empty (the pool manager runs on another gateway); members
// popped that it did not prepare are patched by the script.
func (s *Store) prepareClaim(tenant, pool string, n int, patch ClaimPatch, args []any) (*preparedClaim, []any) {
	if s.warm.empty() {
		return nil, args
	}
	claimed, ok := patch.claimJSON()
	if !ok {
		return nil, args
	}
	pk := PoolKey(tenant, pool)
	ids, known := s.warm.takeHead(pk, n)
	if len(ids) == 0 {
		return nil, args
	}
	p := &preparedClaim{pk: pk, sandboxes: make(map[string]*Sandbox, len(ids)), ids: ids, entries: known}
	for _, id := range ids {
		e := known[id]
		sb := *e.sb
		if !patch.applyTo(&sb) {
			return nil, args[:7]
		}
		sb.Rev = e.sb.Rev + 1
		p.sandboxes[id] = &sb
		args = append(args, id, e.sb.Rev, e.claimedBody(patch, claimed, sb.Rev))
	}
	return p, args
}

// sandbox returns the prepared record of id, if any.
func (p *preparedClaim) sandbox(id string) *Sandbox {
	if p == nil {
		return nil
	}
	return p.sandboxes[id]
}

// putBack gives the cache back the entries p prepared whose members the claim did not
// pop (res: the script's answer, id and JSON pairs).
func (p *preparedClaim) putBack(s *Store, res []string) {
	if p == nil {
		return
	}
	popped := make(map[string]bool, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		popped[res[i]] = true
	}
	var missed []string
	for _, id := range p.ids {
		if !popped[id] {
			missed = append(missed, id)
		}
	}
	if len(missed) > 0 {
		s.warm.putBack(p.pk, missed, p.entries)
	}
}

func decodeClaimed(res []string, out []*Sandbox) ([]*Sandbox, error) {
	if out == nil {
		out = make([]*Sandbox, 0, len(res))
	}
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
