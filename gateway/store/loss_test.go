package store

import (
	"context"
	"testing"
	"time"
)

// emptyStore deletes every key of s, as a Redis restarted without persistence comes
// back (only this store's keys: a cluster under test is shared).
func emptyStore(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	if err := s.scanKeys(ctx, s.prefix+"*", func(k string) { keys = append(keys, k) }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := s.rdb.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreLoss: after the store is emptied, CheckLoss says so once, on every process
// of the store, and records written again are found by the passes that walk tenants
// (list, expiry) and by their id.
func TestStoreLoss(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	// A second process of the same store: the same server, memos of its own.
	other := &Store{rdb: s.rdb, probe: s.probe, newClient: s.newClient, cluster: s.cluster, prefix: s.prefix, log: s.log}

	expires := time.Now().Add(-time.Second)
	rec := func() *Sandbox {
		return &Sandbox{ID: "sb1", Tenant: "acme", State: "Running", CreatedAt: time.Now(), ExpiresAt: &expires}
	}
	for _, p := range []*Store{s, other} {
		if lost, err := p.CheckLoss(ctx); err != nil || lost {
			t.Fatalf("first CheckLoss = %v, %v; want false", lost, err)
		}
	}
	if err := s.CreateSandbox(ctx, rec(), 0); err != nil {
		t.Fatal(err)
	}
	id, err := s.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	emptyStore(t, s)
	for _, p := range []*Store{s, other} {
		if lost, err := p.CheckLoss(ctx); err != nil || !lost {
			t.Fatalf("CheckLoss after the loss = %v, %v; want true", lost, err)
		}
		if lost, err := p.CheckLoss(ctx); err != nil || lost {
			t.Fatalf("CheckLoss again = %v, %v; want false", lost, err)
		}
	}
	if got, err := other.RestoreClusterID(ctx, id); err != nil || got != id {
		t.Fatalf("RestoreClusterID = %q, %v; want %q", got, err, id)
	}
	if got, err := s.ClusterID(ctx); err != nil || got != id {
		t.Fatalf("ClusterID after the restore = %q, %v; want %q", got, err, id)
	}

	if err := s.CreateSandbox(ctx, rec(), 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Store{s, other} {
		list, err := p.ListSandboxes(ctx, "")
		if err != nil || len(list) != 1 || list[0].ID != "sb1" {
			t.Fatalf("ListSandboxes after the record came back = %v, %v", list, err)
		}
		if ids, err := p.ExpiredSandboxes(ctx, time.Now(), 10); err != nil || len(ids) != 1 {
			t.Fatalf("ExpiredSandboxes = %v, %v", ids, err)
		}
		if got, err := p.GetSandbox(ctx, "sb1"); err != nil || got.Tenant != "acme" {
			t.Fatalf("GetSandbox = %v, %v", got, err)
		}
	}
}
