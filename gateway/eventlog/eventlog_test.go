package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: the events handed to
// live subscribers are kept, the activity flushes counted.
type testHost struct {
	mu        sync.Mutex
	published []store.Event
	flushes   atomic.Int64
}

func (h *testHost) PublishEvent(ev store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.published = append(h.published, ev)
}

func (h *testHost) FlushActivity() { h.flushes.Add(1) }

func (h *testHost) types() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.published {
		out = append(out, ev.Type+"/"+ev.SandboxID)
	}
	return out
}

var _ Host = (*testHost)(nil)

func newManager(t *testing.T, d coredeps.Deps) (*Manager, *testHost) {
	t.Helper()
	h := &testHost{}
	m := New(d.Store, h, d.Log)
	t.Cleanup(m.Stop)
	return m, h
}

func event(typ, sandbox string) store.Event {
	return store.Event{Type: typ, Tenant: "t1", SandboxID: sandbox, Time: time.Now().UTC()}
}

func stored(t *testing.T, d coredeps.Deps) []string {
	t.Helper()
	evs, err := d.Store.ReadEvents(context.Background(), "t1", "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type+"/"+ev.SandboxID)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEmitWritesBeforeReturning(t *testing.T) {
	d := coredeps.Start(t)
	m, h := newManager(t, d)
	ctx := context.Background()
	m.Emit(ctx, event("sandbox.created", "a"))
	m.EmitAll(ctx, []store.Event{event("sandbox.created", "b"), event("sandbox.created", "c")})
	m.EmitAll(ctx, nil)
	m.EmitPerSandbox(ctx, event("sandbox.created", ""), []*store.Sandbox{{ID: "d"}, {ID: "e"}})
	want := []string{"sandbox.created/a", "sandbox.created/b", "sandbox.created/c", "sandbox.created/d", "sandbox.created/e"}
	if got := stored(t, d); !slices.Equal(got, want) {
		t.Errorf("stored %v, want %v", got, want)
	}
	if got := h.types(); !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

func TestQueuedEventsAreWrittenInOrderAndPublishedOnce(t *testing.T) {
	d := coredeps.Start(t)
	m, h := newManager(t, d)
	m.Start()
	var want []string
	for i := range 3*eventBatch + 7 {
		id := fmt.Sprint(i)
		m.Queue(event("preview.accessed", id))
		want = append(want, "preview.accessed/"+id)
	}
	m.RecordAgentCall(&store.Sandbox{ID: "sb", Tenant: "t1"}, "command.started", map[string]any{"command": "ls"})
	want = append(want, "command.started/sb")
	waitFor(t, "every queued event is stored", func() bool { return len(stored(t, d)) == len(want) })
	if got := stored(t, d); !slices.Equal(got, want) {
		t.Fatalf("stored out of order: first %v", got[:5])
	}
	if got := h.types(); !slices.Equal(got, want) {
		t.Fatalf("published %d events, want each of %d once, in order", len(got), len(want))
	}
	if h.flushes.Load() == 0 {
		t.Error("the access feature's activity was never flushed")
	}
}

func TestStopFlushesTheQueue(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	m.Start()
	m.Queue(event("mcp.tool.called", "last"))
	m.Stop()
	if got := stored(t, d); !slices.Equal(got, []string{"mcp.tool.called/last"}) {
		t.Fatalf("after Stop the store holds %v", got)
	}
}

func TestQueuedEventsOutliveAnOutage(t *testing.T) {
	d := coredeps.Start(t)
	m, h := newManager(t, d)
	m.Start()
	d.Redis.Stop()
	for i := range 10 {
		m.Queue(event("preview.accessed", fmt.Sprint(i)))
	}
	waitFor(t, "the events are taken from the queue", func() bool { return len(h.types()) == 10 })
	waitFor(t, "the writer fails to write them", d.Store.Unreachable)
	time.Sleep(3 * writerTick) // the writer tries again, and keeps them
	if err := d.Redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the backlog is written once Redis answers", func() bool {
		evs, err := d.Store.ReadEvents(context.Background(), "t1", "", 100)
		return err == nil && len(evs) == 10
	})
	if n := len(h.types()); n != 10 {
		t.Errorf("published %d times, want each event once", n)
	}
}

func TestAFullQueueDropsAndCounts(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d) // not started: nothing empties the queue
	for range eventQueueMax + 5 {
		m.Queue(event("preview.accessed", "x"))
	}
	if n := m.events.dropped.Load(); n != 5 {
		t.Fatalf("dropped %d, want 5", n)
	}
}

func TestReadPagesAndFilters(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	ctx := context.Background()
	var evs []store.Event
	for i := range 30 {
		typ := "preview.accessed"
		if i%3 == 0 {
			typ = "sandbox.created"
		}
		evs = append(evs, event(typ, fmt.Sprint(i%2)))
	}
	if err := d.Store.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	page, err := m.Read(ctx, Query{Tenant: "t1", Types: []string{"sandbox."}, Limit: 4})
	if err != nil || len(page.Items) != 4 || page.NextCursor == "" {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	rest, err := m.Read(ctx, Query{Tenant: "t1", Types: []string{"sandbox."}, Limit: 100, Cursor: page.NextCursor})
	if err != nil || len(rest.Items) != 6 || rest.NextCursor != "" {
		t.Fatalf("second page = %d items, cursor %q, %v", len(rest.Items), rest.NextCursor, err)
	}
	newest, err := m.Read(ctx, Query{Tenant: "t1", Sandbox: "1", Newest: true, Limit: 1})
	if err != nil || len(newest.Items) != 1 || newest.Items[0].ID != evs[29].ID && newest.Items[0].SandboxID != "1" {
		t.Fatalf("newest = %+v, %v", newest, err)
	}
	all, err := m.Read(ctx, Query{Tenant: "t1", Limit: 5000}) // out of range: the default
	if err != nil || len(all.Items) != 30 {
		t.Fatalf("a limit out of range read %d, %v", len(all.Items), err)
	}
	none, err := m.Read(ctx, Query{Tenant: "t2"})
	if err != nil || none.Items == nil || len(none.Items) != 0 {
		t.Fatalf("another tenant's page = %+v, %v", none, err)
	}
}

func TestFollowSendsNewEvents(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.Emit(ctx, event("sandbox.created", "before"))
	got := make(chan store.Event, 10)
	done := make(chan error, 1)
	go func() {
		done <- m.Follow(ctx, Query{Tenant: "t1", Types: []string{"sandbox."}}, func() error { return nil },
			func(ev store.Event) error { got <- ev; return nil })
	}()
	// Follow starts from the newest event when it reads; emit until one reaches it.
	deadline := time.After(15 * time.Second)
	for i := 0; ; i++ {
		m.Emit(ctx, event("preview.accessed", "skipped"))
		m.Emit(ctx, event("sandbox.deleted", fmt.Sprint(i)))
		select {
		case ev := <-got:
			if ev.Type != "sandbox.deleted" {
				t.Fatalf("followed %s/%s", ev.Type, ev.SandboxID)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Follow ended with %v", err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no event followed")
		}
	}
}

func TestFollowEndsWhenSendFails(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	ctx := context.Background()
	m.Emit(ctx, event("sandbox.created", "a"))
	first, err := d.Store.ReadEvents(ctx, "t1", "", 1)
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	m.Emit(ctx, event("sandbox.created", "b"))
	gone := errors.New("client gone")
	err = m.Follow(ctx, Query{Tenant: "t1", Cursor: first[0].ID}, func() error { return nil }, func(store.Event) error { return gone })
	if !errors.Is(err, gone) {
		t.Fatalf("Follow = %v, want the send's error", err)
	}
}

func TestAuditStream(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	ctx := context.Background()
	caller := principal.Caller{Tenant: "t1"}
	if tail, err := m.AuditTail(ctx, caller); err != nil || tail != "0-0" {
		t.Fatalf("tail of an empty stream = %q, %v", tail, err)
	}
	wake := m.AuditUpdates()
	m.RecordAudit("t1", []byte(`{"n":0}`))
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("readers not woken by a write")
	}
	for i := 1; i < 5; i++ {
		m.RecordAuditFrom("t1", "vault", time.Now().UTC(), []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	m.RecordAuditFrom("t1", "vault", time.Now().UTC(), []byte(`not json`))
	m.RecordAudit("t2", []byte(`{"other":true}`))
	waitFor(t, "the records are written", func() bool {
		p, err := m.ReadAudit(ctx, caller, AuditQuery{Limit: 100})
		return err == nil && len(p.Items) == 6
	})

	page, err := m.ReadAudit(ctx, caller, AuditQuery{Limit: 2})
	if err != nil || len(page.Items) != 2 || page.NextCursor == "" || page.Items[0].Source != "plugin" || string(page.Items[0].Record) != `{"n":0}` {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	rest, err := m.ReadAudit(ctx, caller, AuditQuery{Cursor: page.NextCursor})
	if err != nil || len(rest.Items) != 4 || rest.NextCursor != "" || rest.Items[0].Source != "vault" || string(rest.Items[3].Record) != "null" {
		t.Fatalf("second page = %+v, %v", rest, err)
	}
	newest, err := m.ReadAudit(ctx, caller, AuditQuery{Newest: true, Limit: 1})
	if err != nil || len(newest.Items) != 1 || newest.Items[0].ID != rest.Items[3].ID {
		t.Fatalf("newest = %+v, %v", newest, err)
	}
	older, err := m.ReadAudit(ctx, caller, AuditQuery{Newest: true, Limit: 1, Cursor: newest.Items[0].ID})
	if err != nil || len(older.Items) != 1 || older.Items[0].ID != rest.Items[2].ID {
		t.Fatalf("older = %+v, %v", older, err)
	}
	if tail, err := m.AuditTail(ctx, caller); err != nil || tail != newest.Items[0].ID {
		t.Fatalf("tail = %q, %v", tail, err)
	}
	if other, err := m.ReadAudit(ctx, principal.Caller{Tenant: "t2"}, AuditQuery{}); err != nil || len(other.Items) != 1 {
		t.Fatalf("another tenant's stream = %+v, %v", other, err)
	}
	for _, q := range []AuditQuery{{Limit: 1001}, {Cursor: "abc"}, {Cursor: "1-x"}} {
		if _, err := m.ReadAudit(ctx, caller, q); err == nil {
			t.Errorf("query %+v accepted", q)
		} else if e, ok := fault.AsError(err); !ok || e.Kind != fault.KindInvalid {
			t.Errorf("query %+v: %v, want an invalid parameter", q, err)
		}
	}
	d.Redis.Stop()
	if _, err := m.ReadAudit(ctx, caller, AuditQuery{}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("read with Redis down: %v", err)
	}
	if _, err := m.AuditTail(ctx, caller); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("tail with Redis down: %v", err)
	}
}

func TestAuditStopFlushesTheQueue(t *testing.T) {
	d := coredeps.Start(t)
	m, _ := newManager(t, d)
	m.StartAudit()
	for i := range 300 {
		m.RecordAudit("t1", []byte(fmt.Sprint(i)))
	}
	m.Stop()
	n, err := d.Store.Client().XLen(context.Background(), d.Store.Key("audit", "t1")).Result()
	if err != nil || n != 300 {
		t.Fatalf("after Stop the stream holds %d records (%v), want 300", n, err)
	}
}

func TestValidCursor(t *testing.T) {
	for c, want := range map[string]bool{"1": true, "1-2": true, "0-0": true, "": false, "x": false, "1-": false, "-1": false, "1-2-3": false} {
		if got := ValidCursor(c); got != want {
			t.Errorf("ValidCursor(%q) = %v, want %v", c, got, want)
		}
	}
}
