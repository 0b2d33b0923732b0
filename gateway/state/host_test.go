package state

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: sandboxes are looked up
// in the store by tenant, quotas and the batch a fork asks for are the test's to say,
// and what the feature hands the core (events, dropped routes, batches) is kept for the
// test to read.
type testHost struct {
	st *store.Store

	mu       sync.Mutex
	quotas   store.Quotas
	claimErr error
	batchErr error
	batches  []batchCall
	emitted  []store.Event
	dropped  []string
	audited  []string
	noLease  bool
}

// batchCall is one batch a fork asked the core for.
type batchCall struct {
	owner principal.Caller
	snap  *store.Snapshot
	req   ForkRequest
}

func (h *testHost) Lookup(ctx context.Context, caller principal.Caller, id string) (*store.Sandbox, error) {
	sb, err := h.st.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Admin && sb.Tenant != caller.Tenant) {
		return nil, fault.NotFound(id)
	}
	return sb, err
}

func (h *testHost) TenantQuotas(context.Context, string) (store.Quotas, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.quotas, nil
}

func (h *testHost) ClusterID(context.Context) (string, error) { return "cluster-1", nil }

func (h *testHost) CheckClaimInput(*int64, map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claimErr
}

func (h *testHost) StartBatch(_ context.Context, owner principal.Caller, snap *store.Snapshot, req ForkRequest) (*apiproto.Batch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.batchErr != nil {
		return nil, h.batchErr
	}
	h.batches = append(h.batches, batchCall{owner: owner, snap: snap, req: req})
	return &apiproto.Batch{ID: uuid.NewString(), Count: req.Count}, nil
}

func (h *testHost) Emit(_ context.Context, sb *store.Sandbox, typ string, data map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.emitted = append(h.emitted, store.Event{Type: typ, Tenant: sb.Tenant, SandboxID: sb.ID, Data: data})
}

func (h *testHost) Audit(tenant, source string, _ time.Time, record []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.audited = append(h.audited, string(record))
}

func (h *testHost) DropRoute(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = append(h.dropped, id)
}

func (h *testHost) StoreError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fault.NotFound(id)
	}
	return err
}

func (h *testHost) HoldLease(context.Context, string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.noLease
}

// set changes the host's answers under its lock.
func (h *testHost) set(fn func(h *testHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(h)
}

// events are the events of type typ emitted so far.
func (h *testHost) events(typ string) []store.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []store.Event
	for _, ev := range h.emitted {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

var _ Host = (*testHost)(nil)

// snapshottingRuntime is the in-process runtime with the snapshot ability of the Docker
// runtime, whose commit needs an engine: an image is a name it keeps in memory. Whether
// a commit fails, waits, or an image is still in use are the test's to say: faults a
// real engine gives only by chance.
type snapshottingRuntime struct {
	*inprocess.Runtime
	mu        sync.Mutex
	images    map[string]map[string]string
	commitErr error
	removeErr error
	// removeInUse is how many removals more answer ErrInUse: an engine that lets an
	// image go a moment after the container that used it.
	removeInUse int
	gate        chan struct{} // when set, a commit waits for it to close
	discarded   []string
}

func (r *snapshottingRuntime) Snapshot(ctx context.Context, id, ref string, labels map[string]string) error {
	r.mu.Lock()
	gate, err := r.gate, r.commitErr
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	if _, ierr := r.Inspect(ctx, id); ierr != nil {
		return ierr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images[ref] = labels
	return nil
}

func (r *snapshottingRuntime) RemoveSnapshot(_ context.Context, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removeErr != nil {
		return r.removeErr
	}
	if r.removeInUse > 0 {
		r.removeInUse--
		return runtimes.ErrInUse
	}
	delete(r.images, ref)
	return nil
}

func (r *snapshottingRuntime) DiscardVolumes(_ context.Context, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discarded = append(r.discarded, id)
}

// hasImage reports whether the runtime keeps image ref.
func (r *snapshottingRuntime) hasImage(ref string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.images[ref]
	return ok
}

// set changes the runtime's faults under its lock.
func (r *snapshottingRuntime) set(fn func(r *snapshottingRuntime)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

var (
	_ runtimes.Snapshotter     = (*snapshottingRuntime)(nil)
	_ runtimes.VolumeDiscarder = (*snapshottingRuntime)(nil)
)

// started is a Manager on real dependencies (Redis, the in-process runtime) with its
// test host.
type started struct {
	m       *Manager
	d       coredeps.Deps
	host    *testHost
	runtime *snapshottingRuntime
}

// testConfig bounds idle periods from 1 s to an hour and forks to 10 copies.
var testConfig = Config{MinTimeout: time.Second, MaxTimeout: time.Hour, MaxBatchSize: 10}

// startManager starts a Manager; snapshots gives it a runtime that takes snapshots.
func startManager(t *testing.T, snapshots bool) started {
	t.Helper()
	d := coredeps.Start(t)
	h := &testHost{st: d.Store}
	rt := &snapshottingRuntime{Runtime: d.Runtime, images: map[string]map[string]string{}}
	var runtime runtimes.Runtime = d.Runtime
	if snapshots {
		runtime = rt
	}
	m := New(testConfig, d.Store, runtime, h, d.Log)
	t.Cleanup(m.Stop)
	return started{m: m, d: d, host: h, runtime: rt}
}

// runningSandbox starts a sandbox on the in-process runtime and stores its Running
// record with extensions.
func (s started) runningSandbox(t *testing.T, tenant string, extensions map[string]string) *store.Sandbox {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	spec := runtimes.Spec{ID: uuid.NewString(), Tenant: tenant, Image: "test", CreatedAt: now, AgentToken: "agent-" + uuid.NewString()}
	inst, err := s.d.Runtime.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.d.Runtime.Delete(context.Background(), spec.ID) })
	sb := &store.Sandbox{
		ID: spec.ID, Tenant: tenant, Image: "base:1", State: stateRunning, CreatedAt: now, LastTransitionAt: now,
		Address: inst.Address, AgentToken: spec.AgentToken, AccessToken: "access", Extensions: extensions,
		Entrypoint: []string{"/bin/app"}, ResourceLimits: map[string]string{"cpu": "500m"},
	}
	if err := s.d.Store.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb
}

// wantCode fails unless err is a fault.Error of kind and code.
func wantCode(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok || e.Kind != kind || e.Code != code {
		t.Fatalf("err = %v, want %s %s", err, kind, code)
	}
}

// waitFor polls cond until it holds, or fails the test after five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
