package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The key layout before Redis Cluster support (layout.go has today's) kept global keys —
// sandbox:<id>, sandboxes, expiry, warm, pools, pool:<t>/<p>:ready|allocated,
// batch:<id>, batches:open, tenant:<t>:sandboxes|usage|batches|keys, keys, keyids,
// session:<h>, and the plugins' plugin:<t>:<name>, plugins:<t>|tenants|revision. A gateway of today's layout reading such a store would see no records,
// and its reconciler would remove the running pool members as orphans; MigrateLayout
// moves them first.

// oldGlobalKeys are the old layout's keys that exist whenever it holds anything.
func (s *Store) oldGlobalKeys() []string {
	return []string{s.Key("sandboxes"), s.Key("expiry"), s.Key("warm"), s.Key("pools"), s.Key("batches", "open"), s.Key("keys"), s.Key("keyids")}
}

// oldPatterns are the old layout's per-id and per-tenant keys.
func (s *Store) oldPatterns() []string {
	return []string{s.Key("sandbox", "*"), s.Key("batch", "*"), s.Key("tenant", "*"), s.Key("pool", "*"), s.Key("session", "*"), s.Key("plugin", "*"), s.Key("plugins", "*")}
}

// Migration counts what MigrateLayout moved.
type Migration struct {
	Records, Batches, Keys int
}

// MigrateLayout moves keys of the old layout to today's, and reports what it moved
// (nothing, cheaply, once there is nothing old: a few EXISTS, and one SCAN per process).
// It runs on the reconciler's lease holder before each pass. Every step is idempotent
// (a rename, or a copy into sets followed by the delete of the old key), so a gateway
// dying halfway leaves the rest to the next pass. On a Redis Cluster it only reports:
// the old layout never ran on one (its scripts cross slots).
func (s *Store) MigrateLayout(ctx context.Context) (Migration, error) {
	var m Migration
	if s.embedded != nil {
		return m, nil // lost with its process: never holds an old layout
	}
	found, err := s.oldLayoutPresent(ctx)
	if err != nil || !found {
		return m, err
	}
	if s.cluster {
		s.log.Error("this Redis Cluster holds keys of sandgate's layout from before cluster support; they are not migrated (migrate on the single Redis they came from, before moving to a cluster)", "prefix", s.prefix)
		return m, nil
	}
	s.log.Warn("found keys of sandgate's layout from before Redis Cluster support: migrating them (stop gateways of older versions first)", "prefix", s.prefix)
	if err := s.migrate(ctx, &m); err != nil {
		s.log.Error("migrating the old key layout failed; the next reconciler pass continues it", "err", err, "records", m.Records, "batches", m.Batches, "keys", m.Keys)
		return m, err
	}
	s.log.Info("migrated the old key layout", "records", m.Records, "batches", m.Batches, "keys", m.Keys)
	return m, nil
}

func (s *Store) oldLayoutPresent(ctx context.Context) (bool, error) {
	pipe := s.rdb.Pipeline()
	var cmds []*redis.IntCmd
	for _, k := range s.oldGlobalKeys() {
		cmds = append(cmds, pipe.Exists(ctx, k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, wrap(err)
	}
	for _, c := range cmds {
		if c.Val() > 0 {
			return true, nil
		}
	}
	if s.scannedClean.Load() {
		return false, nil
	}
	found := false
	for _, p := range s.oldPatterns() {
		if err := s.scanKeys(ctx, p, func(k string) {
			if !strings.HasSuffix(k, ":bucket") { // tenant:<t>:bucket is today's too
				found = true
			}
		}); err != nil {
			return false, err
		}
	}
	if !found {
		s.scannedClean.Store(true)
	}
	return found, nil
}

func (s *Store) migrate(ctx context.Context, m *Migration) error {
	P := s.prefix
	// 1. Records and batches go to their tenant's slot, with their locators.
	for _, kind := range []string{"sandbox", "batch"} {
		var keys []string
		if err := s.scanKeys(ctx, P+kind+":*", func(k string) { keys = append(keys, k) }); err != nil {
			return err
		}
		for _, old := range keys {
			id := strings.TrimPrefix(old, P+kind+":")
			tenant, err := s.rdb.HGet(ctx, old, "tenant").Result()
			if errors.Is(err, redis.Nil) || tenant == "" {
				s.log.Warn("old-layout record without a tenant left in place", "key", old)
				continue
			}
			if err != nil {
				return wrap(err)
			}
			if err := s.markActive(ctx, tenant); err != nil {
				return err
			}
			loc, dst := locSandbox, s.sandboxKey(tenant, id)
			if kind == "batch" {
				loc, dst = locBatch, s.batchKey(tenant, id)
			}
			if err := s.rdb.Set(ctx, s.locKey(loc, id), tenant, 0).Err(); err != nil {
				return wrap(err)
			}
			if err := s.moveKey(ctx, old, dst); err != nil {
				return err
			}
			if kind == "batch" {
				m.Batches++
			} else {
				m.Records++
			}
		}
	}
	// 2. The global sets split by the tenant of each member.
	located := func(kind, id string) string {
		t, err := s.locateFresh(ctx, kind, id)
		if err != nil {
			return ""
		}
		return t
	}
	if zs, err := s.rdb.ZRangeWithScores(ctx, s.Key("expiry"), 0, -1).Result(); err != nil {
		return wrap(err)
	} else {
		for _, z := range zs {
			id, _ := z.Member.(string)
			if t := located(locSandbox, id); t != "" {
				if err := s.rdb.ZAdd(ctx, s.expiryKey(t), z).Err(); err != nil {
					return wrap(err)
				}
			}
		}
	}
	for _, split := range []struct {
		old, kind string
		dst       func(string) string
	}{
		{s.Key("warm"), locSandbox, s.warmSetKey},
		{s.Key("batches", "open"), locBatch, s.openBatches},
	} {
		ids, err := s.rdb.SMembers(ctx, split.old).Result()
		if err != nil {
			return wrap(err)
		}
		for _, id := range ids {
			if t := located(split.kind, id); t != "" {
				if err := s.rdb.SAdd(ctx, split.dst(t), id).Err(); err != nil {
					return wrap(err)
				}
			}
		}
	}
	pools, err := s.rdb.HGetAll(ctx, s.Key("pools")).Result()
	if err != nil {
		return wrap(err)
	}
	for field, body := range pools {
		t, name, ok := strings.Cut(field, "/")
		if !ok {
			continue
		}
		if err := s.markActive(ctx, t); err != nil {
			return err
		}
		if err := s.rdb.HSetNX(ctx, s.poolsKey(t), name, body).Err(); err != nil {
			return wrap(err)
		}
	}
	// 3. The per-tenant and per-pool keys are renamed into their slot.
	var rest []string
	for _, p := range []string{P + "tenant:*", P + "pool:*", P + "session:*", P + "plugin:*", P + "plugins:*"} {
		if err := s.scanKeys(ctx, p, func(k string) { rest = append(rest, k) }); err != nil {
			return err
		}
	}
	for _, old := range rest {
		dst := ""
		switch k := strings.TrimPrefix(old, P); {
		case strings.HasPrefix(k, "session:"):
			dst = s.authKey(k)
		case strings.HasPrefix(k, "plugin:") || strings.HasPrefix(k, "plugins:"):
			dst = P + "{plugins}:" + k // plugins/store.go
		case strings.HasPrefix(k, "pool:"):
			body := strings.TrimPrefix(k, "pool:")
			if i := strings.LastIndexByte(body, ':'); i > 0 {
				if t, name, ok := strings.Cut(body[:i], "/"); ok {
					dst = s.tkey(t, "pool", name, body[i+1:])
				}
			}
		case strings.HasPrefix(k, "tenant:"):
			body := strings.TrimPrefix(k, "tenant:")
			i := strings.LastIndexByte(body, ':')
			if i <= 0 {
				continue
			}
			t, what := body[:i], body[i+1:]
			switch what {
			case "sandboxes", "usage", "batches":
				dst = s.tkey(t, what)
				if err := s.markActive(ctx, t); err != nil {
					return err
				}
			case "keys":
				dst = s.tenantKeys(t)
			}
		}
		if dst == "" {
			continue // not the old layout's (tenant:<t>:bucket is today's)
		}
		if err := s.moveKey(ctx, old, dst); err != nil {
			return err
		}
		m.Keys++
	}
	for _, k := range []string{"keys", "keyids"} {
		if err := s.moveKey(ctx, s.Key(k), s.authKey(k)); err != nil {
			return err
		}
	}
	// 4. What was split, and the global index (today: the tenants' own), go.
	if err := s.rdb.Del(ctx, s.Key("expiry"), s.Key("warm"), s.Key("batches", "open"), s.Key("pools"), s.Key("sandboxes")).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// moveKey renames old to dst, merging into dst when it exists already (a gateway of
// today's layout wrote there first). A missing old key is nothing to do.
func (s *Store) moveKey(ctx context.Context, old, dst string) error {
	ok, err := s.rdb.RenameNX(ctx, old, dst).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil
		}
		return wrap(err)
	}
	if ok {
		return nil
	}
	typ, err := s.rdb.Type(ctx, old).Result()
	if err != nil {
		return wrap(err)
	}
	switch typ {
	case "zset":
		err = s.rdb.ZUnionStore(ctx, dst, &redis.ZStore{Keys: []string{dst, old}, Aggregate: "MAX"}).Err()
	case "set":
		err = s.rdb.SUnionStore(ctx, dst, dst, old).Err()
	case "hash":
		var all map[string]string
		if all, err = s.rdb.HGetAll(ctx, old).Result(); err == nil {
			for f, v := range all {
				if err = s.rdb.HSetNX(ctx, dst, f, v).Err(); err != nil {
					break
				}
			}
		}
	case "list":
		var items []string
		if items, err = s.rdb.LRange(ctx, old, 0, -1).Result(); err == nil && len(items) > 0 {
			err = s.rdb.RPush(ctx, dst, toAny(items)...).Err()
		}
	default:
		// A string (a session): today's key stands.
	}
	if err != nil {
		return fmt.Errorf("merge %s into %s: %w", old, dst, wrap(err))
	}
	return wrap(s.rdb.Del(ctx, old).Err())
}
