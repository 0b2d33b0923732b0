package tenantplugins

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/test/coredeps"
)

var (
	tenant1 = principal.Caller{Tenant: "t1", KeyID: "k1", KeyRole: principal.RoleTenantAdmin}
	tenant2 = principal.Caller{Tenant: "t2", KeyID: "k2", KeyRole: principal.RoleTenantAdmin}
)

// auditSink keeps the records the host's plugins emit with emit_audit.
type auditSink struct {
	mu      sync.Mutex
	records []string
}

func (a *auditSink) record(tenant string, record []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.records = append(a.records, tenant+" "+string(record))
}

func (a *auditSink) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.records...)
}

// replica is one gateway's plugin feature: a Manager with a real plugin host of its own,
// attached, over the shared store.
type replica struct {
	m     *Manager
	host  *plugins.Host
	audit *auditSink
}

func newReplica(t *testing.T, st *store.Store, opts plugins.HostOptions) replica {
	t.Helper()
	return newReplicaSyncing(t, st, opts, syncInterval)
}

// newReplicaSyncing is newReplica whose periodic sync runs every syncEvery.
func newReplicaSyncing(t *testing.T, st *store.Store, opts plugins.HostOptions, syncEvery time.Duration) replica {
	t.Helper()
	sink := &auditSink{}
	opts.CacheDir, opts.Audit = cacheDir, sink.record
	host, err := plugins.NewHost(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	m := New(st, nil)
	m.syncEvery = syncEvery
	m.Attach(context.Background(), host)
	t.Cleanup(func() {
		m.Stop()
		_ = host.Close(context.Background())
	})
	return replica{m: m, host: host, audit: sink}
}

func codeOf(err error) string {
	if e, ok := fault.AsError(err); ok {
		return e.Code
	}
	return ""
}

func kindOf(err error) fault.Kind {
	if e, ok := fault.AsError(err); ok {
		return e.Kind
	}
	return ""
}

func loaded(h *plugins.Host, tenant, name string) bool {
	for _, info := range h.List(tenant) {
		if info.Name == name {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWithoutAHost(t *testing.T) {
	d := coredeps.Start(t)
	m := New(d.Store, nil)
	t.Cleanup(m.Stop)
	ctx := context.Background()
	_, errPut := m.Put(ctx, tenant1, "p", []byte{0}, []byte(`{}`))
	_, errList := m.List(ctx, tenant1)
	_, errGet := m.Get(ctx, tenant1, "p")
	errDelete := m.Delete(ctx, tenant1, "p")
	for name, err := range map[string]error{"put": errPut, "list": errList, "get": errGet, "delete": errDelete} {
		if codeOf(err) != CodeDisabled || kindOf(err) != fault.KindUnavailable {
			t.Errorf("%s: %v, want %s", name, err, CodeDisabled)
		}
	}
	if m.Attached() || m.CallStats() != nil {
		t.Error("a Manager without a host reports one")
	}
	builtin := time.Now().Add(time.Hour)
	if exp, changed, err := m.DecideTTL(ctx, "t1", plugins.TTLInput{}, builtin); err != nil || !changed || !exp.Equal(builtin) {
		t.Errorf("DecideTTL = %v, %v, %v; want the built-in rule", exp, changed, err)
	}
	m.Publish(store.Event{Type: "sandbox.created", Tenant: "t1"}) // nothing to reach, and no panic
}

func TestManagePlugins(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	r := newReplica(t, d.Store, plugins.HostOptions{MaxPluginsPerTenant: 2})
	noop := example(t, "noop")

	st, err := r.m.Put(ctx, tenant1, "first", noop, []byte(`{"hooks":["on_event"],"settings":{"a":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Loaded || st.Name != "first" || len(st.Version) != 16 || st.Stats == nil || len(st.Hooks) != 1 || string(st.Settings) != `{"a":1}` {
		t.Fatalf("status = %+v", st)
	}
	// The same module with other settings is another version, which replicas reload.
	again, err := r.m.Put(ctx, tenant1, "first", noop, []byte(`{"hooks":["on_event"],"settings":{"a":2}}`))
	if err != nil || again.Version == st.Version {
		t.Fatalf("replacement: %+v, %v", again, err)
	}
	if _, err := r.m.Put(ctx, tenant1, "second", noop, []byte(`{"hooks":["on_event"]}`)); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name   string
		plugin string
		module []byte
		config string
		code   string
		kind   fault.Kind
	}{
		{"config not JSON", "x", noop, `{`, plugins.CodeInvalidConfig, fault.KindInvalid},
		{"unknown config field", "x", noop, `{"hook":["on_event"]}`, plugins.CodeInvalidConfig, fault.KindInvalid},
		{"no module", "x", nil, `{}`, plugins.CodeInvalidModule, fault.KindInvalid},
		{"module too large", "x", make([]byte, r.host.MaxModuleBytes()+1), `{}`, plugins.CodeModuleTooLarge, fault.KindTooLarge},
		{"one plugin too many", "third", noop, `{"hooks":["on_event"]}`, plugins.CodeTooManyPlugins, fault.KindConflict},
		{"not WebAssembly", "first", []byte("not wasm"), `{"hooks":["on_event"]}`, plugins.CodeInvalidModule, fault.KindUnprocessable},
		{"unknown hook", "first", noop, `{"hooks":["on_nothing"]}`, plugins.CodeInvalidConfig, fault.KindInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.m.Put(ctx, tenant1, tt.plugin, tt.module, []byte(tt.config))
			if codeOf(err) != tt.code || kindOf(err) != tt.kind {
				t.Fatalf("err = %v (kind %q), want %s (%s)", err, kindOf(err), tt.code, tt.kind)
			}
		})
	}

	list, err := r.m.List(ctx, tenant1)
	if err != nil || len(list) != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if got, err := r.m.Get(ctx, tenant1, "first"); err != nil || got.Version != again.Version {
		t.Fatalf("get after refused changes = %+v, %v; want the stored replacement", got, err)
	}
	// Another tenant sees none of them.
	if list, err := r.m.List(ctx, tenant2); err != nil || len(list) != 0 {
		t.Fatalf("another tenant's list = %+v, %v", list, err)
	}
	if _, err := r.m.Get(ctx, tenant2, "first"); codeOf(err) != plugins.CodeNotFound || kindOf(err) != fault.KindNotFound {
		t.Fatalf("another tenant's get: %v", err)
	}

	if err := r.m.Delete(ctx, tenant1, "first"); err != nil {
		t.Fatal(err)
	}
	if loaded(r.host, "t1", "first") {
		t.Error("a deleted plugin is still loaded")
	}
	if _, err := r.m.Get(ctx, tenant1, "first"); codeOf(err) != plugins.CodeNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := r.m.Delete(ctx, tenant1, "first"); codeOf(err) != plugins.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
}

func TestReplicasFollowTheStore(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	// The periodic sync is out of the way: the replicas follow the announcements.
	a := newReplicaSyncing(t, d.Store, plugins.HostOptions{}, time.Hour)
	noop := example(t, "noop")
	// b loads smaller modules than a: what a stores, b shows why it could not load.
	b := newReplicaSyncing(t, d.Store, plugins.HostOptions{MaxModuleBytes: len(noop) - 1}, time.Hour)
	c := newReplicaSyncing(t, d.Store, plugins.HostOptions{}, time.Hour)

	if _, err := a.m.Put(ctx, tenant1, "p", noop, []byte(`{"hooks":["on_event"]}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "another replica loads the stored plugin", func() bool { return loaded(c.host, "t1", "p") })
	waitFor(t, "a replica that cannot load it says why", func() bool {
		st, err := b.m.Get(ctx, tenant1, "p")
		return err == nil && !st.Loaded && st.LoadError != ""
	})
	if st, err := c.m.Get(ctx, tenant1, "p"); err != nil || !st.Loaded || st.LoadError != "" {
		t.Fatalf("status on a replica that loaded it: %+v, %v", st, err)
	}

	if err := a.m.Delete(ctx, tenant1, "p"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "another replica unloads the deleted plugin", func() bool { return !loaded(c.host, "t1", "p") })

	// A replica started after the plugins were stored loads them at Attach.
	if _, err := a.m.Put(ctx, tenant2, "q", noop, []byte(`{"hooks":["on_event"]}`)); err != nil {
		t.Fatal(err)
	}
	late := newReplica(t, d.Store, plugins.HostOptions{})
	if !loaded(late.host, "t2", "q") {
		t.Error("a replica attached late did not load the stored plugin")
	}
}

func TestPeriodicSyncCatchesMissedAnnouncements(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	a := newReplicaSyncing(t, d.Store, plugins.HostOptions{}, time.Hour)
	b := newReplicaSyncing(t, d.Store, plugins.HostOptions{}, 100*time.Millisecond)
	if _, err := a.m.Put(ctx, tenant1, "p", example(t, "noop"), []byte(`{"hooks":["on_event"]}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other replica loads the plugin", func() bool { return loaded(b.host, "t1", "p") })
	// The plugin's deletion, as plugins.Store.Delete writes it, but announced to nobody
	// (as while a replica's subscription is down): only the revision moves.
	prefix := d.Store.Key("")
	rdb := d.Store.Client()
	for _, cmd := range [][]any{
		{"DEL", prefix + "{plugins}:plugin:t1:p"},
		{"SREM", prefix + "{plugins}:plugins:t1", "p"},
		{"SREM", prefix + "{plugins}:plugins:tenants", "t1"},
		{"INCR", prefix + "{plugins}:plugins:revision"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the periodic sync unloads the plugin of a tenant gone from the store", func() bool { return !loaded(b.host, "t1", "p") })
}

func TestNoteLoadedEmptiesTenantsGoneFromTheStore(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	r := newReplica(t, d.Store, plugins.HostOptions{})
	// A plugin this replica runs for a tenant the store no longer has, as after a
	// deletion whose announcement did not reach it.
	if err := r.host.Load(ctx, plugins.Plugin{Tenant: "gone", Name: "p", Version: "v1", Module: example(t, "noop"),
		Config: plugins.Config{Hooks: []string{plugins.HookOnEvent}}}); err != nil {
		t.Fatal(err)
	}
	r.m.mu.Lock()
	r.m.tenants["gone"] = true
	r.m.mu.Unlock()
	r.m.noteLoaded(ctx)
	if loaded(r.host, "gone", "p") {
		t.Error("the plugin of a tenant gone from the store is still loaded")
	}
}

func TestPublishReachesTheTenantsOnEventPlugins(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	r := newReplica(t, d.Store, plugins.HostOptions{})
	if _, err := r.m.Put(ctx, tenant1, "audit", example(t, "audit-jsonl"), []byte(`{"hooks":["on_event"],"limits":{"timeoutMs":2000}}`)); err != nil {
		t.Fatal(err)
	}
	r.m.Publish(store.Event{Type: "sandbox.created", Tenant: "t2", SandboxID: "other", Time: time.Now()})
	r.m.Publish(store.Event{Type: "sandbox.created", Tenant: "t1", SandboxID: "sb-1", Time: time.Now(), Data: map[string]any{"image": "python"}})
	waitFor(t, "the plugin's audit record", func() bool { return len(r.audit.all()) > 0 })
	time.Sleep(200 * time.Millisecond) // room for a wrong delivery to show
	recs := r.audit.all()
	if len(recs) != 1 || !strings.HasPrefix(recs[0], "t1 ") || !strings.Contains(recs[0], "sb-1") || !strings.Contains(recs[0], "sandbox.created") {
		t.Fatalf("audit records = %q", recs)
	}
	var stats []string
	for _, s := range r.m.CallStats() {
		stats = append(stats, s.Name)
		if s.Name == "t1/audit" && s.Calls == 0 {
			t.Errorf("no calls counted: %+v", s)
		}
	}
	if len(stats) != 1 || stats[0] != "t1/audit" {
		t.Errorf("call statistics for %v", stats)
	}
}

func TestDecideTTL(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	r := newReplica(t, d.Store, plugins.HostOptions{})
	if _, err := r.m.Put(ctx, tenant1, "ttl", example(t, "ttl-on-activity"), []byte(`{"hooks":["decide_ttl"],"limits":{"timeoutMs":2000},"settings":{"extendMinutes":30}}`)); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	builtin := now.Add(5 * time.Minute)
	in := plugins.TTLInput{SandboxID: "sb-1", Reason: plugins.ReasonActivity, Now: now, CurrentExpiresAt: now.Add(time.Minute),
		MaxExpiresAt: now.Add(time.Hour), Activity: &plugins.Activity{Port: 8080, Method: "GET", Path: "/"}}
	exp, changed, err := r.m.DecideTTL(ctx, "t1", in, builtin)
	if err != nil || !changed || !exp.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("the plugin's decision = %v, %v, %v; want %v", exp, changed, err, now.Add(30*time.Minute))
	}
	// A tenant without a decide_ttl plugin gets the built-in rule, without an error.
	if exp, changed, err := r.m.DecideTTL(ctx, "t2", in, builtin); err != nil || !changed || !exp.Equal(builtin) {
		t.Fatalf("without a plugin = %v, %v, %v", exp, changed, err)
	}
	// A plugin that fails is an error, for the caller to apply its own rule.
	if _, err := r.m.Put(ctx, tenant2, "ttl", example(t, "bad-misbehave"), []byte(`{"hooks":["decide_ttl"],"limits":{"timeoutMs":2000}}`)); err != nil {
		t.Fatal(err)
	}
	in.SandboxID = "badjson"
	if _, _, err := r.m.DecideTTL(ctx, "t2", in, builtin); err == nil {
		t.Fatal("a plugin that answered malformed JSON decided")
	}
}

func TestPluginErrorKinds(t *testing.T) {
	for _, tt := range []struct {
		code string
		kind fault.Kind
	}{
		{plugins.CodeInvalidConfig, fault.KindInvalid},
		{plugins.CodeHookConflict, fault.KindConflict},
		{plugins.CodeTenantMemory, fault.KindConflict},
		{plugins.CodeModuleTooLarge, fault.KindTooLarge},
		{plugins.CodeNotFound, fault.KindNotFound},
		{plugins.CodeClosed, fault.KindUnavailable},
		{plugins.CodeTrap, fault.KindUnprocessable},
		{plugins.CodeInitFailed, fault.KindUnprocessable},
	} {
		t.Run(tt.code, func(t *testing.T) {
			err := pluginError(&plugins.Error{Code: tt.code, Message: "m"})
			if kindOf(err) != tt.kind || codeOf(err) != tt.code {
				t.Fatalf("%v: kind %q, want %q", err, kindOf(err), tt.kind)
			}
		})
	}
	if err := pluginError(json.Unmarshal([]byte("{"), &struct{}{})); !strings.Contains(err.Error(), "unavailable") && kindOf(err) != "" {
		t.Fatalf("a store error: %v", err)
	}
}
