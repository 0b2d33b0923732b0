package store

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"
)

// testMeter reads plain numbers from the resource limits (the gateway parses "500m").
func testMeter(sb *Sandbox) (int64, int64) {
	c, _ := strconv.ParseInt(sb.ResourceLimits["cpu"], 10, 64)
	m, _ := strconv.ParseInt(sb.ResourceLimits["memory"], 10, 64)
	return c, m
}

func wantUsage(t *testing.T, s *Store, tenant string, want Usage) {
	t.Helper()
	got, err := s.TenantUsage(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("usage of %s = %+v, want %+v", tenant, got, want)
	}
}

func limits(cpu, mem int) map[string]string {
	return map[string]string{"cpu": strconv.Itoa(cpu), "memory": strconv.Itoa(mem)}
}

// TestUsageCounters: the counters admission reads follow create, update, claim, delete
// and expiry, and the reconciler's repair puts drifted ones right.
func TestUsageCounters(t *testing.T) {
	s := openTestStore(t)
	s.SetMeter(testMeter)
	ctx := context.Background()
	now := time.Now().UTC()
	mk := func(id, tenant string, cpu, mem int) *Sandbox {
		sb := &Sandbox{ID: id, Tenant: tenant, State: "Running", CreatedAt: now, ResourceLimits: limits(cpu, mem)}
		if err := s.CreateSandbox(ctx, sb, 0); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	wantUsage(t, s, "t1", Usage{})
	a := mk("a", "t1", 500, 100)
	mk("b", "t1", 250, 50)
	mk("c", "t2", 1, 1)
	wantUsage(t, s, "t1", Usage{2, 750, 150})
	wantUsage(t, s, "t2", Usage{1, 1, 1})

	// An update counts the difference, not the record again.
	a.ResourceLimits = limits(1000, 100)
	if err := s.UpdateSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, "t1", Usage{2, 1250, 150})

	// A warm member counts for nobody until it is claimed, then for the claimer.
	tmpl, _ := json.Marshal(map[string]any{})
	if err := s.PutPool(ctx, &Pool{Tenant: "pt", Name: "p", Template: tmpl}, true); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AddWarm(ctx, &Sandbox{ID: "w", Tenant: "pt", Pool: "p", State: "Running", CreatedAt: now, ResourceLimits: limits(100, 10)}); err != nil || !ok {
		t.Fatalf("add warm: %v %v", ok, err)
	}
	wantUsage(t, s, "pt", Usage{})
	got, err := s.Claim(ctx, "pt", "p", "t1", 1, ClaimPatch{"tenant": "t1"}, now.UnixMilli(), strconv.FormatInt(now.Add(-time.Second).UnixMilli(), 10))
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	wantUsage(t, s, "t1", Usage{3, 1350, 160})
	wantUsage(t, s, "pt", Usage{})

	// Delete, and expiry (the reaper deletes what ExpiredSandboxes names).
	if err := s.DeleteSandbox(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "b"); err != nil { // twice: counted once
		t.Fatal(err)
	}
	wantUsage(t, s, "t1", Usage{2, 1100, 110})
	expired, err := s.ExpiredSandboxes(ctx, now, 10)
	if err != nil || !slices.Equal(expired, []string{"w"}) {
		t.Fatalf("expired = %v, %v; want [w]", expired, err)
	}
	if err := s.DeleteSandbox(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, "t1", Usage{1, 1000, 100})

	// Nothing to repair when the scripts kept them.
	if fixed, err := s.RepairUsage(ctx); err != nil || len(fixed) != 0 {
		t.Fatalf("repair of right counters: %v %v", fixed, err)
	}

	// Drift: a stand-in for a write lost halfway (counters edited behind the scripts'
	// back) and a record from before the counters (no measure of its own).
	// Tenant "gone" held a sandbox once (so it is among the active tenants).
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "g", Tenant: "gone", State: "Running", CreatedAt: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	rdb := s.Client()
	rdb.HSet(ctx, s.usageKey("t1"), "sandboxes", 7, "cpu", -3)
	rdb.HSet(ctx, s.usageKey("gone"), "sandboxes", 2)
	rdb.HDel(ctx, s.sandboxKey("t2", "c"), "ucpu", "umem")
	rdb.HSet(ctx, s.usageKey("t2"), "sandboxes", 1, "cpu", 0, "mem", 0)
	fixed, err := s.RepairUsage(ctx)
	slices.Sort(fixed)
	if err != nil || !slices.Equal(fixed, []string{"gone", "t1", "t2"}) {
		t.Fatalf("repaired %v, %v; want [gone t1 t2]", fixed, err)
	}
	wantUsage(t, s, "t1", Usage{1, 1000, 100})
	wantUsage(t, s, "t2", Usage{1, 1, 1})
	wantUsage(t, s, "gone", Usage{})
	// The old record now counts like any other when it goes.
	if err := s.DeleteSandbox(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, "t2", Usage{})
}
