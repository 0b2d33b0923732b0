package changefeed

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

// routeTTL bounds how stale a cached route may be when an invalidation is missed.
const routeTTL = time.Second

// Route cache and Redis outages. A route is served from memory while it is fresh
// (routeTTL); after that it is read again. When Redis cannot be reached, the last
// confirmed record is served instead, so that the data plane (agent calls, previews)
// outlives an outage of the control plane. To bound what such a record may have missed,
// every record in the cache is confirmed in the background every routeConfirmEvery while
// Redis answers (records gone or no longer Running are dropped): through an outage the
// gateway serves records at most routeConfirmEvery older than the outage's start, and a
// record whose expiresAt passes during the outage stops being served. Changes made while
// Redis was away (there are none through this gateway: its API answers 503) are applied
// by the first read after Redis returns.
const (
	// routeConfirmEvery is how often cached records are checked against Redis.
	routeConfirmEvery = 2 * time.Second
	// routeIdle is how long an unused record stays cached (and confirmed).
	routeIdle = 10 * time.Minute
	// routeMaxEntries caps the cache; beyond it the least recently used go first.
	routeMaxEntries = 100000
)

// routeCache keeps recently used sandbox records in memory so that proxied requests do
// not read Redis each time, and so that they can be served while Redis is unreachable.
// Writes through this gateway drop the entry at once; writes elsewhere are published on
// Redis and drop it within milliseconds, and routeTTL bounds the rest.
type routeCache struct {
	mu      sync.RWMutex
	entries map[string]*routeEntry
}

type routeEntry struct {
	sb *store.Sandbox
	// fetched is when the record was last read from (or confirmed in) Redis.
	fetched time.Time
	// used is when a request last asked for it (UnixNano), for idle eviction.
	used atomic.Int64
}

func newRouteCache() *routeCache { return &routeCache{entries: map[string]*routeEntry{}} }

// get returns the cached record of id and whether it is fresh (read within routeTTL).
func (c *routeCache) get(id string) (*store.Sandbox, bool, bool) {
	c.mu.RLock()
	e, ok := c.entries[id]
	c.mu.RUnlock()
	if !ok {
		return nil, false, false
	}
	e.used.Store(time.Now().UnixNano())
	return e.sb, time.Since(e.fetched) <= routeTTL, true
}

func (c *routeCache) put(sb *store.Sandbox) {
	now := time.Now()
	c.mu.Lock()
	if len(c.entries) >= routeMaxEntries {
		c.evictLocked(now.Add(-routeIdle), routeMaxEntries/2)
	}
	e := &routeEntry{sb: sb, fetched: now}
	e.used.Store(now.UnixNano())
	c.entries[sb.ID] = e
	c.mu.Unlock()
}

// confirm replaces the record of an entry that still exists, keeping its use time; it
// does nothing when the entry was dropped or replaced meanwhile (by a newer read).
func (c *routeCache) confirm(sb *store.Sandbox, at time.Time) {
	c.mu.Lock()
	if e, ok := c.entries[sb.ID]; ok && !e.fetched.After(at) {
		ne := &routeEntry{sb: sb, fetched: at}
		ne.used.Store(e.used.Load())
		c.entries[sb.ID] = ne
	}
	c.mu.Unlock()
}

// evictLocked removes entries unused since before idleBefore, and then, while more than
// keep remain, the least recently used ones.
func (c *routeCache) evictLocked(idleBefore time.Time, keep int) {
	type use struct {
		id   string
		used int64
	}
	var live []use
	for id, e := range c.entries {
		if u := e.used.Load(); u < idleBefore.UnixNano() {
			delete(c.entries, id)
		} else {
			live = append(live, use{id, u})
		}
	}
	if len(live) <= keep {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].used < live[j].used })
	for _, u := range live[:len(live)-keep] {
		delete(c.entries, u.id)
	}
}

func (c *routeCache) drop(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

// ids lists the cached sandboxes, evicting idle ones first.
func (c *routeCache) ids(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictLocked(now.Add(-routeIdle), routeMaxEntries)
	out := make([]string, 0, len(c.entries))
	for id := range c.entries {
		out = append(out, id)
	}
	return out
}
