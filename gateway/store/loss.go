package store

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Store loss. A Redis restarted without persistence, a failover to a replica that had
// not caught up, or a FLUSHALL empties the store under running gateways. The store
// keeps memos of what it wrote (the tenants added to tenants:active, the locators, the
// warm records), each valid only as long as the data it remembers: a tenant it will not
// add to the active set again leaves every record of that tenant out of the background
// passes. The epoch key tells a loss apart: a random value written once, so that a
// process which saw one value and then another (or none) knows the store was emptied
// since, and drops its memos (CheckLoss). Each process must see the change for itself,
// so the value is never written back as it was: the first to find it missing writes a
// new one, which every other process then sees as a change too.
//
// On a Redis Cluster the key lives on one shard: a shard that loses its data alone is
// not detected.

func (s *Store) epochKey() string { return s.Key("epoch") }

// epochState is the epoch this process last saw.
type epochState struct {
	mu    sync.Mutex
	value string
}

var epochScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`)

// CheckLoss reports whether the store lost its contents since this process last
// called it, making the epoch key first if there is none. On a loss it forgets what
// it remembers of the store's contents, so that the next writes register their
// tenants and locators again. The first call only notes the epoch.
func (s *Store) CheckLoss(ctx context.Context) (bool, error) {
	epoch, err := epochScript.Run(ctx, s.rdb, []string{s.epochKey()}, randomID()).Text()
	if err != nil {
		return false, wrap(err)
	}
	s.epoch.mu.Lock()
	defer s.epoch.mu.Unlock()
	prev := s.epoch.value
	s.epoch.value = epoch
	if prev == "" || prev == epoch {
		return false, nil
	}
	s.active.Clear()
	s.locs.clear()
	s.warm.clear()
	s.log.Warn("the store lost its contents (Redis restarted without persistence, failed over to a stale replica, or was flushed): registering its records again")
	return true, nil
}

// RestoreClusterID writes id back as the store's cluster id (ClusterID) when the store
// has none, as after a loss: a new id made by the next ClusterID would make every
// running sandbox foreign to the gateways that read it. It returns the id the store
// holds now, which differs from id when another gateway made a new one first. The
// embedded store keeps its id in its directory and needs nothing.
func (s *Store) RestoreClusterID(ctx context.Context, id string) (string, error) {
	if s.embedded != nil && s.dir != nil {
		return id, nil
	}
	key := s.Key("cluster")
	if err := s.rdb.SetNX(ctx, key, id, 0).Err(); err != nil {
		return "", wrap(err)
	}
	cur, err := s.rdb.Get(ctx, key).Result()
	return cur, wrap(err)
}

func (c *locCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

func (c *warmCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.order = make(map[string]*warmEntry), make(map[string][]string)
}
