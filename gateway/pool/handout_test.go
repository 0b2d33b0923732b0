package pool

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
)

// putTemplatePool stores a pool of the default tenant whose template is tmpl.
func (s started) putTemplatePool(t *testing.T, name string, tmpl createreq.Request, c store.Capacity) *store.Pool {
	t.Helper()
	raw, _ := json.Marshal(tmpl)
	p := &store.Pool{Tenant: "default", Name: name, Template: raw, Capacity: c, Version: 1}
	if err := s.d.Store.PutPool(context.Background(), p, true); err != nil {
		t.Fatal(err)
	}
	return p
}

func int64p(v int64) *int64 { return &v }

// TestCreateFromPool: a create naming a pool gets a warm member with the claim's
// metadata, expiry and late binding, its sandbox.created event written before it is
// answered.
func TestCreateFromPool(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{Wait: time.Second})
	tmpl := createreq.Request{Image: &createreq.ImageSpec{URI: "test"}, Entrypoint: []string{"sleep"}, Timeout: int64p(600), Metadata: map[string]string{"team": "a"}}
	p := s.putTemplatePool(t, "warm", tmpl, store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 2})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 1)

	req := createreq.Request{Metadata: map[string]string{"app": "web"}, Env: map[string]string{"A": "1"}, Entrypoint: []string{"run"}, Timeout: int64p(120)}
	caller := principal.Caller{Tenant: "default", KeyID: "k1"}
	before := time.Now()
	sb, err := s.m.CreateFromPool(ctx, caller, "warm", req)
	if err != nil {
		t.Fatal(err)
	}
	rec := s.record(t, sb.ID)
	if rec.Metadata["team"] != "a" || rec.Metadata["app"] != "web" || rec.Metadata[MetadataPool] != "warm" {
		t.Errorf("metadata %v", rec.Metadata)
	}
	if rec.ExpiresAt == nil || rec.ExpiresAt.Before(before.Add(119*time.Second)) || rec.ExpiresAt.After(before.Add(130*time.Second)) {
		t.Errorf("expiresAt %v, want the claim's 120 s", rec.ExpiresAt)
	}
	if rec.LateBind == nil || rec.LateBind.Env["A"] != "1" || !rec.LateBind.Entrypoint {
		t.Errorf("late binding %+v, want env A=1 and the entrypoint", rec.LateBind)
	}
	if len(rec.Entrypoint) != 1 || rec.Entrypoint[0] != "run" {
		t.Errorf("entrypoint %v", rec.Entrypoint)
	}
	s.host.mu.Lock()
	events := append([]store.Event(nil), s.host.events...)
	s.host.mu.Unlock()
	if len(events) != 1 || events[0].Type != plugins.EventSandboxCreated || events[0].SandboxID != sb.ID || events[0].Data["key"] != "k1" {
		t.Fatalf("events %+v", events)
	}

	// A claim that changes nothing late leaves no binding.
	if lb := lateBindOf(createreq.Request{NetworkPolicy: json.RawMessage(" null ")}, false); lb != nil {
		t.Fatalf("lateBindOf of nothing = %+v", lb)
	}
}

// TestCreateFromPoolRefuses: the claim's checks, its image and admission come before
// any member is taken.
func TestCreateFromPoolRefuses(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{Wait: 50 * time.Millisecond, Fallback: "fail"})
	s.putTemplatePool(t, "warm", createreq.Request{Image: &createreq.ImageSpec{URI: "test"}}, store.Capacity{PoolMax: 2})
	caller := principal.Caller{Tenant: "default"}
	codeOf := func(err error) string {
		if e, ok := fault.AsError(err); ok {
			return e.Code
		}
		return ""
	}
	if _, err := s.m.CreateFromPool(ctx, caller, "missing", createreq.Request{}); codeOf(err) != CodeNotFound {
		t.Fatalf("an unknown pool: %v", err)
	}
	if _, err := s.m.CreateFromPool(ctx, caller, "warm", createreq.Request{Image: &createreq.ImageSpec{URI: "other"}}); codeOf(err) != fault.CodeInvalidParameter {
		t.Fatalf("another image: %v", err)
	}
	s.host.mu.Lock()
	s.host.refuseClaims = true
	s.host.mu.Unlock()
	if _, err := s.m.CreateFromPool(ctx, caller, "warm", createreq.Request{}); codeOf(err) != fault.CodeInvalidParameter {
		t.Fatalf("a claim the core refuses: %v", err)
	}
	s.host.mu.Lock()
	s.host.refuseClaims, s.host.refuseAdmission = false, true
	s.host.mu.Unlock()
	if _, err := s.m.CreateFromPool(ctx, caller, "warm", createreq.Request{}); codeOf(err) != "QUOTA::CONCURRENT_SANDBOXES" {
		t.Fatalf("a claim admission refuses: %v", err)
	}
	s.host.mu.Lock()
	s.host.refuseAdmission = false
	s.host.mu.Unlock()
	// No warm member comes within the wait: the pool fails, as configured.
	if _, err := s.m.CreateFromPool(ctx, caller, "warm", createreq.Request{}); codeOf(err) != CodeEmpty {
		t.Fatalf("an empty pool: %v, want %s", err, CodeEmpty)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s.m.cfg.Wait = time.Hour
	if _, err := s.m.CreateFromPool(cctx, caller, "warm", createreq.Request{}); err == nil {
		t.Fatal("a cancelled claim waited on")
	}
}

// TestCreateFromPoolCold: an empty pool with the cold fallback creates the sandbox
// cold from its template, with the claim's fields over it.
func TestCreateFromPoolCold(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{Wait: 50 * time.Millisecond, Fallback: "cold"})
	tmpl := createreq.Request{Image: &createreq.ImageSpec{URI: "test"}, Timeout: int64p(600), Metadata: map[string]string{"team": "a"}, Env: map[string]string{"A": "1"}}
	s.putTemplatePool(t, "empty", tmpl, store.Capacity{PoolMax: 2})
	req := createreq.Request{Metadata: map[string]string{"app": "web"}, Env: map[string]string{"B": "2"}, Entrypoint: []string{"run"},
		NetworkPolicy: json.RawMessage(`{"defaultAction":"deny"}`)}
	sb, err := s.m.CreateFromPool(ctx, principal.Caller{Tenant: "default"}, "empty", req)
	if err != nil {
		t.Fatal(err)
	}
	s.host.mu.Lock()
	defer s.host.mu.Unlock()
	if len(s.host.colds) != 1 || sb.ID == "" {
		t.Fatalf("cold creates %d, sandbox %q", len(s.host.colds), sb.ID)
	}
	c := s.host.colds[0]
	if c.Metadata["team"] != "a" || c.Metadata["app"] != "web" || c.Env["A"] != "1" || c.Env["B"] != "2" ||
		c.Entrypoint[0] != "run" || *c.Timeout != 600 || string(c.NetworkPolicy) != `{"defaultAction":"deny"}` {
		t.Fatalf("cold create of %+v", c)
	}
}

// TestTakeSeveral: a batch's claim of several members names the batch on each and
// writes their events while the caller goes on.
func TestTakeSeveral(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	tmpl := createreq.Request{Image: &createreq.ImageSpec{URI: "test"}}
	p := s.putTemplatePool(t, "warm", tmpl, store.Capacity{BufferMin: 3, BufferMax: 3, PoolMax: 3})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 3)
	got, emitted, err := s.m.Take(ctx, principal.Caller{Tenant: "default"}, p, tmpl, createreq.Request{}, 2, "batch-1")
	if err != nil || len(got) != 2 {
		t.Fatalf("Take = %d, %v", len(got), err)
	}
	emitted()
	for _, sb := range got {
		if rec := s.record(t, sb.ID); rec.Batch != "batch-1" || rec.Metadata[metadataBatch] != "batch-1" || rec.ExpiresAt != nil {
			t.Errorf("member %s: batch %q, metadata %v, expiresAt %v", sb.ID, rec.Batch, rec.Metadata, rec.ExpiresAt)
		}
	}
	s.host.mu.Lock()
	n := len(s.host.events)
	s.host.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}
