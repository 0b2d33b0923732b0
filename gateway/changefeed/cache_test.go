package changefeed

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
)

func TestRouteCacheConfirm(t *testing.T) {
	c := newRouteCache()
	c.put(&store.Sandbox{ID: "a", Rev: 1})
	before := time.Now().Add(-time.Second)

	// A confirmation read before the entry was last put must not overwrite it.
	c.confirm(&store.Sandbox{ID: "a", Rev: 0}, before)
	if sb, _, _ := c.get("a"); sb.Rev != 1 {
		t.Fatalf("an older confirmation replaced a newer read: rev %d", sb.Rev)
	}
	// A newer one does, and a dropped entry is not brought back by it.
	c.confirm(&store.Sandbox{ID: "a", Rev: 2}, time.Now())
	if sb, _, _ := c.get("a"); sb.Rev != 2 {
		t.Fatalf("confirmation not applied: rev %d", sb.Rev)
	}
	c.drop("a")
	c.confirm(&store.Sandbox{ID: "a", Rev: 3}, time.Now())
	if _, _, ok := c.get("a"); ok {
		t.Fatal("a confirmation brought a dropped entry back")
	}
}

func TestRouteCacheEvictsIdleAndLeastRecentlyUsed(t *testing.T) {
	c := newRouteCache()
	for _, id := range []string{"old", "mid", "new"} {
		c.put(&store.Sandbox{ID: id})
	}
	now := time.Now()
	c.entries["old"].used.Store(now.Add(-2 * routeIdle).UnixNano())
	c.entries["mid"].used.Store(now.Add(-time.Minute).UnixNano())
	c.mu.Lock()
	c.evictLocked(now.Add(-routeIdle), 1)
	c.mu.Unlock()
	if _, _, ok := c.get("new"); !ok || len(c.entries) != 1 {
		t.Fatalf("want only the most recently used entry left, have %d entries", len(c.entries))
	}
}

func TestRouteThroughOutageRefusesExpired(t *testing.T) {
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	if _, err := routeThroughOutage(&store.Sandbox{ID: "x", ExpiresAt: &past}); err == nil {
		t.Error("an expired record was served through an outage")
	}
	if _, err := routeThroughOutage(&store.Sandbox{ID: "x", ExpiresAt: &future}); err != nil {
		t.Errorf("a live record was refused: %v", err)
	}
}
