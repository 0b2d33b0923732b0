package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/test/coredeps"
	"github.com/sandgate/sandgate/test/testenv"
)

// The core beside itself: a Service on a real redis-server (test/coredeps) and the
// in-process runtime (real agent API, real entrypoint processes), no Docker. Each test
// runs in milliseconds to a few seconds.

type testCore struct {
	redis *testenv.Redis
	svc   *Service
	store *store.Store
	rt    *inprocess.Runtime
}

// newTestCore starts a Service with cfg on its own redis-server and in-process runtime.
func newTestCore(t *testing.T, cfg Config) *testCore {
	t.Helper()
	d := coredeps.Start(t)
	svc := New(cfg, d.Store, d.Runtime, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	t.Cleanup(svc.Stop)
	return &testCore{redis: d.Redis, svc: svc, store: d.Store, rt: d.Runtime}
}

var admin = Caller{Tenant: DefaultTenant, Admin: true, KeyID: "admin"}

func sleeper(timeout int64) CreateRequest {
	return CreateRequest{Image: &ImageSpec{URI: "sandgate/base:test"}, Entrypoint: []string{"sleep", "600"}, Timeout: &timeout}
}

// wantCode fails unless err is an *Error of the given kind and code.
func wantCode(t *testing.T, err error, kind Kind, code string) {
	t.Helper()
	e, ok := AsError(err)
	if !ok || e.Kind != kind || (code != "" && e.Code != code) {
		t.Fatalf("error = %v, want %s %s", err, kind, code)
	}
}

// clientMistake reports whether gateway/api answers kind with a 4xx.
func clientMistake(k Kind) bool {
	switch k {
	case KindInternal, KindUnsupported, KindUpstream, KindUnavailable, KindTimeout:
		return false
	}
	return true
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, cond, what)
}

// TestColdLifecycle: create, get, pause, resume, renew and delete, each reaching the runtime.
func TestColdLifecycle(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.State != StateRunning {
		t.Fatalf("created in state %s", resp.Status.State)
	}
	inst, err := c.rt.Inspect(ctx, resp.ID)
	if err != nil || inst.State != runtimes.StateRunning {
		t.Fatalf("runtime: %+v, %v", inst, err)
	}
	if got, err := c.svc.Get(ctx, admin, resp.ID); err != nil || got.ID != resp.ID {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if err := c.svc.Pause(ctx, admin, resp.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "paused in the runtime", func() bool {
		inst, _ := c.rt.Inspect(ctx, resp.ID)
		return inst.State == runtimes.StatePaused
	})
	eventually(t, "the record paused", func() bool {
		got, err := c.svc.Get(ctx, admin, resp.ID)
		return err == nil && got.Status.State == StatePaused
	})
	if err := c.svc.Resume(ctx, admin, resp.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record running again", func() bool {
		got, err := c.svc.Get(ctx, admin, resp.ID)
		return err == nil && got.Status.State == StateRunning
	})
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if got, err := c.svc.Renew(ctx, admin, resp.ID, later); err != nil || !got.Equal(later) {
		t.Fatalf("Renew = %s, %v", got, err)
	}
	if err := c.svc.Delete(ctx, admin, resp.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the runtime sandbox removed", func() bool {
		_, err := c.rt.Inspect(ctx, resp.ID)
		return errors.Is(err, runtimes.ErrNotFound)
	})
	if _, err := c.svc.Get(ctx, admin, resp.ID); err == nil {
		t.Fatal("a deleted sandbox is still found")
	} else {
		wantCode(t, err, KindNotFound, CodeNotFound)
	}
}

// TestExpiryRemovesSandbox: the reaper removes a sandbox past its expiresAt, record and
// runtime sandbox alike.
func TestExpiryRemovesSandbox(t *testing.T) {
	c := newTestCore(t, Config{MinTimeout: time.Second, ReapInterval: 50 * time.Millisecond})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, sleeper(1))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the expired sandbox removed from the runtime", func() bool {
		_, err := c.rt.Inspect(ctx, resp.ID)
		return errors.Is(err, runtimes.ErrNotFound)
	})
	eventually(t, "the expired record removed", func() bool {
		_, err := c.svc.Get(ctx, admin, resp.ID)
		return err != nil
	})
}

// TestBadCreateChangesNothing: a create the core must refuse answers a 4xx with a code
// and leaves neither a record nor a runtime sandbox.
func TestBadCreateChangesNothing(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	neg, long := int64(-5), int64(10*365*24*3600)
	tests := []struct {
		name string
		req  CreateRequest
	}{
		{"no image", CreateRequest{Entrypoint: []string{"sleep", "1"}}},
		{"negative timeout", CreateRequest{Image: &ImageSpec{URI: "sandgate/base:test"}, Entrypoint: []string{"sleep", "1"}, Timeout: &neg}},
		{"timeout past the maximum", CreateRequest{Image: &ImageSpec{URI: "sandgate/base:test"}, Entrypoint: []string{"sleep", "1"}, Timeout: &long}},
		{"bad cpu", func() CreateRequest { r := sleeper(600); r.ResourceLimits = map[string]string{"cpu": "lots"}; return r }()},
		{"cpu NaN", func() CreateRequest { r := sleeper(600); r.ResourceLimits = map[string]string{"cpu": "NaN"}; return r }()},
		{"bad metadata key", func() CreateRequest { r := sleeper(600); r.Metadata = map[string]string{"bad key!": "v"}; return r }()},
		{"unknown pool", func() CreateRequest { r := sleeper(600); r.Extensions = map[string]string{"poolRef": "nope"}; return r }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.svc.Create(ctx, admin, tt.req)
			e, ok := AsError(err)
			if !ok || !clientMistake(e.Kind) || e.Code == "" {
				t.Fatalf("Create = %v, want a 4xx with a code", err)
			}
		})
	}
	if list, _ := c.rt.List(ctx); len(list) != 0 {
		t.Fatalf("refused creates left runtime sandboxes: %+v", list)
	}
	if n, _ := c.store.CountSandboxes(ctx, DefaultTenant); n != 0 {
		t.Fatalf("refused creates left %d records", n)
	}
}

// TestAdmissionQuota: a tenant at its concurrency quota is refused with a 429, and has
// room again once one of its sandboxes is gone.
func TestAdmissionQuota(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	tenant, err := c.svc.Tenancy().CreateTenant(ctx, TenantRequest{Name: "acme", Quotas: &store.Quotas{MaxConcurrent: 1}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.svc.Tenancy().CreateKey(ctx, tenant.ID, "member")
	if err != nil {
		t.Fatal(err)
	}
	caller, err := c.svc.Authenticate(ctx, key.Key)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.svc.Create(ctx, caller, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.svc.Create(ctx, caller, sleeper(600))
	wantCode(t, err, KindQuota, "")
	if err := c.svc.Delete(ctx, caller, first.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "room in the quota again", func() bool {
		_, err := c.svc.Create(ctx, caller, sleeper(600))
		return err == nil
	})
	// Another tenant's caller does not see acme's sandbox.
	if _, err := c.svc.Get(ctx, Caller{Tenant: "other", KeyID: "k", KeyRole: "member"}, first.ID); err == nil {
		t.Fatal("another tenant reads acme's sandbox")
	}
}

// TestClaimFromPool: the pool manager fills a pool with warm in-process sandboxes; a
// create naming the pool claims one of them (no new runtime sandbox on the claim path),
// applies its metadata, and the pool refills.
func TestClaimFromPool(t *testing.T) {
	c := newTestCore(t, Config{PoolInterval: 50 * time.Millisecond})
	ctx := context.Background()
	tmpl := sleeper(600)
	if _, err := c.svc.Pools().Create(ctx, admin, PoolRequest{Name: "warm", Template: &tmpl,
		CapacitySpec: store.Capacity{BufferMin: 2, BufferMax: 2, PoolMin: 0, PoolMax: 5}}); err != nil {
		t.Fatal(err)
	}
	available := func() int64 {
		p, err := c.svc.Pools().Get(ctx, admin, "warm")
		if err != nil {
			return -1
		}
		return p.Status.Available
	}
	eventually(t, "two warm sandboxes", func() bool { return available() == 2 })
	before, _ := c.rt.List(ctx)
	req := sleeper(600)
	req.Extensions = map[string]string{"poolRef": "warm"}
	req.Metadata = map[string]string{"claimed": "yes"}
	resp, err := c.svc.Create(ctx, admin, req)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, inst := range before {
		found = found || inst.ID == resp.ID
	}
	if !found {
		t.Fatalf("claimed %s, not one of the warm sandboxes %+v", resp.ID, before)
	}
	if resp.Metadata["claimed"] != "yes" {
		t.Fatalf("claim metadata = %v", resp.Metadata)
	}
	eventually(t, "the pool refilled", func() bool { return available() == 2 })
}

// TestReconcilerFollowsTheRuntime: a sandbox that vanished from the runtime is marked
// Failed, one that exited too, and a labelled sandbox without a record is adopted (with
// the snapshot it was made from).
func TestReconcilerFollowsTheRuntime(t *testing.T) {
	c := newTestCore(t, Config{SyncInterval: 50 * time.Millisecond})
	ctx := context.Background()
	gone, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	exits := sleeper(600)
	exits.Entrypoint = []string{"sh", "-c", "sleep 0.2; exit 7"}
	exited, err := c.svc.Create(ctx, admin, exits)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.rt.Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	reason := func(id string) string {
		got, err := c.svc.Get(ctx, admin, id)
		if err != nil || got.Status.State != StateFailed {
			return ""
		}
		return got.Status.Reason
	}
	eventually(t, "the vanished sandbox Failed", func() bool { return reason(gone.ID) == "CONTAINER_VANISHED" })
	eventually(t, "the exited sandbox Failed", func() bool { return reason(exited.ID) == "EXITED" })

	cluster, err := c.svc.recovery.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour)
	orphan := uuid.NewString()
	if _, err := c.rt.Create(ctx, runtimes.Spec{ID: orphan, Tenant: DefaultTenant, Image: "sandgate/base:test",
		Entrypoint: []string{"sleep", "600"}, AgentToken: "tok", CreatedAt: time.Now().Add(-time.Hour), ExpiresAt: &expires,
		Labels: map[string]string{runtimes.LabelCluster: cluster, labelFromSnapshot: "snap-1"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the labelled sandbox adopted", func() bool {
		got, err := c.svc.Get(ctx, admin, orphan)
		return err == nil && got.Status.State == StateRunning
	})
	if got, _ := c.svc.Get(ctx, admin, orphan); got.SnapshotID != "snap-1" {
		t.Errorf("the adopted sandbox names snapshot %q, want the one its label names", got.SnapshotID)
	}
	if n := c.svc.BackgroundErrors()["reconciler"]; n != 0 {
		t.Errorf("the reconciler met %d errors on a healthy store and runtime", n)
	}
}

// TestBackgroundErrorsAreCounted: with the store gone (the real redis-server stopped),
// the reaper and the reconciler count their errors instead of dropping them.
func TestBackgroundErrorsAreCounted(t *testing.T) {
	c := newTestCore(t, Config{ReapInterval: 20 * time.Millisecond, SyncInterval: 20 * time.Millisecond})
	c.redis.Stop()
	eventually(t, "reaper and reconciler errors counted", func() bool {
		n := c.svc.BackgroundErrors()
		return n["reaper"] > 0 && n["reconciler"] > 0
	})
}

// TestAdmissionCreateRate: a tenant's create bucket (one token every 1000 s, burst 1)
// lets one create through and refuses the next with a 429 (CodeQuotaRate) before
// anything is made.
func TestAdmissionCreateRate(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	tenant, err := c.svc.Tenancy().CreateTenant(ctx, TenantRequest{Name: "slow", Quotas: &store.Quotas{CreateRate: 0.001, CreateBurst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.svc.Tenancy().CreateKey(ctx, tenant.ID, "member")
	if err != nil {
		t.Fatal(err)
	}
	caller, err := c.svc.Authenticate(ctx, key.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.svc.Create(ctx, caller, sleeper(600)); err != nil {
		t.Fatal(err)
	}
	_, err = c.svc.Create(ctx, caller, sleeper(600))
	wantCode(t, err, KindQuota, CodeQuotaRate)
	if n, _ := c.store.CountSandboxes(ctx, tenant.ID); n != 1 {
		t.Fatalf("tenant holds %d sandboxes after a refused create, want 1", n)
	}
}

// TestActivityRecorded: a proxied access records the sandbox's last activity in the
// store, also when it has no renew-on-access (then the access log writer sends it with
// others in one command); the next access within activityThrottle does not move it.
func TestActivityRecorded(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).UTC()
	for _, tt := range []struct {
		name       string
		extensions map[string]string
	}{
		{"plain", nil},
		{"renew on access", map[string]string{access.ExtensionRenewExtend: "60"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now().UTC()
			rec := &store.Sandbox{ID: uuid.NewString(), Tenant: DefaultTenant, State: StateRunning, Image: "img",
				CreatedAt: now, LastTransitionAt: now, ExpiresAt: &exp, Extensions: tt.extensions}
			if err := c.store.CreateSandbox(ctx, rec, 0); err != nil {
				t.Fatal(err)
			}
			c.svc.Access().RecordAccess(rec, access.AccessRecord{Port: 44772, Method: "POST", Path: "/command", Status: 200})
			var first time.Time
			deadline := time.Now().Add(5 * time.Second)
			for first.IsZero() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				var err error
				if first, err = c.store.LastActivity(ctx, rec.ID); err != nil {
					t.Fatal(err)
				}
			}
			if first.IsZero() {
				t.Fatal("no activity recorded within 5s")
			}
			c.svc.Access().RecordAccess(rec, access.AccessRecord{Port: 44772, Method: "POST", Path: "/command", Status: 200})
			time.Sleep(300 * time.Millisecond) // past the writer's flush
			if again, _ := c.store.LastActivity(ctx, rec.ID); !again.Equal(first) {
				t.Errorf("activity moved within the throttle: %v, then %v", first, again)
			}
		})
	}
}

// TestAccessEventsWritten: every proxied access becomes one preview.accessed event in
// the tenant's stream, with the request's port, method, path, status, size, duration
// and credential as data (the batched writer, runEventWriter, with typed data).
func TestAccessEventsWritten(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	now := time.Now().UTC()
	rec := &store.Sandbox{ID: uuid.NewString(), Tenant: DefaultTenant, State: StateRunning, Image: "img", CreatedAt: now, LastTransitionAt: now}
	if err := c.store.CreateSandbox(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	const n = 300 // more than one batch (eventBatch)
	for i := 0; i < n; i++ {
		c.svc.Access().RecordAccess(rec, access.AccessRecord{Port: 8000, Method: "GET", Path: fmt.Sprintf("/p/%d", i), Status: 200, Bytes: int64(i),
			Duration: 1500 * time.Microsecond, Credential: principal.CredSandboxToken})
	}
	var evs []store.Event
	deadline := time.Now().Add(5 * time.Second)
	for len(evs) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		var err error
		if evs, err = c.store.ReadEvents(ctx, DefaultTenant, "", 1000); err != nil {
			t.Fatal(err)
		}
	}
	var seen int
	for _, ev := range evs {
		if ev.Type != "preview.accessed" || ev.SandboxID != rec.ID {
			continue
		}
		want := map[string]any{"port": 8000.0, "method": "GET", "path": fmt.Sprintf("/p/%d", seen), "status": 200.0,
			"bytes": float64(seen), "durationMs": 1.5, "credential": principal.CredSandboxToken}
		if diff := cmp.Diff(want, ev.Data); diff != "" {
			t.Fatalf("event %d data (-want +got):\n%s", seen, diff)
		}
		seen++
	}
	if seen != n {
		t.Fatalf("%d preview.accessed events written, want %d", seen, n)
	}
}

// TestSnapshotIDInTheView: the snapshot a sandbox was created from (store.Sandbox's
// SnapshotID, written by a create with snapshotId on a runtime with snapshots) is in
// what GET answers, and a sandbox made from an image has none.
func TestSnapshotIDInTheView(t *testing.T) {
	c := newTestCore(t, Config{})
	ctx := context.Background()
	plain, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	snap := uuid.NewString()
	if _, err := c.store.ModifySandbox(ctx, copied.ID, func(sb *store.Sandbox) error { sb.SnapshotID = snap; return nil }); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{plain.ID: "", copied.ID: snap} {
		got, err := c.svc.Get(ctx, admin, id)
		if err != nil || got.SnapshotID != want {
			t.Fatalf("Get %s = %+v, %v; want snapshotId %q", id, got, err, want)
		}
	}
}

// TestReconcilerListOlderThanAPause replays a reconcile pass that lists the containers,
// then sees a pause land, then reads the records: the list (running) is older than the
// record (paused) and must not write Running back. A second pause of that sandbox is a
// conflict, and so is one the engine refuses because it has paused the sandbox already.
func TestReconcilerListOlderThanAPause(t *testing.T) {
	// No pass of its own meanwhile: this test plays the pass.
	c := newTestCore(t, Config{SyncInterval: time.Hour})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	listedAt := time.Now().UTC()
	inst, err := c.rt.Inspect(ctx, resp.ID)
	if err != nil || inst.State != runtimes.StateRunning {
		t.Fatalf("runtime before the pause: %+v, %v", inst, err)
	}
	if err := c.svc.Pause(ctx, admin, resp.ID); err != nil {
		t.Fatal(err)
	}
	rec, err := c.store.GetSandbox(ctx, resp.ID)
	if err != nil || rec.State != StatePaused {
		t.Fatalf("record after the pause: %+v, %v", rec, err)
	}
	c.svc.syncRecord(ctx, rec, inst, true, listedAt, time.Now().UTC())
	if got, err := c.store.GetSandbox(ctx, resp.ID); err != nil || got.State != StatePaused {
		t.Fatalf("after a pass with a list older than the pause: %+v, %v; want Paused", got, err)
	}
	wantCode(t, c.svc.Pause(ctx, admin, resp.ID), KindConflict, CodeNotRunning)

	// The record says Running while the engine has the sandbox paused (a write of the
	// record lost, or another gateway's view): the engine's refusal is a conflict too.
	if _, err := c.store.ModifySandbox(ctx, resp.ID, func(sb *store.Sandbox) error { sb.State = StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.svc.Pause(ctx, admin, resp.ID), KindConflict, CodeNotRunning)

	// A list taken after the last transition still corrects the record.
	rec, err = c.store.GetSandbox(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	listedAt = time.Now().UTC()
	inst, err = c.rt.Inspect(ctx, resp.ID)
	if err != nil || inst.State != runtimes.StatePaused {
		t.Fatalf("runtime: %+v, %v", inst, err)
	}
	c.svc.syncRecord(ctx, rec, inst, true, listedAt, time.Now().UTC())
	if got, err := c.store.GetSandbox(ctx, resp.ID); err != nil || got.State != StatePaused {
		t.Fatalf("after a pass with a newer list: %+v, %v; want Paused", got, err)
	}
}

// TestReconcilerWriteChecksTheTransition: a record that went through a transition and
// back to the state the pass read (paused, resumed, paused again) since the pass read it
// is not written.
func TestReconcilerWriteChecksTheTransition(t *testing.T) {
	// No pass of its own meanwhile: this test plays the pass.
	c := newTestCore(t, Config{SyncInterval: time.Hour})
	ctx := context.Background()
	resp, err := c.svc.Create(ctx, admin, sleeper(600))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.svc.Pause(ctx, admin, resp.ID); err != nil {
		t.Fatal(err)
	}
	inst, err := c.rt.Inspect(ctx, resp.ID)
	if err != nil || inst.State != runtimes.StatePaused {
		t.Fatalf("runtime: %+v, %v", inst, err)
	}
	// The pass read the record Running (before the pause) and lists the sandbox
	// paused; meanwhile the record was paused, resumed and is Running again with a
	// newer transition.
	stale, err := c.store.GetSandbox(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale.State = StateRunning
	stale.LastTransitionAt = stale.LastTransitionAt.Add(-time.Minute)
	if _, err := c.store.ModifySandbox(ctx, resp.ID, func(sb *store.Sandbox) error {
		sb.State, sb.LastTransitionAt = StateRunning, time.Now().UTC()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.svc.syncRecord(ctx, stale, inst, true, time.Now().UTC(), time.Now().UTC())
	if got, err := c.store.GetSandbox(ctx, resp.ID); err != nil || got.State != StateRunning {
		t.Fatalf("record %+v, %v; want the newer Running left alone", got, err)
	}
}
