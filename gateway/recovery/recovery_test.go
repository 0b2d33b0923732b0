package recovery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/coredeps"
)

// testHost is the core's part of the feature for these tests: it records what the
// recovery asked of it. resumeErr makes every ResumeBatch fail, as the core's does when
// a batch's work cannot be read back.
type testHost struct {
	mu        sync.Mutex
	events    []string // "type id"
	dropped   []string
	resumed   map[string][]string
	resumeErr error
	storeLost int
	failures  map[string]int
}

func newTestHost() *testHost {
	return &testHost{resumed: map[string][]string{}, failures: map[string]int{}}
}

func (h *testHost) Emit(_ context.Context, sb *store.Sandbox, typ string, _ map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, typ+" "+sb.ID)
}

func (h *testHost) DropRoute(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = append(h.dropped, id)
}

func (h *testHost) ResumeBatch(_ context.Context, b *store.Batch, members []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resumeErr != nil {
		return h.resumeErr
	}
	h.resumed[b.ID] = append(h.resumed[b.ID], members...)
	return nil
}

func (h *testHost) StoreLost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.storeLost++
}

func (h *testHost) BackgroundError(job, _ string, _ error, _ ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures[job]++
}

type fixture struct {
	d    coredeps.Deps
	host *testHost
	m    *Manager
}

// newFixture builds the recovery of gateway "self" on a private redis-server and the
// in-process runtime, not started.
func newFixture(t *testing.T, cfg Config) fixture {
	t.Helper()
	d := coredeps.Start(t)
	if cfg.Owner == "" {
		cfg.Owner = "self"
	}
	h := newTestHost()
	m := New(cfg, d.Store, d.Runtime, h, d.Log)
	t.Cleanup(m.Stop)
	return fixture{d: d, host: h, m: m}
}

// sandbox starts a sandbox on the runtime and writes its record in state.
func (f fixture) sandbox(t *testing.T, state, owner, batch string) *store.Sandbox {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	if _, err := f.d.Runtime.Create(ctx, runtimes.Spec{ID: id, Tenant: "acme", Image: "test", AgentToken: "tok"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	sb := &store.Sandbox{ID: id, Tenant: "acme", Image: "test", State: state, Owner: owner, Batch: batch, CreatedAt: now, LastTransitionAt: now}
	if err := f.d.Store.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	return sb
}

func (f fixture) exists(t *testing.T, id string) (record, container bool) {
	t.Helper()
	ctx := context.Background()
	_, err := f.d.Store.GetSandbox(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	record = err == nil
	insts, err := f.d.Runtime.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts {
		container = container || inst.ID == id
	}
	return record, container
}

func TestClusterID(t *testing.T) {
	ctx := context.Background()
	t.Run("the store's, read once", func(t *testing.T) {
		f := newFixture(t, Config{})
		id, err := f.m.ClusterID(ctx)
		if err != nil || id == "" {
			t.Fatalf("ClusterID = %q, %v", id, err)
		}
		stored, err := f.d.Store.ClusterID(ctx)
		if err != nil || stored != id {
			t.Fatalf("the store holds %q (%v), the recovery said %q", stored, err, id)
		}
		spec := runtimes.Spec{Labels: map[string]string{"keep": "me"}}
		orig := spec.Labels
		if err := f.m.LabelCluster(ctx, &spec); err != nil {
			t.Fatal(err)
		}
		if spec.Labels[runtimes.LabelCluster] != id || spec.Labels["keep"] != "me" {
			t.Fatalf("labels = %v", spec.Labels)
		}
		if _, ok := orig[runtimes.LabelCluster]; ok {
			t.Fatal("LabelCluster changed the caller's map")
		}
	})
	t.Run("the configured one wins", func(t *testing.T) {
		f := newFixture(t, Config{ClusterID: "prod-eu"})
		if id, err := f.m.ClusterID(ctx); err != nil || id != "prod-eu" {
			t.Fatalf("ClusterID = %q, %v", id, err)
		}
	})
	t.Run("an unreachable store", func(t *testing.T) {
		f := newFixture(t, Config{})
		f.d.Redis.Stop()
		if _, err := f.m.ClusterID(ctx); err == nil {
			t.Fatal("ClusterID answered without a store")
		}
		var spec runtimes.Spec
		if err := f.m.LabelCluster(ctx, &spec); err == nil {
			t.Fatal("LabelCluster labelled without a cluster id")
		}
	})
}

// TestGhosts: records whose deletion the store did not take are deleted on the next
// retry, their containers removed, and a deleted sandbox's event is emitted then; a
// failed create's is not announced.
func TestGhosts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	failedCreate := f.sandbox(t, statePending, "self", "")
	deleted := f.sandbox(t, "Stopping", "", "")
	f.m.RememberGhost(failedCreate.ID)
	f.m.RememberGhost(failedCreate.ID)
	f.m.RememberDeleted(deleted, map[string]any{"reason": "api"})

	// While the store is away, the ghosts stay.
	f.d.Redis.Stop()
	f.m.retryGhosts(ctx)
	if n := len(f.m.ghosts); n != 2 {
		t.Fatalf("%d ghosts kept through the outage, want 2", n)
	}
	if err := f.d.Redis.Start(); err != nil {
		t.Fatal(err)
	}
	// The restarted server is empty: recreate the records the outage kept.
	waitFor(t, "the store back", func() bool { return f.d.Store.CreateSandbox(ctx, failedCreate, 0) == nil })
	if err := f.d.Store.CreateSandbox(ctx, deleted, 0); err != nil {
		t.Fatal(err)
	}
	f.m.retryGhosts(ctx)
	if n := len(f.m.ghosts); n != 0 {
		t.Fatalf("%d ghosts left once the store answers", n)
	}
	for _, sb := range []*store.Sandbox{failedCreate, deleted} {
		if rec, cont := f.exists(t, sb.ID); rec || cont {
			t.Errorf("%s: record %v, container %v after the retry", sb.ID, rec, cont)
		}
	}
	want := []string{plugins.EventSandboxDeleted + " " + deleted.ID}
	if len(f.host.events) != 1 || f.host.events[0] != want[0] {
		t.Fatalf("events = %v, want %v", f.host.events, want)
	}
}

// TestTakeOverPending: a Pending record of a gateway whose heartbeat lapsed is removed
// with its container; one of a live gateway, of this one, or not Pending is left.
func TestTakeOverPending(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	if err := f.d.Store.Heartbeat(ctx, "alive", time.Minute); err != nil {
		t.Fatal(err)
	}
	dead := f.sandbox(t, statePending, "dead", "")
	live := f.sandbox(t, statePending, "alive", "")
	mine := f.sandbox(t, statePending, "self", "")
	running := f.sandbox(t, "Running", "dead", "")
	records := []*store.Sandbox{dead, live, mine, running}
	alive, err := f.m.LiveOwners(ctx, records)
	if err != nil {
		t.Fatal(err)
	}
	if !alive["alive"] || alive["dead"] {
		t.Fatalf("LiveOwners = %v", alive)
	}
	for _, tt := range []struct {
		sb   *store.Sandbox
		take bool
	}{{dead, true}, {live, false}, {mine, false}, {running, false}} {
		if got := f.m.TakeOverPending(ctx, tt.sb, alive); got != tt.take {
			t.Errorf("TakeOverPending(owner %s, %s) = %v, want %v", tt.sb.Owner, tt.sb.State, got, tt.take)
		}
		rec, cont := f.exists(t, tt.sb.ID)
		if rec == tt.take || cont == tt.take {
			t.Errorf("owner %s, %s: record %v, container %v", tt.sb.Owner, tt.sb.State, rec, cont)
		}
	}
	if len(f.host.dropped) != 1 || f.host.dropped[0] != dead.ID {
		t.Fatalf("routes dropped = %v, want [%s]", f.host.dropped, dead.ID)
	}
}

// queueBatch writes an open batch whose members are queued by owner.
func (f fixture) queueBatch(t *testing.T, owner string, members ...string) *store.Batch {
	t.Helper()
	b := &store.Batch{ID: uuid.NewString(), Tenant: "acme", Count: len(members), Members: members, CreatedAt: time.Now().UTC()}
	if err := f.d.Store.PutBatchWork(context.Background(), b, []byte(`{}`), owner, members); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTakeOverBatches: the queued members of a dead gateway are taken over and handed
// to the core to make again; a member its dead gateway had made is settled, a live
// gateway's and this one's are left, and a settled batch is closed.
func TestTakeOverBatches(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	if err := f.d.Store.Heartbeat(ctx, "alive", time.Minute); err != nil {
		t.Fatal(err)
	}
	made := f.sandbox(t, "Running", "", "")
	half := f.sandbox(t, statePending, "dead", "")
	b := f.queueBatch(t, "dead", "m1", made.ID, half.ID)
	other := f.queueBatch(t, "alive", "m2")
	own := f.queueBatch(t, "self", "m3")

	f.m.TakeOverBatches(ctx)
	got := map[string]bool{}
	for _, m := range f.host.resumed[b.ID] {
		got[m] = true
	}
	if len(got) != 2 || !got["m1"] || !got[half.ID] {
		t.Fatalf("resumed %v, want m1 and %s", f.host.resumed[b.ID], half.ID)
	}
	if len(f.host.resumed[other.ID])+len(f.host.resumed[own.ID]) != 0 {
		t.Fatalf("resumed members of live gateways: %v", f.host.resumed)
	}
	if rec, cont := f.exists(t, half.ID); rec || cont {
		t.Fatalf("the half-made member kept record %v, container %v", rec, cont)
	}
	rb, _, err := f.d.Store.GetBatch(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, queued := rb.Queued[made.ID]; queued {
		t.Fatal("a member its gateway made is still queued")
	}
	for _, m := range []string{"m1", half.ID} {
		if rb.Queued[m] != "self" {
			t.Fatalf("member %s queued by %q, want self", m, rb.Queued[m])
		}
	}

	// Once nothing is queued the batch is closed.
	for _, m := range []string{"m1", half.ID} {
		if _, err := f.d.Store.FinishMember(ctx, b.ID, m, "self"); err != nil {
			t.Fatal(err)
		}
	}
	f.m.TakeOverBatches(ctx)
	open, err := f.d.Store.OpenBatches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range open {
		if id == b.ID {
			t.Fatal("a settled batch is still open")
		}
	}
	if n := f.host.failures["reconciler"]; n != 0 {
		t.Fatalf("%d background errors", n)
	}
}

// TestTakeOverBatchesGivesUp: a member taken over more than MaxTakeovers times, or one
// the core cannot make again, ends Failed as SANDBOX::GATEWAY_LOST.
func TestTakeOverBatchesGivesUp(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	b := f.queueBatch(t, "dead-0", "m1")
	for i := range MaxTakeovers {
		f.m.cfg.Owner = "dead-" + string(rune('1'+i))
		f.m.TakeOverBatches(ctx)
	}
	if n := len(f.host.resumed[b.ID]); n != MaxTakeovers {
		t.Fatalf("resumed %d times, want %d", n, MaxTakeovers)
	}
	f.m.cfg.Owner = "self"
	f.m.TakeOverBatches(ctx)
	_, errs, err := f.d.Store.GetBatch(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if errs["m1"].Code != CodeGatewayLost {
		t.Fatalf("member errors = %v, want m1 %s", errs, CodeGatewayLost)
	}

	f.host.resumeErr = errors.New("no work")
	c := f.queueBatch(t, "dead", "m2")
	f.m.TakeOverBatches(ctx)
	_, errs, err = f.d.Store.GetBatch(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if errs["m2"].Code != CodeGatewayLost {
		t.Fatalf("member errors = %v, want m2 %s", errs, CodeGatewayLost)
	}
}

// TestTakeOverBatchesStoreDown: an unreachable store is a background error, not a panic.
func TestTakeOverBatchesStoreDown(t *testing.T) {
	f := newFixture(t, Config{})
	f.d.Redis.Stop()
	f.m.TakeOverBatches(context.Background())
	if f.host.failures["reconciler"] == 0 {
		t.Fatal("an unreachable store was not counted")
	}
}

// TestStoreLoss: the heartbeat finds a store that came back empty, tells the core, and
// writes the cluster id back, so that the sandboxes labelled with it stay this store's.
func TestStoreLoss(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	f.m.Start()
	alive, err := f.d.Store.Alive(ctx, []string{"self"})
	if err != nil || !alive["self"] {
		t.Fatalf("no heartbeat after Start: %v, %v", alive, err)
	}
	// The first beat learnt the id already.
	f.m.mu.Lock()
	id := f.m.cluster
	f.m.mu.Unlock()
	if id == "" {
		t.Fatal("the first beat did not learn the cluster id")
	}
	f.d.Redis.Stop()
	if err := f.d.Redis.Start(); err != nil {
		t.Fatal(err)
	}
	// Written back by a beat: the store is read only once the beat says so, as a read
	// of a store without an id would make a new one.
	waitFor(t, "the loss handled", func() bool {
		f.host.mu.Lock()
		lost := f.host.storeLost
		f.host.mu.Unlock()
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		return lost == 1 && !f.m.restoreCluster
	})
	if stored, err := f.d.Store.ClusterID(ctx); err != nil || stored != id {
		t.Fatalf("after the loss the store's cluster id is %q (%v), want %q", stored, err, id)
	}
	f.m.Stop()
	f.m.Stop() // twice is fine
}

// TestStoreLossConfiguredID: a configured cluster id is not written to the store.
func TestStoreLossConfiguredID(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{ClusterID: "prod-eu"})
	f.m.CheckStoreLoss(ctx)
	if _, err := f.m.ClusterID(ctx); err != nil {
		t.Fatal(err)
	}
	f.d.Redis.Stop()
	f.m.CheckStoreLoss(ctx) // an unreachable store: nothing to learn
	if err := f.d.Redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loss found", func() bool {
		f.m.CheckStoreLoss(ctx)
		return f.host.storeLost == 1
	})
	f.m.mu.Lock()
	restore := f.m.restoreCluster
	f.m.mu.Unlock()
	if restore {
		t.Fatal("a configured cluster id is to be written back to the store")
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
