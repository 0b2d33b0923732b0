package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Key layout, built for Redis Cluster: a script or a MULTI may only touch keys of one
// hash slot, and the slot of a key is that of the text between its first { and }.
//
//   - A tenant's keys carry the tenant's tag, {t:<tenant>}, so that every script of
//     that tenant runs on one slot: its sandbox records ({t:…}:sandbox:<id>), index
//     ({t:…}:sandboxes), usage counters ({t:…}:usage), expiry schedule ({t:…}:expiry),
//     pools ({t:…}:pools, {t:…}:pool:<name>:ready|allocated), warm members ({t:…}:warm),
//     cross-tenant claims in flight ({t:…}:claiming) and batches ({t:…}:batch:<id>,
//     {t:…}:batches, {t:…}:batches:open).
//   - The API keys and console sessions share the tag {auth}: the key lookup, the
//     revocation and the session check read several of them in one script.
//   - A record is found by its id alone through a locator, loc:sb:<id> (loc:batch:<id>
//     for a batch), a plain key naming the tenant; one GET, cached in the process, before
//     the record's own command. The locator changes only when a cross-tenant claim moves
//     a warm member to its claimer's slot.
//   - What the background passes walk across tenants (the reconciler, reaper, pool
//     manager, usage repair) starts from tenants:active, the set of tenants that ever
//     held a sandbox, pool or batch.
//   - Everything else is one key per command (events, audit, leases, heartbeats, idle
//     and activity schedules, tenants, snapshots, link keys) and needs no tag.

// tkey returns a key in tenant's slot.
func (s *Store) tkey(tenant string, parts ...string) string {
	return s.prefix + "{t:" + tenant + "}:" + strings.Join(parts, ":")
}

// authKey returns a key in the slot of the API keys and sessions.
func (s *Store) authKey(parts ...string) string {
	return s.prefix + "{auth}:" + strings.Join(parts, ":")
}

func (s *Store) sandboxKey(tenant, id string) string { return s.tkey(tenant, "sandbox", id) }
func (s *Store) recordPrefix(tenant string) string   { return s.tkey(tenant, "sandbox") + ":" }
func (s *Store) tenantIndex(tenant string) string    { return s.tkey(tenant, "sandboxes") }
func (s *Store) usageKey(tenant string) string       { return s.tkey(tenant, "usage") }
func (s *Store) expiryKey(tenant string) string      { return s.tkey(tenant, "expiry") }
func (s *Store) activeKey() string                   { return s.Key("tenants", "active") }

// Locator kinds.
const (
	locSandbox = "sb"
	locBatch   = "batch"
)

func (s *Store) locKey(kind, id string) string { return s.Key("loc", kind, id) }

// locCache remembers id → tenant for records this process has located. An entry goes
// stale only when a cross-tenant claim moves a record; a read that then finds nothing
// asks the locator again.
type locCache struct {
	mu sync.Mutex
	m  map[string]string
}

const locCacheMax = 200000

func (c *locCache) get(kind, id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[kind+"/"+id]
	return t, ok
}

func (c *locCache) put(kind, id, tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= locCacheMax {
		c.m = make(map[string]string)
	}
	c.m[kind+"/"+id] = tenant
}

func (c *locCache) drop(kind, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, kind+"/"+id)
}

// locate returns the tenant whose slot holds the record id of kind; ErrNotFound when
// there is none.
func (s *Store) locate(ctx context.Context, kind, id string) (string, error) {
	if t, ok := s.locs.get(kind, id); ok {
		return t, nil
	}
	return s.locateFresh(ctx, kind, id)
}

func (s *Store) locateFresh(ctx context.Context, kind, id string) (string, error) {
	t, err := s.rdb.Get(ctx, s.locKey(kind, id)).Result()
	if errors.Is(err, redis.Nil) {
		s.locs.drop(kind, id)
		return "", fmt.Errorf("%s %s: %w", kind, id, ErrNotFound)
	}
	if err != nil {
		return "", wrap(err)
	}
	s.locs.put(kind, id, t)
	return t, nil
}

// claimLocator points id at tenant unless it points at another tenant already
// (ErrConflict then); it reports whether it wrote the locator.
func (s *Store) claimLocator(ctx context.Context, kind, id, tenant string) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.locKey(kind, id), tenant, 0).Result()
	if err != nil {
		return false, wrap(err)
	}
	if !ok {
		cur, err := s.rdb.Get(ctx, s.locKey(kind, id)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, wrap(err)
		}
		if cur != tenant {
			return false, fmt.Errorf("%s %s: %w", kind, id, ErrConflict)
		}
	}
	s.locs.put(kind, id, tenant)
	return ok, nil
}

// dropLocator removes id's locator if it still points at tenant.
func (s *Store) dropLocator(ctx context.Context, kind, id, tenant string) error {
	s.locs.drop(kind, id)
	return wrap(dropLocatorScript.Run(ctx, s.rdb, []string{s.locKey(kind, id)}, tenant).Err())
}

var dropLocatorScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// markActive adds tenant to the active set, once per process.
func (s *Store) markActive(ctx context.Context, tenant string) error {
	if _, ok := s.active.Load(tenant); ok {
		return nil
	}
	if err := s.rdb.SAdd(ctx, s.activeKey(), tenant).Err(); err != nil {
		return wrap(err)
	}
	s.active.Store(tenant, true)
	return nil
}

// activeTenants lists the tenants that ever held a sandbox, pool or batch.
func (s *Store) activeTenants(ctx context.Context) ([]string, error) {
	ts, err := s.rdb.SMembers(ctx, s.activeKey()).Result()
	return ts, wrap(err)
}

// scanKeys calls fn with every key matching pattern, on every primary of a cluster.
func (s *Store) scanKeys(ctx context.Context, pattern string, fn func(key string)) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			fn(iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return wrap(cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) }))
	}
	return wrap(scan(ctx, s.rdb))
}
