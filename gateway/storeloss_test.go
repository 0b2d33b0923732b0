package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/test/coredeps"
)

// TestStoreLossReadoption: two gateways on one redis-server and one runtime; the server
// restarts without persistence. Without a restart of either, both list the sandboxes
// again (tenant, expiry and metadata from the runtime's labels), the store holds the
// cluster id the sandboxes carry, and the reaper removes the one that expires.
func TestStoreLossReadoption(t *testing.T) {
	d := coredeps.Start(t)
	ctx := context.Background()
	cfg := Config{SyncInterval: 50 * time.Millisecond, ReapInterval: 50 * time.Millisecond, ReadyTimeout: time.Second, MinTimeout: time.Second}
	second, err := store.Open(ctx, store.Options{URL: d.Redis.URL, Prefix: "t:", Logger: d.Log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	var svcs []*Service
	for _, st := range []*store.Store{d.Store, second} {
		svc := New(cfg, st, d.Runtime, d.Policy, d.Log)
		svc.SetAdminKey("admin-key")
		svc.Start(ctx)
		t.Cleanup(svc.Stop)
		svcs = append(svcs, svc)
	}
	long := sleeper(600)
	long.Metadata = map[string]string{"team": "alpha"}
	a, err := svcs[0].Create(ctx, admin, long)
	if err != nil {
		t.Fatal(err)
	}
	b, err := svcs[1].Create(ctx, admin, sleeper(4))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := sleeper(600)
	pool := PoolRequest{Name: "warm", Template: &tmpl, CapacitySpec: store.Capacity{BufferMin: 1, BufferMax: 1, PoolMin: 0, PoolMax: 3}}
	if _, err := svcs[0].Pools().Create(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	available := func() int64 {
		p, err := svcs[0].Pools().Get(ctx, admin, "warm")
		if err != nil {
			return -1
		}
		return p.Status.Available
	}
	eventually(t, "a warm member", func() bool { return available() == 1 })
	oldMembers := map[string]bool{}
	insts, err := d.Runtime.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts {
		if inst.Pool != "" {
			oldMembers[inst.ID] = true
		}
	}
	before := map[string]Sandbox{}
	for _, r := range []*CreateResponse{a, b} {
		got, err := svcs[0].Get(ctx, admin, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		before[r.ID] = *got
	}
	cluster, err := svcs[1].recovery.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	d.Redis.Stop()
	if err := d.Redis.Start(); err != nil {
		t.Fatal(err)
	}

	for i, svc := range svcs {
		eventually(t, "both sandboxes listed again", func() bool {
			l, err := svc.List(ctx, admin, ListQuery{Page: 1, PageSize: 100})
			return err == nil && len(l.Items) == 2
		})
		for id, want := range before {
			got, err := svc.Get(ctx, admin, id)
			if err != nil {
				t.Fatalf("gateway %d: get %s: %v", i, id, err)
			}
			if diff := cmp.Diff(want.Metadata, got.Metadata); diff != "" {
				t.Errorf("gateway %d: metadata of %s (-before +after):\n%s", i, id, diff)
			}
			if !got.ExpiresAt.Equal(*want.ExpiresAt) || got.Status.State != StateRunning {
				t.Errorf("gateway %d: %s after the loss: expires %v, state %s; before: expires %v", i, id, got.ExpiresAt, got.Status.State, want.ExpiresAt)
			}
		}
	}
	if got, err := second.ClusterID(ctx); err != nil || got != cluster {
		t.Errorf("the store's cluster id after the loss = %q, %v; the sandboxes carry %q", got, err, cluster)
	}
	eventually(t, "the expired sandbox removed", func() bool {
		_, err := svcs[1].Get(ctx, admin, b.ID)
		_, rerr := d.Runtime.Inspect(ctx, b.ID)
		return err != nil && rerr != nil
	})
	if _, err := svcs[0].Get(ctx, admin, a.ID); err != nil {
		t.Fatalf("the long-lived sandbox: %v", err)
	}

	// Pools were in the store only: made again, they fill anew, and a claim never
	// hands out a member of the lost pool (a container without a record, which the
	// reconciler removes as unowned once past its start's grace).
	if pools, err := svcs[1].Pools().List(ctx, admin); err != nil || len(pools) != 0 {
		t.Fatalf("pools after the loss = %v, %v; want none", pools, err)
	}
	if _, err := svcs[0].Pools().Create(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool made again to fill", func() bool { return available() == 1 })
	claim := sleeper(600)
	claim.Extensions = map[string]string{"poolRef": "warm"}
	got, err := svcs[1].Create(ctx, admin, claim)
	if err != nil {
		t.Fatal(err)
	}
	if oldMembers[got.ID] {
		t.Errorf("the claim handed out %s, a member of the pool the store lost", got.ID)
	}
}
