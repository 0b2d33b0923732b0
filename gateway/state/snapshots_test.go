package state

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// readySnapshot takes a snapshot of sb for caller and waits until its commit ends Ready.
func (s started) readySnapshot(t *testing.T, caller principal.Caller, sb *store.Sandbox, name string) string {
	t.Helper()
	ctx := context.Background()
	v, err := s.m.CreateSnapshot(ctx, caller, sb.ID, SnapshotRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status.State != SnapshotCreating {
		t.Fatalf("a new snapshot is %s, want %s", v.Status.State, SnapshotCreating)
	}
	waitFor(t, "the snapshot's commit", func() bool {
		got, err := s.m.GetSnapshot(ctx, caller, v.ID)
		return err == nil && got.Status.State == SnapshotReady
	})
	return v.ID
}

// TestSnapshotLifecycle: a snapshot is committed in the background to an image of its
// tenant's, listed, named by the image it is, made the source of a create, and deleted
// with its image.
func TestSnapshotLifecycle(t *testing.T) {
	s := startManager(t, true)
	ctx := context.Background()
	alice := principal.Caller{Tenant: "alice"}
	sb := s.runningSandbox(t, "alice", nil)
	id := s.readySnapshot(t, alice, sb, "base")

	snap, err := s.d.Store.GetSnapshot(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if !s.runtime.hasImage(snap.Image) || snap.SourceImage != "base:1" || snap.Entrypoint[0] != "/bin/app" {
		t.Fatalf("snapshot %+v: want its image committed and the source's image and entrypoint kept", snap)
	}
	if got := SnapshotOfImage("cluster-1", "alice", snap.Image); got != id {
		t.Errorf("SnapshotOfImage(own image) = %q, want %q", got, id)
	}
	if got := SnapshotOfImage("cluster-1", "bob", snap.Image); got != "" {
		t.Errorf("SnapshotOfImage(another tenant's image) = %q, want none", got)
	}
	if err := CheckSnapshotImage("cluster-1", "alice", "docker.io/"+snap.Image); err != nil {
		t.Errorf("the owner's snapshot image is refused: %v", err)
	}
	wantCode(t, CheckSnapshotImage("cluster-1", "bob", snap.Image), fault.KindNotFound, CodeSnapshotNotFound)
	if err := CheckSnapshotImage("cluster-1", "bob", "python:3.12"); err != nil {
		t.Errorf("an image that is no snapshot is refused: %v", err)
	}

	list, err := s.m.ListSnapshots(ctx, alice, SnapshotQuery{SandboxID: sb.ID, States: []string{"ready"}})
	if err != nil || len(list.Items) != 1 || list.Items[0].ID != id || list.Items[0].Name != "base" {
		t.Fatalf("ListSnapshots = %+v, %v; want the one snapshot", list, err)
	}
	if list, _ := s.m.ListSnapshots(ctx, alice, SnapshotQuery{States: []string{SnapshotFailed}}); len(list.Items) != 0 {
		t.Errorf("a Failed filter lists %d snapshots, want none", len(list.Items))
	}
	if list, _ := s.m.ListSnapshots(ctx, principal.Caller{Tenant: "bob"}, SnapshotQuery{}); len(list.Items) != 0 {
		t.Errorf("another tenant lists %d snapshots, want none", len(list.Items))
	}
	if _, err := s.m.GetSnapshot(ctx, principal.Caller{Tenant: "bob"}, id); err == nil {
		t.Error("another tenant reads the snapshot")
	}
	if v, err := s.m.GetSnapshot(ctx, principal.Caller{Admin: true}, id); err != nil || v.ID != id {
		t.Errorf("the admin reads %+v, %v; want the snapshot", v, err)
	}

	ready, err := s.m.ReadySnapshot(ctx, alice, id, false)
	if err != nil || ready.Image != snap.Image {
		t.Fatalf("ReadySnapshot = %+v, %v", ready, err)
	}
	_, err = s.m.ReadySnapshot(ctx, alice, id, true)
	wantCode(t, err, fault.KindInvalid, fault.CodeInvalidParameter)
	_, err = s.m.ReadySnapshot(ctx, principal.Caller{Tenant: "bob"}, id, false)
	wantCode(t, err, fault.KindNotFound, CodeSnapshotNotFound)

	if err := s.m.DeleteSnapshot(ctx, alice, id); err != nil {
		t.Fatal(err)
	}
	if s.runtime.hasImage(snap.Image) {
		t.Error("a deleted snapshot's image is kept")
	}
	_, err = s.m.GetSnapshot(ctx, alice, id)
	wantCode(t, err, fault.KindNotFound, CodeSnapshotNotFound)
}

// TestSnapshotRefusals: each refused snapshot request answers its kind and code and
// writes nothing.
func TestSnapshotRefusals(t *testing.T) {
	ctx := context.Background()
	alice := principal.Caller{Tenant: "alice"}

	t.Run("no snapshots on this runtime", func(t *testing.T) {
		s := startManager(t, false)
		sb := s.runningSandbox(t, "alice", nil)
		_, err := s.m.CreateSnapshot(ctx, alice, sb.ID, SnapshotRequest{})
		wantCode(t, err, fault.KindInvalid, CodeSnapshotUnsupported)
		_, err = s.m.ReadySnapshot(ctx, alice, uuid.NewString(), false)
		wantCode(t, err, fault.KindInvalid, CodeSnapshotUnsupported)
	})

	s := startManager(t, true)
	sb := s.runningSandbox(t, "alice", nil)
	tests := []struct {
		name   string
		caller principal.Caller
		id     string
		req    SnapshotRequest
		kind   fault.Kind
		code   string
	}{
		{"name too long", alice, sb.ID, SnapshotRequest{Name: strings.Repeat("n", 129)}, fault.KindInvalid, CodeSnapshotInvalid},
		{"another tenant's sandbox", principal.Caller{Tenant: "bob"}, sb.ID, SnapshotRequest{}, fault.KindNotFound, fault.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.m.CreateSnapshot(ctx, tt.caller, tt.id, tt.req)
			wantCode(t, err, tt.kind, tt.code)
		})
	}
	t.Run("not running", func(t *testing.T) {
		failed := s.runningSandbox(t, "alice", nil)
		if _, err := s.d.Store.ModifySandbox(ctx, failed.ID, func(sb *store.Sandbox) error { sb.State = "Failed"; return nil }); err != nil {
			t.Fatal(err)
		}
		_, err := s.m.CreateSnapshot(ctx, alice, failed.ID, SnapshotRequest{})
		wantCode(t, err, fault.KindConflict, codeNotRunning)
	})
	t.Run("quota", func(t *testing.T) {
		s.host.set(func(h *testHost) { h.quotas.MaxSnapshots = 1 })
		defer s.host.set(func(h *testHost) { h.quotas.MaxSnapshots = 0 })
		s.readySnapshot(t, alice, sb, "one")
		_, err := s.m.CreateSnapshot(ctx, alice, sb.ID, SnapshotRequest{})
		wantCode(t, err, fault.KindQuota, CodeQuotaSnapshots)
	})
	t.Run("unknown ids", func(t *testing.T) {
		for _, id := range []string{"not-a-uuid", uuid.NewString()} {
			_, err := s.m.GetSnapshot(ctx, alice, id)
			wantCode(t, err, fault.KindNotFound, CodeSnapshotNotFound)
			_, err = s.m.GetSnapshot(ctx, principal.Caller{Admin: true}, id)
			wantCode(t, err, fault.KindNotFound, CodeSnapshotNotFound)
			wantCode(t, s.m.DeleteSnapshot(ctx, alice, id), fault.KindNotFound, CodeSnapshotNotFound)
		}
	})
}

// TestSnapshotCommitOutcomes: a commit that fails leaves a Failed snapshot saying why; a
// snapshot deleted while it is being made goes with its image once the commit ends;
// one still in use, or whose image the runtime cannot remove, is kept.
func TestSnapshotCommitOutcomes(t *testing.T) {
	ctx := context.Background()
	alice := principal.Caller{Tenant: "alice"}
	s := startManager(t, true)
	sb := s.runningSandbox(t, "alice", nil)

	stateOf := func(id string) *store.Snapshot {
		snap, err := s.d.Store.GetSnapshot(ctx, "alice", id)
		if err != nil {
			return nil
		}
		return snap
	}
	t.Run("commit fails", func(t *testing.T) {
		s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = errors.New("disk full") })
		defer s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = nil })
		v, err := s.m.CreateSnapshot(ctx, alice, sb.ID, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the failed commit", func() bool { snap := stateOf(v.ID); return snap != nil && snap.State == SnapshotFailed })
		if snap := stateOf(v.ID); snap.Reason != "commit_failed" {
			t.Errorf("reason %q, want commit_failed", snap.Reason)
		}
		_, err = s.m.ReadySnapshot(ctx, alice, v.ID, false)
		wantCode(t, err, fault.KindConflict, CodeSnapshotNotReady)
		if err := s.m.DeleteSnapshot(ctx, alice, v.ID); err != nil || stateOf(v.ID) != nil {
			t.Errorf("delete of a Failed snapshot: %v", err)
		}
	})
	t.Run("sandbox gone", func(t *testing.T) {
		s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = runtimes.ErrNotFound })
		defer s.runtime.set(func(r *snapshottingRuntime) { r.commitErr = nil })
		v, err := s.m.CreateSnapshot(ctx, alice, sb.ID, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the failed commit", func() bool { snap := stateOf(v.ID); return snap != nil && snap.State == SnapshotFailed })
		if snap := stateOf(v.ID); snap.Reason != reasonSandboxGone {
			t.Errorf("reason %q, want %s", snap.Reason, reasonSandboxGone)
		}
	})
	t.Run("deleted while taken", func(t *testing.T) {
		gate := make(chan struct{})
		s.runtime.set(func(r *snapshottingRuntime) { r.gate = gate })
		v, err := s.m.CreateSnapshot(ctx, alice, sb.ID, SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.m.ReadySnapshot(ctx, alice, v.ID, false)
		wantCode(t, err, fault.KindConflict, CodeSnapshotNotReady)
		for range 2 { // a second delete of one being deleted answers the same
			if err := s.m.DeleteSnapshot(ctx, alice, v.ID); err != nil {
				t.Fatal(err)
			}
		}
		if snap := stateOf(v.ID); snap == nil || snap.State != SnapshotDeleting {
			t.Fatalf("snapshot %+v, want it Deleting until its commit ends", snap)
		}
		s.runtime.set(func(r *snapshottingRuntime) { r.gate = nil })
		close(gate)
		waitFor(t, "the record to go", func() bool { return stateOf(v.ID) == nil })
		if s.runtime.hasImage(snapshotImage("cluster-1", "alice", v.ID)) {
			t.Error("the image of a snapshot deleted while it was taken is kept")
		}
	})
	t.Run("in use", func(t *testing.T) {
		id := s.readySnapshot(t, alice, sb, "")
		copy := s.runningSandbox(t, "alice", nil)
		if _, err := s.d.Store.ModifySandbox(ctx, copy.ID, func(r *store.Sandbox) error { r.SnapshotID = id; return nil }); err != nil {
			t.Fatal(err)
		}
		s.runtime.set(func(r *snapshottingRuntime) { r.removeErr = runtimes.ErrInUse })
		err := s.m.DeleteSnapshot(ctx, alice, id)
		wantCode(t, err, fault.KindConflict, CodeSnapshotInUse)
		if !strings.Contains(err.Error(), copy.ID) {
			t.Errorf("the 409 does not name the sandbox created from the snapshot: %v", err)
		}
		if err := s.d.Store.DeleteSandbox(ctx, copy.ID); err != nil {
			t.Fatal(err)
		}
		s.runtime.set(func(r *snapshottingRuntime) { r.removeErr = errors.New("engine down") })
		wantCode(t, s.m.DeleteSnapshot(ctx, alice, id), fault.KindInternal, codeRuntimeError)
		s.runtime.set(func(r *snapshottingRuntime) { r.removeErr = nil })
		if stateOf(id) == nil {
			t.Error("a snapshot whose image was not removed is gone")
		}
	})
	t.Run("released a moment after its last sandbox", func(t *testing.T) {
		// No record names the snapshot any more, and the engine still holds its image
		// for three tries: the delete waits for it instead of answering 409.
		id := s.readySnapshot(t, alice, sb, "")
		s.runtime.set(func(r *snapshottingRuntime) { r.removeInUse = 3 })
		if err := s.m.DeleteSnapshot(ctx, alice, id); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if stateOf(id) != nil || s.runtime.hasImage(snapshotImage("cluster-1", "alice", id)) {
			t.Error("the snapshot or its image is kept")
		}
	})
}
