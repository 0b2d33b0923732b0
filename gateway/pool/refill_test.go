package pool

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// TestOutdatedMembers: the manager finds the warm members built from an older
// template whenever it looks, though it reads each member's record only once per
// template version.
func TestOutdatedMembers(t *testing.T) {
	ctx := context.Background()
	d := coredeps.Start(t)
	m := New(Config{}, d.Store, nil, nil, d.Log)
	p := &store.Pool{Tenant: "default", Name: "p", Template: []byte(`{}`), Version: 1}
	if err := d.Store.PutPool(ctx, p, true); err != nil {
		t.Fatal(err)
	}
	add := func(id string, version int64) {
		now := time.Now().UTC()
		sb := &store.Sandbox{ID: id, Tenant: "default", State: stateRunning, CreatedAt: now, LastTransitionAt: now, Pool: "p", PoolVersion: version}
		if ok, err := d.Store.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm %s: %v, %v", id, ok, err)
		}
	}
	check := func(version int64, want ...string) {
		t.Helper()
		ready, err := d.Store.ReadyMembers(ctx, "default", "p")
		if err != nil {
			t.Fatal(err)
		}
		v := *p
		v.Version = version
		got := m.outdatedMembers(ctx, &v, ready)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("outdated at version %d = %v, want %v", version, got, want)
		}
	}
	for i := range 3 {
		add(fmt.Sprintf("a%d", i), 1)
	}
	check(1)
	check(1)      // known now: nothing read
	add("b0", 1)  // a member that joined since
	add("old", 0) // a record from before versions: never outdated
	check(1)
	check(2, "a0", "a1", "a2", "b0") // the template changed: every member is read again
	add("c0", 1)                     // started from the old template while it changed
	check(2, "a0", "a1", "a2", "b0", "c0")
	if n := len(m.current[store.PoolKey("default", "p")].ids); n != 1 {
		t.Errorf("%d members kept as current, want 1 (old)", n)
	}
}
