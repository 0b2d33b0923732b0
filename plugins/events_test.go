package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/test/testenv"
)

// auditSink collects what plugins emit, per tenant.
type auditSink struct {
	mu      sync.Mutex
	records map[string][]string
	changed chan struct{}
}

func newAuditSink() *auditSink {
	return &auditSink{records: map[string][]string{}, changed: make(chan struct{}, 1)}
}

func (a *auditSink) audit(tenant string, record []byte) {
	a.mu.Lock()
	a.records[tenant] = append(a.records[tenant], string(record))
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *auditSink) get(tenant string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.records[tenant]...)
}

func (a *auditSink) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.records {
		n += len(r)
	}
	return n
}

// waitFor waits until the sink holds n records in all.
func (a *auditSink) waitFor(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for a.total() < n {
		select {
		case <-a.changed:
		case <-deadline:
			t.Fatalf("got %d audit records after %v, want %d", a.total(), within, n)
		}
	}
}

func event(t testing.TB, id, typ, tenant, sandbox string, data any) []byte {
	t.Helper()
	b, err := plugins.MarshalEvent(plugins.Event{
		ID: id, Type: typ, Tenant: tenant, SandboxID: sandbox,
		Time: time.Date(2026, 1, 5, 10, 0, 0, 123456789, time.UTC), Data: data,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadAudit(t *testing.T, h *plugins.Host, tenant, settings string) {
	t.Helper()
	err := h.Load(context.Background(), plugins.Plugin{
		Tenant: tenant, Name: "audit", Module: wasm(t, "audit-jsonl"),
		Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Settings: json.RawMessage(settings)},
	})
	if err != nil {
		t.Fatalf("Load audit-jsonl for %s: %v", tenant, err)
	}
}

func TestAuditRecords(t *testing.T) {
	sink := newAuditSink()
	h := newHost(t, plugins.HostOptions{Audit: sink.audit})
	loadAudit(t, h, "acme", `{}`)
	loadAudit(t, h, "globex", `{"types":["policy.denied"],"omitData":true}`)

	h.OnEvent("acme", event(t, "e1", plugins.EventPreviewAccessed, "acme", "sb-1", plugins.PreviewAccess{
		Port: 8080, Method: "GET", Path: "/index.html", Status: 200, Bytes: 512, DurationMs: 3, Credential: "signedLink",
	}))
	h.OnEvent("acme", event(t, "e2", plugins.EventSandboxCreated, "acme", "sb-1", nil))
	h.OnEvent("globex", event(t, "e3", plugins.EventSandboxCreated, "globex", "sb-2", nil))
	h.OnEvent("globex", event(t, "e4", plugins.EventPolicyDenied, "globex", "sb-2", plugins.PolicyDenial{
		Action: "sandbox.create", Code: "POLICY::DENIED", Message: "image not allowed",
	}))
	h.OnEvent("initech", event(t, "e5", plugins.EventSandboxCreated, "initech", "sb-3", nil)) // no plugin: nobody sees it
	sink.waitFor(t, 3, 10*time.Second)

	want := map[string][]string{
		"acme": {
			`{"t":"2026-01-05T10:00:00.123456789Z","tenant":"acme","ev":"preview.accessed","sb":"sb-1","id":"e1","data":{"port":8080,"method":"GET","path":"/index.html","status":200,"bytes":512,"durationMs":3,"credential":"signedLink"}}`,
			`{"t":"2026-01-05T10:00:00.123456789Z","tenant":"acme","ev":"sandbox.created","sb":"sb-1","id":"e2"}`,
		},
		"globex": {
			`{"t":"2026-01-05T10:00:00.123456789Z","tenant":"globex","ev":"policy.denied","sb":"sb-2","id":"e4"}`,
		},
	}
	got := map[string][]string{"acme": sink.get("acme"), "globex": sink.get("globex")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit records (-want +got):\n%s", diff)
	}
	if r := sink.get("initech"); len(r) != 0 {
		t.Errorf("tenant without plugins produced records: %q", r)
	}
}

// TestTenantIsolation floods two tenants at once and checks that each
// tenant's plugin saw its own events only, all of them.
func TestTenantIsolation(t *testing.T) {
	sink := newAuditSink()
	h := newHost(t, plugins.HostOptions{Audit: sink.audit, QueueSize: 512})
	tenants := []string{"acme", "globex"}
	for _, tenant := range tenants {
		loadAudit(t, h, tenant, `{"omitData":true}`)
	}
	const perTenant = 200
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		wg.Go(func() {
			for i := range perTenant {
				h.OnEvent(tenant, event(t, fmt.Sprintf("%s-%d", tenant, i), plugins.EventCommandStarted, tenant, "sb", nil))
			}
		})
	}
	wg.Wait()
	sink.waitFor(t, 2*perTenant, 20*time.Second)
	for _, tenant := range tenants {
		records := sink.get(tenant)
		if len(records) != perTenant {
			t.Errorf("%s: %d records, want %d", tenant, len(records), perTenant)
		}
		for i, r := range records {
			// The plugin copies the event's id; each must be this tenant's, in order.
			if want := fmt.Sprintf(`"id":"%s-%d"`, tenant, i); !strings.Contains(r, want) || !strings.Contains(r, `"tenant":"`+tenant+`"`) {
				t.Fatalf("%s record %d = %s, want %s", tenant, i, r, want)
			}
		}
	}
}

// TestReplaceWhileEventsFlow swaps a plugin's version several times while
// events stream in and checks that every event was delivered exactly once.
func TestReplaceWhileEventsFlow(t *testing.T) {
	sink := newAuditSink()
	h := newHost(t, plugins.HostOptions{Audit: sink.audit, QueueSize: 1 << 16})
	modules := [][]byte{wasm(t, "audit-jsonl"), wasm(t, "bad-misbehave")} // both emit one record per ordinary event
	load := func(i int) {
		err := h.Load(context.Background(), plugins.Plugin{
			Tenant: "acme", Name: "audit", Version: fmt.Sprint(i), Module: modules[i%2],
			// A generous deadline: compiling the next version competes
			// for the CPU, and a timeout here would be no replacement bug.
			Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}, Limits: plugins.Limits{TimeoutMs: 5000}},
		})
		if err != nil {
			t.Errorf("Load version %d: %v", i, err)
		}
	}
	load(0)

	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			h.OnEvent("acme", event(t, fmt.Sprint(n), plugins.EventFileWritten, "acme", "sb", nil))
			n++
			if n%20 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	const versions = 6
	for i := 1; i <= versions; i++ {
		load(i)
	}
	close(stop)
	events := <-sent
	t.Cleanup(func() {
		if t.Failed() {
			st, _ := h.Stats("acme", "audit")
			t.Logf("stats: %+v", st)
		}
	})
	sink.waitFor(t, events, 30*time.Second)
	st, err := h.Stats("acme", "audit")
	if err != nil {
		t.Fatal(err)
	}
	if st.Drops != 0 || st.Errors != 0 || st.Invocations != uint64(events) {
		t.Errorf("stats: %d invocations, %d errors, %d drops; want %d, 0, 0", st.Invocations, st.Errors, st.Drops, events)
	}
	if got := sink.total(); got != events {
		t.Errorf("%d audit records, want %d", got, events)
	}
	if st.Version != fmt.Sprint(versions) {
		t.Errorf("current version %q, want %d", st.Version, versions)
	}
	t.Logf("%d events across %d versions", events, versions+1)
}

// TestQueueFullDrops checks that OnEvent never blocks and counts what it drops.
func TestQueueFullDrops(t *testing.T) {
	h := loadMisbehave(t, plugins.HostOptions{QueueSize: 2}, plugins.Limits{})
	start := time.Now()
	for i := range 20 {
		h.OnEvent("t", event(t, fmt.Sprint(i), plugins.EventCommandStarted, "t", "slow", nil)) // 20 ms each
	}
	if elapsed := time.Since(start); elapsed > 50*time.Millisecond {
		t.Errorf("OnEvent blocked for %v", elapsed)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := h.Stats("t", "bad")
		if st.Invocations+st.Drops == 20 && st.Queued == 0 {
			if st.Drops < 10 {
				t.Errorf("%d drops with a queue of 2 and 20 slow events, want most of them", st.Drops)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never settled: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPluginLogs checks that a plugin's log lines reach the host's logger
// tagged with tenant and plugin.
func TestPluginLogs(t *testing.T) {
	var buf testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sink := newAuditSink()
	h := newHost(t, plugins.HostOptions{Logger: logger, Audit: sink.audit})
	loadAudit(t, h, "acme", `{}`)
	h.OnEvent("acme", []byte(`this is not json`))
	h.OnEvent("acme", event(t, "after", plugins.EventSandboxDeleted, "acme", "sb", nil))
	sink.waitFor(t, 1, 5*time.Second)
	out := buf.String()
	if !strings.Contains(out, "level=WARN msg=\"audit-jsonl: unreadable event") || !strings.Contains(out, "tenant=acme plugin=audit") {
		t.Errorf("log output lacks the plugin's warning:\n%s", out)
	}
}

// TestCloseDeliversQueued checks that Close delivers what was queued.
func TestCloseDeliversQueued(t *testing.T) {
	sink := newAuditSink()
	h, err := plugins.NewHost(context.Background(), plugins.HostOptions{CacheDir: cacheDir, Audit: sink.audit})
	if err != nil {
		t.Fatal(err)
	}
	loadAudit(t, h, "acme", `{}`)
	for i := range 50 {
		h.OnEvent("acme", event(t, fmt.Sprint(i), plugins.EventFileWritten, "acme", "sb", nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := sink.total(); got != 50 {
		t.Errorf("%d records delivered before Close returned, want 50", got)
	}
	if err := h.Load(ctx, plugins.Plugin{Tenant: "acme", Name: "x", Module: wasm(t, "noop"), Config: plugins.Config{Hooks: []string{"on_event"}}}); plugins.ErrorCode(err) != plugins.CodeClosed {
		t.Errorf("Load after Close: %v, want %s", err, plugins.CodeClosed)
	}
}
