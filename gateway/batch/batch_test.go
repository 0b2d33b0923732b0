package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/apiproto"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// tmpl stands for the core's create request: what a member is made of.
type tmpl struct {
	Image string            `json:"image,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
}

// query stands for the core's endpoint query.
type query struct{ Host string }

// coldCall is one cold create the host was asked for.
type coldCall struct {
	caller      principal.Caller
	tmpl, claim tmpl
	id, batchID string
}

// testHost is the core's part of the feature for these tests. Warm members are records
// the test put in the store and Claim hands out; a cold create writes a Running record
// (or fails with the test's error, or waits for the test's gate); a member's delete
// removes its record. What it was asked is kept for the test to read.
type testHost struct {
	st *store.Store

	mu        sync.Mutex
	admitErr  error
	warm      []*store.Sandbox
	coldErr   error
	coldGate  chan struct{}
	started   chan string
	cold      []coldCall
	discarded []string
	deleted   []string
	deleteErr error
	// unreachable are the sandboxes whose agent endpoint the caller may not have.
	unreachable map[string]bool
}

func (h *testHost) Admit(_ context.Context, _ principal.Caller, req Request[tmpl]) (Plan[tmpl], error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admitErr != nil {
		return Plan[tmpl]{}, h.admitErr
	}
	plan := Plan[tmpl]{Claim: tmpl{Env: req.Env}}
	if req.PoolRef != "" {
		plan.Pool = &store.Pool{Name: req.PoolRef}
		plan.Template = tmpl{Image: "pool-image"}
	} else {
		plan.Template = *req.Template
	}
	return plan, nil
}

func (h *testHost) Claim(_ context.Context, _ principal.Caller, _ Plan[tmpl], n int, _ string) ([]*store.Sandbox, func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, len(h.warm))
	got := h.warm[:n]
	h.warm = h.warm[n:]
	return got, func() {}, nil
}

func (h *testHost) CreateCold(ctx context.Context, caller principal.Caller, t, claim tmpl, id, batchID string) (*store.Sandbox, error) {
	h.mu.Lock()
	h.cold = append(h.cold, coldCall{caller, t, claim, id, batchID})
	gate, started, coldErr := h.coldGate, h.started, h.coldErr
	h.mu.Unlock()
	if started != nil {
		started <- id
	}
	if gate != nil {
		<-gate
	}
	if coldErr != nil {
		return nil, coldErr
	}
	sb := &store.Sandbox{ID: id, Tenant: caller.Tenant, State: stateRunning, Batch: batchID, CreatedAt: time.Now()}
	return sb, h.st.CreateSandbox(ctx, sb, 0)
}

func (h *testHost) Discard(ctx context.Context, id string) {
	h.mu.Lock()
	h.discarded = append(h.discarded, id)
	h.mu.Unlock()
	_ = h.st.DeleteSandbox(ctx, id)
}

func (h *testHost) DeleteMember(ctx context.Context, _ principal.Caller, id, _ string) error {
	h.mu.Lock()
	deleteErr := h.deleteErr
	h.deleted = append(h.deleted, id)
	h.mu.Unlock()
	if deleteErr != nil {
		return deleteErr
	}
	return h.st.DeleteSandbox(ctx, id)
}

func (h *testHost) MemberState(sb *store.Sandbox) (apiproto.Status, bool) {
	return apiproto.Status{State: sb.State}, sb.Metadata["pool"] != ""
}

func (h *testHost) AgentEndpoint(_ context.Context, _ principal.Caller, sb *store.Sandbox, at query) (*apiproto.Endpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unreachable[sb.ID] {
		return nil, fault.Errorf(fault.KindForbidden, fault.CodeForbidden, "no")
	}
	return &apiproto.Endpoint{Endpoint: at.Host + "/" + sb.ID}, nil
}

// set changes the host's answers under its lock.
func (h *testHost) set(fn func(h *testHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn(h)
}

// coldCalls returns the cold creates asked so far.
func (h *testHost) coldCalls() []coldCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cold)
}

var _ Host[tmpl, query] = (*testHost)(nil)

const owner = "gw-test"

var (
	tenantA = principal.Caller{Tenant: "a", KeyID: "ka", KeyRole: principal.RoleMember}
	tenantB = principal.Caller{Tenant: "b", KeyID: "kb", KeyRole: principal.RoleMember}
	admin   = principal.Caller{Tenant: principal.DefaultTenant, Admin: true, KeyID: "admin"}
)

func newManager(t *testing.T, concurrency int) (*Manager[tmpl, query], *testHost, coredeps.Deps) {
	t.Helper()
	d := coredeps.Start(t)
	host := &testHost{st: d.Store}
	m := New[tmpl, query](Config{MaxSize: 10, ColdConcurrency: concurrency, ColdTimeout: 10 * time.Second, Owner: owner}, d.Store, nil, host, d.Log)
	t.Cleanup(m.Stop)
	return m, host, d
}

// wantFault fails unless err is a fault of kind and code.
func wantFault(t *testing.T, err error, kind fault.Kind, code string) {
	t.Helper()
	e, ok := fault.AsError(err)
	if !ok || e.Kind != kind || e.Code != code {
		t.Fatalf("err = %v, want a %s fault %s", err, kind, code)
	}
}

// settled reads the batch until no member is Pending.
func settled(t *testing.T, m *Manager[tmpl, query], caller principal.Caller, id string, at *query) *View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := m.Get(context.Background(), caller, id, at)
		if err != nil {
			t.Fatal(err)
		}
		if v.Summary.Pending == 0 {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still has pending members: %+v", id, v.Summary)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCreateRefused(t *testing.T) {
	m, host, d := newManager(t, 2)
	ctx := context.Background()
	quota := fault.Errorf(fault.KindQuota, "QUOTA::CONCURRENT", "too many")
	for _, tt := range []struct {
		name     string
		req      Request[tmpl]
		admitErr error
		kind     fault.Kind
		code     string
	}{
		{"count of 0", Request[tmpl]{Count: 0, PoolRef: "p"}, nil, fault.KindInvalid, fault.CodeInvalidParameter},
		{"count above the bound", Request[tmpl]{Count: 11, PoolRef: "p"}, nil, fault.KindInvalid, fault.CodeInvalidParameter},
		{"pool and template", Request[tmpl]{Count: 1, PoolRef: "p", Template: &tmpl{}}, nil, fault.KindInvalid, fault.CodeInvalidParameter},
		{"neither pool nor template", Request[tmpl]{Count: 1}, nil, fault.KindInvalid, fault.CodeInvalidParameter},
		{"refused by admission", Request[tmpl]{Count: 2, Template: &tmpl{}}, quota, fault.KindQuota, "QUOTA::CONCURRENT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host.set(func(h *testHost) { h.admitErr = tt.admitErr })
			_, err := m.Create(ctx, tenantA, tt.req, nil)
			wantFault(t, err, tt.kind, tt.code)
		})
	}
	open, err := d.Store.OpenBatches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 0 || len(host.coldCalls()) != 0 {
		t.Errorf("refused requests left batches %v and cold creates %v", open, host.coldCalls())
	}
}

func TestCreateClaimsThenStartsCold(t *testing.T) {
	m, host, d := newManager(t, 2)
	ctx := context.Background()
	var warm []*store.Sandbox
	for range 2 {
		sb := &store.Sandbox{ID: uuid.NewString(), Tenant: "a", State: stateRunning, Metadata: map[string]string{"pool": "p"}, CreatedAt: time.Now()}
		if err := d.Store.CreateSandbox(ctx, sb, 0); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, sb)
	}
	host.set(func(h *testHost) {
		h.warm = slices.Clone(warm)
		h.unreachable = map[string]bool{warm[1].ID: true}
	})
	at := &query{Host: "gw:8080"}
	v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 4, PoolRef: "p", Env: map[string]string{"K": "v"}}, at)
	if err != nil {
		t.Fatal(err)
	}
	if v.Count != 4 || len(v.Members) != 4 || v.Summary != (Summary{Running: 2, Pending: 2}) {
		t.Fatalf("answer = %+v, want 4 members: 2 Running, 2 Pending", v)
	}
	for i, mb := range v.Members {
		switch {
		case i < 2 && (mb.ID != warm[i].ID || mb.Source != SourcePool || mb.Status.State != stateRunning):
			t.Errorf("member %d = %+v, want warm %s from the pool, Running", i, mb, warm[i].ID)
		case i >= 2 && (mb.Source != SourceCold || mb.Status.State != statePending || mb.Status.Reason != "QUEUED" || mb.AgentEndpoint != nil):
			t.Errorf("member %d = %+v, want cold, Pending QUEUED, without endpoint", i, mb)
		}
	}
	if ep := v.Members[0].AgentEndpoint; ep == nil || ep.Endpoint != "gw:8080/"+warm[0].ID {
		t.Errorf("reachable warm member's endpoint = %+v, want gw:8080/%s", ep, warm[0].ID)
	}
	if v.Members[1].AgentEndpoint != nil {
		t.Errorf("a member the caller may not reach got an endpoint: %+v", v.Members[1].AgentEndpoint)
	}

	got := settled(t, m, tenantA, v.ID, at)
	if got.Summary != (Summary{Running: 4}) {
		t.Fatalf("settled batch = %+v, want 4 Running", got.Summary)
	}
	for i, mb := range got.Members {
		want := SourceCold
		if i < 2 {
			want = SourcePool
		}
		if mb.Source != want {
			t.Errorf("member %d read back from %q, want %q", i, mb.Source, want)
		}
		if i != 1 && mb.AgentEndpoint == nil {
			t.Errorf("member %d read with agentEndpoints has none", i)
		}
	}
	calls := host.coldCalls()
	if len(calls) != 2 {
		t.Fatalf("cold creates = %d, want 2", len(calls))
	}
	for _, c := range calls {
		if c.batchID != v.ID || c.caller != tenantA || c.tmpl.Image != "pool-image" || c.claim.Env["K"] != "v" {
			t.Errorf("cold create %+v: want batch %s as tenant a, the pool's template, the claim's env", c, v.ID)
		}
	}
	// The queue empties once every member is made (each is settled just after its
	// record is written).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _, err := d.Store.GetBatch(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Queued) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members still queued after they were made: %v", b.Queued)
		}
	}
	plain, err := m.Get(ctx, tenantA, v.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range plain.Members {
		if mb.AgentEndpoint != nil {
			t.Errorf("member %s read without agentEndpoints has one", mb.ID)
		}
	}
}

func TestColdFailuresRecorded(t *testing.T) {
	m, host, _ := newManager(t, 2)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		err  error
		code string
	}{
		{"a fault keeps its code", fault.Errorf(fault.KindUnprocessable, "SANDBOX::IMAGE_PULL_FAILED", "no such image"), "SANDBOX::IMAGE_PULL_FAILED"},
		{"the store unreachable", fmt.Errorf("write: %w", store.ErrUnavailable), fault.CodeStoreUnavailable},
		{"any other error", errors.New("boom"), fault.CodeInternal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host.set(func(h *testHost) { h.coldErr = tt.err })
			v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 2, Template: &tmpl{Image: "img"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := settled(t, m, tenantA, v.ID, nil)
			if got.Summary != (Summary{Failed: 2}) {
				t.Fatalf("summary = %+v, want 2 Failed", got.Summary)
			}
			for _, mb := range got.Members {
				if mb.Status.State != stateFailed || mb.Status.Reason != tt.code {
					t.Errorf("member %s = %+v, want Failed with %s", mb.ID, mb.Status, tt.code)
				}
			}
		})
	}
}

func TestOtherTenantsBatch(t *testing.T) {
	m, host, _ := newManager(t, 2)
	ctx := context.Background()
	v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 1, Template: &tmpl{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	settled(t, m, tenantA, v.ID, nil)
	_, err = m.Get(ctx, tenantB, v.ID, nil)
	wantFault(t, err, fault.KindNotFound, CodeNotFound)
	err = m.Delete(ctx, tenantB, v.ID)
	wantFault(t, err, fault.KindNotFound, CodeNotFound)
	host.mu.Lock()
	deleted := len(host.deleted)
	host.mu.Unlock()
	if deleted != 0 {
		t.Fatalf("another tenant's delete removed %d members", deleted)
	}
	if _, err := m.Get(ctx, admin, v.ID, nil); err != nil {
		t.Errorf("the platform admin cannot read a tenant's batch: %v", err)
	}
	// The owner reads its member's endpoint.
	got, err := m.Get(ctx, tenantA, v.ID, &query{Host: "h"})
	if err != nil || got.Members[0].AgentEndpoint == nil {
		t.Errorf("the owner's read with endpoints = %+v, %v", got, err)
	}
	_, err = m.Get(ctx, tenantA, "no-such-batch", nil)
	wantFault(t, err, fault.KindNotFound, CodeNotFound)
}

func TestDelete(t *testing.T) {
	m, host, _ := newManager(t, 2)
	ctx := context.Background()
	create := func() *View {
		t.Helper()
		v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 2, Template: &tmpl{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return settled(t, m, tenantA, v.ID, nil)
	}

	v := create()
	host.set(func(h *testHost) { h.deleteErr = errors.New("engine said no") })
	err := m.Delete(ctx, tenantA, v.ID)
	wantFault(t, err, fault.KindInternal, fault.CodeRuntimeError)
	if _, err := m.Get(ctx, tenantA, v.ID, nil); err != nil {
		t.Fatalf("a batch whose members could not be removed is gone: %v", err)
	}
	refused := fault.Errorf(fault.KindConflict, "SANDBOX::BUSY", "busy")
	host.set(func(h *testHost) { h.deleteErr = refused })
	err = m.Delete(ctx, tenantA, v.ID)
	wantFault(t, err, fault.KindConflict, "SANDBOX::BUSY")

	host.set(func(h *testHost) { h.deleteErr, h.deleted = nil, nil })
	if err := m.Delete(ctx, tenantA, v.ID); err != nil {
		t.Fatal(err)
	}
	host.mu.Lock()
	deleted := slices.Clone(host.deleted)
	host.mu.Unlock()
	slices.Sort(deleted)
	want := []string{v.Members[0].ID, v.Members[1].ID}
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Errorf("members deleted = %v, want %v", deleted, want)
	}
	_, err = m.Get(ctx, tenantA, v.ID, nil)
	wantFault(t, err, fault.KindNotFound, CodeNotFound)
}

// TestDeletedBatchMakesNoMore: a batch deleted while its cold members start makes no
// further member, and the one starting then is discarded once made.
func TestDeletedBatchMakesNoMore(t *testing.T) {
	m, host, _ := newManager(t, 1)
	ctx := context.Background()
	gate, started := make(chan struct{}), make(chan string, 3)
	host.set(func(h *testHost) { h.coldGate, h.started = gate, started })
	v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 3, Template: &tmpl{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := <-started
	if err := m.Delete(ctx, tenantA, v.ID); err != nil {
		t.Fatal(err)
	}
	close(gate)
	// The members queued behind the first take their turn once it is discarded; Stop
	// then waits for them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		host.mu.Lock()
		n := len(host.discarded)
		host.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	m.Stop()
	if calls := host.coldCalls(); len(calls) != 1 {
		t.Errorf("cold creates after the delete = %d, want only the one started before", len(calls))
	}
	host.mu.Lock()
	discarded := slices.Clone(host.discarded)
	host.mu.Unlock()
	if !slices.Equal(discarded, []string{first}) {
		t.Errorf("discarded = %v, want [%s], made after its batch was deleted", discarded, first)
	}
}

// TestStopLeavesTheRestQueued: once Stop begins no queued member starts; they stay this
// gateway's queued work for a peer's takeover.
func TestStopLeavesTheRestQueued(t *testing.T) {
	m, host, d := newManager(t, 1)
	ctx := context.Background()
	gate, started := make(chan struct{}), make(chan string, 3)
	host.set(func(h *testHost) { h.coldGate, h.started = gate, started })
	v, err := m.Create(ctx, tenantA, Request[tmpl]{Count: 3, Template: &tmpl{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a member was starting")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	<-stopped
	if calls := host.coldCalls(); len(calls) != 1 {
		t.Errorf("cold creates = %d, want 1: none after Stop", len(calls))
	}
	b, _, err := d.Store.GetBatch(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Queued) != 2 {
		t.Errorf("queued after Stop = %v, want the 2 members not started", b.Queued)
	}
	for _, o := range b.Queued {
		if o != owner {
			t.Errorf("queued member owned by %q, want %q", o, owner)
		}
	}
}

// TestResume: members taken over from a gateway that is gone are made from the work
// stored with their batch, as its gateway would have; work that cannot be read back
// starts nothing.
func TestResume(t *testing.T) {
	m, host, d := newManager(t, 2)
	ctx := context.Background()
	caller, err := json.Marshal(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	raw := fmt.Sprintf(`{"caller":%s,"template":{"image":"img"},"request":{"env":{"K":"v"}}}`, caller)
	b := &store.Batch{ID: uuid.NewString(), Tenant: "a", Count: 1, Members: []string{uuid.NewString()}, CreatedAt: time.Now().UTC(), Queued: map[string]string{}}
	if err := d.Store.PutBatchWork(ctx, b, []byte(raw), owner, b.Members); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, b, b.Members); err != nil {
		t.Fatal(err)
	}
	got := settled(t, m, tenantA, b.ID, nil)
	if got.Summary != (Summary{Running: 1}) {
		t.Errorf("resumed batch = %+v, want its member Running", got.Summary)
	}
	calls := host.coldCalls()
	if len(calls) != 1 || calls[0].caller != tenantA || calls[0].tmpl.Image != "img" || calls[0].claim.Env["K"] != "v" || calls[0].id != b.Members[0] {
		t.Errorf("cold creates = %+v, want member %s of img as tenant a with the claim's env", calls, b.Members[0])
	}

	bad := &store.Batch{ID: uuid.NewString(), Tenant: "a", Count: 1, Members: []string{uuid.NewString()}, CreatedAt: time.Now().UTC(), Queued: map[string]string{}}
	if err := d.Store.PutBatchWork(ctx, bad, []byte("{not json"), owner, bad.Members); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, bad, bad.Members); err == nil {
		t.Error("Resume of unreadable work: no error")
	}
	if err := m.Resume(ctx, &store.Batch{ID: "no-such-batch"}, []string{"x"}); err == nil {
		t.Error("Resume of a batch without work: no error")
	}
	if calls := host.coldCalls(); len(calls) != 1 {
		t.Errorf("unreadable work started %d members", len(calls)-1)
	}
}

// TestEndpointsOnlyForRunningMembers: a batch read with agentEndpoints gives one to each
// Running member the caller may reach, and to no other.
func TestEndpointsOnlyForRunningMembers(t *testing.T) {
	m, host, d := newManager(t, 2)
	ctx := context.Background()
	states := []string{stateRunning, "Paused", stateRunning}
	b := &store.Batch{ID: uuid.NewString(), Tenant: "a", Count: len(states), CreatedAt: time.Now().UTC()}
	for _, st := range states {
		sb := &store.Sandbox{ID: uuid.NewString(), Tenant: "a", State: st, CreatedAt: time.Now()}
		if err := d.Store.CreateSandbox(ctx, sb, 0); err != nil {
			t.Fatal(err)
		}
		b.Members = append(b.Members, sb.ID)
	}
	if err := d.Store.PutBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	host.set(func(h *testHost) { h.unreachable = map[string]bool{b.Members[2]: true} })
	v, err := m.Get(ctx, tenantA, b.ID, &query{Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		if got := v.Members[i].AgentEndpoint != nil; got != want {
			t.Errorf("member %d (%s) has an endpoint: %v, want %v", i, states[i], got, want)
		}
	}
	if v.Summary != (Summary{Running: 2, Gone: 1}) {
		t.Errorf("summary = %+v, want 2 Running and the Paused one counted as gone", v.Summary)
	}
}
