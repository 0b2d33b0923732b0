package state

import (
	"context"
	"errors"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// TestFork: a fork snapshots the sandbox and asks the core for a batch from the Ready
// snapshot, owned by the sandbox's tenant; the snapshot stays for the copies.
func TestFork(t *testing.T) {
	s := startManager(t, true)
	ctx := context.Background()
	alice := principal.Caller{Tenant: "alice", KeyID: "k1", KeyRole: "user"}
	sb := s.runningSandbox(t, "alice", nil)
	timeout := int64(600)
	b, err := s.m.Fork(ctx, alice, sb.ID, ForkRequest{Count: 3, Timeout: &timeout, Metadata: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.host.batches) != 1 || b.Count != 3 {
		t.Fatalf("batches %+v, answer %+v; want one batch of 3", s.host.batches, b)
	}
	call := s.host.batches[0]
	if call.owner != (principal.Caller{Tenant: "alice", KeyID: "k1", KeyRole: "user"}) || call.snap.State != SnapshotReady ||
		call.snap.SandboxID != sb.ID || call.req.Count != 3 || *call.req.Timeout != 600 {
		t.Errorf("the batch asked for = %+v; want alice's, of the Ready snapshot of %s", call, sb.ID)
	}
	if !s.runtime.hasImage(call.snap.Image) {
		t.Error("the fork's snapshot image is not kept for its copies")
	}
	// The admin forks any tenant's sandbox; the copies are the tenant's.
	if _, err := s.m.Fork(ctx, principal.Caller{Admin: true}, sb.ID, ForkRequest{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if owner := s.host.batches[1].owner; owner.Tenant != "alice" || owner.Admin {
		t.Errorf("the admin's fork is owned by %+v, want alice", owner)
	}
}

// TestForkRefusals: a refused fork answers its kind and code and leaves no snapshot.
func TestForkRefusals(t *testing.T) {
	s := startManager(t, true)
	ctx := context.Background()
	alice := principal.Caller{Tenant: "alice"}
	sb := s.runningSandbox(t, "alice", nil)
	errClaim := fault.Errorf(fault.KindInvalid, "SANDBOX::INVALID_METADATA_LABEL", "metadata")
	tests := []struct {
		name  string
		setup func()
		req   ForkRequest
		kind  fault.Kind
		code  string
	}{
		{"no copies", nil, ForkRequest{Count: 0}, fault.KindInvalid, fault.CodeInvalidParameter},
		{"too many copies", nil, ForkRequest{Count: 11}, fault.KindInvalid, fault.CodeInvalidParameter},
		{"bad metadata", func() { s.host.set(func(h *testHost) { h.claimErr = errClaim }) }, ForkRequest{Count: 1}, fault.KindInvalid, "SANDBOX::INVALID_METADATA_LABEL"},
		{"batch quota", func() { s.host.set(func(h *testHost) { h.quotas.MaxBatchSize = 2 }) }, ForkRequest{Count: 3}, fault.KindQuota, policy.CodeQuotaBatchSize},
		{"sandbox gone", func() { s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = runtimes.ErrNotFound }) }, ForkRequest{Count: 1}, fault.KindConflict, codeNotRunning},
		{"commit fails", func() { s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = errors.New("disk full") }) }, ForkRequest{Count: 1}, fault.KindInternal, codeRuntimeError},
		{"batch refused", func() {
			s.host.set(func(h *testHost) { h.batchErr = fault.Errorf(fault.KindQuota, "QUOTA::CONCURRENT", "full") })
		}, ForkRequest{Count: 1}, fault.KindQuota, "QUOTA::CONCURRENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			defer s.host.set(func(h *testHost) { h.claimErr, h.batchErr, h.quotas = nil, nil, store.Quotas{} })
			_, err := s.m.Fork(ctx, alice, sb.ID, tt.req)
			s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = nil })
			wantCode(t, err, tt.kind, tt.code)
			if list, _ := s.m.ListSnapshots(ctx, alice, SnapshotQuery{}); len(list.Items) != 0 {
				t.Errorf("a refused fork leaves %d snapshots", len(list.Items))
			}
		})
	}
	_, err := s.m.Fork(ctx, principal.Caller{Tenant: "bob"}, sb.ID, ForkRequest{Count: 1})
	wantCode(t, err, fault.KindNotFound, fault.CodeNotFound)
}
