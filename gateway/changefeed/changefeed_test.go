package changefeed

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feed for these tests: changes whose id starts with
// "key:" are its own, as the core's API key changes are; it counts resubscriptions.
type testHost struct {
	mu           sync.Mutex
	resubscribed int
	other        []string
}

func (h *testHost) Resubscribed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resubscribed++
}

func (h *testHost) OtherChange(id string) bool {
	if !strings.HasPrefix(id, "key:") {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.other = append(h.other, id)
	return true
}

func (h *testHost) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resubscribed, len(h.other)
}

type fixture struct {
	d    coredeps.Deps
	host *testHost
	m    *Manager
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	d := coredeps.Start(t)
	h := &testHost{}
	m := New(d.Store, h, d.Log)
	t.Cleanup(m.Stop)
	return fixture{d: d, host: h, m: m}
}

// record writes a record of tenant in state.
func (f fixture) record(t *testing.T, tenant, state string, metadata map[string]string) *store.Sandbox {
	t.Helper()
	now := time.Now().UTC()
	sb := &store.Sandbox{ID: uuid.NewString(), Tenant: tenant, Image: "test", State: state, Metadata: metadata, CreatedAt: now, LastTransitionAt: now}
	if err := f.d.Store.CreateSandbox(context.Background(), sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb
}

func (f fixture) setState(t *testing.T, id, state string) {
	t.Helper()
	if _, err := f.d.Store.ModifySandbox(context.Background(), id, func(sb *store.Sandbox) error {
		sb.State = state
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// stale makes the cached record of id older than routeTTL.
func (f fixture) stale(id string) {
	f.m.routes.mu.Lock()
	defer f.m.routes.mu.Unlock()
	if e, ok := f.m.routes.entries[id]; ok {
		e.fetched = time.Now().Add(-2 * routeTTL)
	}
}

func codeOf(err error) string {
	if e, ok := fault.AsError(err); ok {
		return e.Code
	}
	return ""
}

// TestRoute: a running sandbox's record is cached and served fresh; other states are
// read each time; a missing one is not found; through an outage the last confirmed
// record is served, unless it expired meanwhile.
func TestRoute(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	running := f.record(t, "acme", stateRunning, nil)
	paused := f.record(t, "acme", "Paused", nil)

	got, err := f.m.Route(ctx, running.ID)
	if err != nil || got.ID != running.ID {
		t.Fatalf("Route = %v, %v", got, err)
	}
	if _, fresh := f.m.Fresh(running.ID); !fresh {
		t.Fatal("a running sandbox's record was not cached")
	}
	if got, err := f.m.Route(ctx, paused.ID); err != nil || got.State != "Paused" {
		t.Fatalf("Route(paused) = %v, %v", got, err)
	}
	if _, fresh := f.m.Fresh(paused.ID); fresh {
		t.Fatal("a paused sandbox's record was cached")
	}
	if _, err := f.m.Route(ctx, "nope"); codeOf(err) != fault.CodeNotFound {
		t.Fatalf("Route(missing) = %v, want %s", err, fault.CodeNotFound)
	}

	// A record changed through this gateway is dropped and read again.
	f.setState(t, running.ID, "Paused")
	f.m.Drop(running.ID)
	if got, err := f.m.Route(ctx, running.ID); err != nil || got.State != "Paused" {
		t.Fatalf("after Drop: %v, %v", got, err)
	}
	f.setState(t, running.ID, stateRunning)
	if _, err := f.m.Route(ctx, running.ID); err != nil {
		t.Fatal(err)
	}

	// The store goes away: the stale cached record is served, a record never cached is not.
	soon := time.Now().Add(300 * time.Millisecond)
	expiring := *running
	expiring.ID = uuid.NewString()
	expiring.ExpiresAt = &soon
	f.m.Put(&expiring)
	f.stale(running.ID)
	f.stale(expiring.ID)
	f.d.Redis.Stop()
	if got, err := f.m.Route(ctx, running.ID); err != nil || got.ID != running.ID {
		t.Fatalf("through the outage: %v, %v", got, err)
	}
	if _, err := f.m.Route(ctx, paused.ID); err == nil {
		t.Fatal("a record never cached was served through the outage")
	}
	time.Sleep(time.Until(soon))
	if _, err := f.m.Route(ctx, expiring.ID); codeOf(err) != fault.CodeNotFound {
		t.Fatalf("a record that expired during the outage: %v", err)
	}
	// Confirming while the store is away keeps what is cached.
	f.m.confirmRoutes(ctx)
	if _, ok := f.m.routes.entries[running.ID]; !ok {
		t.Fatal("an outage emptied the cache")
	}
}

// TestConfirmRoutes: a confirmation pass drops the cached records that are gone or no
// longer running, and keeps the others fresh.
func TestConfirmRoutes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	keep := f.record(t, "acme", stateRunning, nil)
	pause := f.record(t, "acme", stateRunning, nil)
	gone := f.record(t, "acme", stateRunning, nil)
	for _, sb := range []*store.Sandbox{keep, pause, gone} {
		if _, err := f.m.Route(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		f.stale(sb.ID)
	}
	f.setState(t, pause.ID, "Paused")
	if err := f.d.Store.DeleteSandbox(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	f.m.confirmRoutes(ctx)
	if _, fresh := f.m.Fresh(keep.ID); !fresh {
		t.Fatal("a running record was not confirmed")
	}
	for _, id := range []string{pause.ID, gone.ID} {
		if _, _, ok := f.m.routes.get(id); ok {
			t.Fatalf("%s is still cached", id)
		}
	}
}

// TestSubscription: a change published by any gateway drops the cached record and
// reaches every watcher; the core's own changes go to the host; once subscribed,
// watchers list again.
func TestSubscription(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	sb := f.record(t, "acme", stateRunning, nil)
	w := f.m.Watch()
	defer w.Close()
	f.m.Start()
	waitFor(t, "the subscription", func() bool { n, _ := f.host.counts(); return n == 1 })
	select {
	case <-w.Resync:
	default:
		t.Fatal("a new subscription did not ask watchers to list again")
	}
	if _, err := f.m.Route(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Store.PublishChange(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-w.C:
		if id != sb.ID {
			t.Fatalf("watcher got %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher was not told of the change")
	}
	if _, _, ok := f.m.routes.get(sb.ID); ok {
		t.Fatal("a changed record is still cached")
	}
	if err := f.d.Store.PublishChange(ctx, "key:k1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the key change at the host", func() bool { _, n := f.host.counts(); return n == 1 })
	select {
	case id := <-w.C:
		t.Fatalf("a key change reached the watcher as %q", id)
	default:
	}
	f.m.Stop()
	f.m.Stop()
}

// TestSnapshotAndLookup: a live list shows what the caller may see and the filter
// passes; a lookup hides another tenant's sandbox and a gone one.
func TestSnapshotAndLookup(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	web := f.record(t, "acme", stateRunning, map[string]string{"app": "web"})
	f.record(t, "acme", "Paused", map[string]string{"app": "web"})
	other := f.record(t, "globex", stateRunning, map[string]string{"app": "web"})
	acme := principal.Caller{Tenant: "acme"}
	filter := Filter{States: []string{"running"}, Metadata: map[string]string{"app": "web"}}

	got, err := f.m.Snapshot(ctx, acme, filter)
	if err != nil || len(got) != 1 || got[0].ID != web.ID {
		t.Fatalf("acme's snapshot = %v, %v", got, err)
	}
	all, err := f.m.Snapshot(ctx, principal.Caller{Admin: true}, filter)
	if err != nil || len(all) != 2 {
		t.Fatalf("the admin's snapshot holds %d, %v; want 2", len(all), err)
	}
	if rec, err := f.m.Lookup(ctx, acme, web.ID); err != nil || rec == nil || rec.ID != web.ID {
		t.Fatalf("Lookup(own) = %v, %v", rec, err)
	}
	for _, id := range []string{other.ID, "gone"} {
		if rec, err := f.m.Lookup(ctx, acme, id); err != nil || rec != nil {
			t.Fatalf("Lookup(%s) = %v, %v; want nothing", id, rec, err)
		}
	}
	f.d.Redis.Stop()
	if _, err := f.m.Snapshot(ctx, acme, filter); err == nil {
		t.Fatal("a snapshot without a store")
	}
	if _, err := f.m.Lookup(ctx, acme, web.ID); err == nil {
		t.Fatal("a lookup without a store")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
