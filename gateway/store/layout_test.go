package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimOwnPool: a claim from the claimer's own pool is one script in its slot; the
// record, index, usage and expiry move together, and a delete takes the member out of
// the pool's allocated set.
func TestClaimOwnPool(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	s.SetMeter(func(*Sandbox) (int64, int64) { return 500, 1 << 20 })
	if err := s.PutPool(ctx, &Pool{Tenant: "t", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if ok, err := s.AddWarm(ctx, &Sandbox{ID: id, Tenant: "t", Pool: "p", State: "Running"}); err != nil || !ok {
			t.Fatalf("AddWarm %s: %v %v", id, ok, err)
		}
	}
	exp := time.Now().Add(time.Hour).UnixMilli()
	got, err := s.Claim(ctx, "t", "p", "t", 2, ClaimPatch{"state": "Running"}, time.Now().UnixMilli(), formatInt(exp))
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	if u, _ := s.TenantUsage(ctx, "t"); u != (Usage{2, 1000, 2 << 20}) {
		t.Fatalf("usage after the claim = %+v", u)
	}
	warm, _ := s.WarmIDs(ctx)
	if len(warm) != 1 || warm[got[0].ID] || warm[got[1].ID] {
		t.Fatalf("warm after the claim = %v", warm)
	}
	if ids, _ := s.ExpiredSandboxes(ctx, time.UnixMilli(exp+1), 10); len(ids) != 2 {
		t.Fatalf("expiry schedule = %v", ids)
	}
	if err := s.DeleteSandbox(ctx, got[0].ID); err != nil {
		t.Fatal(err)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "t", "p"); len(alloc) != 1 || alloc[0] != got[1].ID {
		t.Fatalf("allocated after a delete = %v", alloc)
	}
	if _, err := s.GetSandbox(ctx, got[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record: %v", err)
	}
	if u, _ := s.TenantUsage(ctx, "t"); u != (Usage{1, 500, 1 << 20}) {
		t.Fatalf("usage after the delete = %+v", u)
	}
	// A locator without its record (a create between its two steps) is no error, and
	// is left for the create.
	s.rdb.Set(ctx, s.locKey(locSandbox, "ghost"), "t", 0)
	if err := s.DeleteSandbox(ctx, "ghost"); err != nil {
		t.Fatalf("delete of a locator without a record: %v", err)
	}
	if err := s.DeleteSandbox(ctx, got[0].ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	// Of two removals of one record, only the first reports that it took it.
	if removed, err := s.RemoveSandbox(ctx, got[1].ID); err != nil || !removed {
		t.Fatalf("first removal = %t, %v; want true", removed, err)
	}
	if removed, err := s.RemoveSandbox(ctx, got[1].ID); err != nil || removed {
		t.Fatalf("second removal = %t, %v; want false", removed, err)
	}
}

// TestClaimAcrossRepaired: a claim from another tenant's pool whose gateway died halfway
// is settled by RepairClaims — given back to the pool before the records reached the
// claimer, moved to the claimer after. The dying gateway is a stand-in: the claim's
// steps run one by one here, as a crash between them would leave them.
func TestClaimAcrossRepaired(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.PutPool(ctx, &Pool{Tenant: "owner", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if ok, err := s.AddWarm(ctx, &Sandbox{ID: id, Tenant: "owner", Pool: "p"}); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	pop := func() []string {
		res, err := popAcrossScript.Run(ctx, s.rdb, []string{s.readyKey("owner", "p"), s.allocKey("owner", "p"), s.claimingKey("owner"), s.warmSetKey("owner"), s.opKey(s.readyKey("owner", "p"))},
			1, s.recordPrefix("owner"), "claimer|0|p").StringSlice()
		if err != nil || len(res) != 5 {
			t.Fatalf("pop: %v, %v", res, err)
		}
		return res
	}
	// Died after the pop: the member goes back to its pool.
	first := pop()
	if n, err := s.RepairClaims(ctx, time.Second); err != nil || n != 1 {
		t.Fatalf("repair after a pop: %d, %v", n, err)
	}
	if ready, _ := s.ReadyMembers(ctx, "owner", "p"); !slices.Contains(ready, first[0]) {
		t.Fatalf("member %s not back in the pool: %v", first[0], ready)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "owner", "p"); len(alloc) != 0 {
		t.Fatalf("allocated after the give-back = %v", alloc)
	}
	// Died after the bind: the member becomes the claimer's for good.
	second := pop()
	if err := bindAcrossScript.Run(ctx, s.rdb, []string{s.tenantIndex("claimer"), s.expiryKey("claimer"), s.usageKey("claimer")},
		`{"tenant":"claimer"}`, 1, "", s.recordPrefix("claimer"), "claimer", "owner/p", second[0], second[1], second[2], second[3], second[4]).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RepairClaims(ctx, time.Second); err != nil || n != 1 {
		t.Fatalf("repair after a bind: %d, %v", n, err)
	}
	sb, err := s.GetSandbox(ctx, second[0])
	if err != nil || sb.Tenant != "claimer" {
		t.Fatalf("moved member = %+v, %v", sb, err)
	}
	if n, _ := s.rdb.Exists(ctx, s.sandboxKey("owner", second[0])).Result(); n != 0 {
		t.Fatal("the pool tenant's slot still holds the moved record")
	}
	if warm, _ := s.WarmIDs(ctx); warm[second[0]] {
		t.Fatal("the moved member is still warm")
	}
	// Its delete leaves the other tenant's allocated set too.
	if err := s.DeleteSandbox(ctx, second[0]); err != nil {
		t.Fatal(err)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "owner", "p"); len(alloc) != 0 {
		t.Fatalf("allocated after the delete = %v", alloc)
	}
	if n, err := s.RepairClaims(ctx, 0); err != nil || n != 0 {
		t.Fatalf("nothing left to repair: %d, %v", n, err)
	}
}

// TestListAcrossTenants: the background passes' reads walk every active tenant, and a
// tenant's keys stay its own: an id taken by one tenant cannot be written by another.
func TestListAcrossTenants(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond)
	for i, tn := range []string{"a", "b", "c"} {
		exp := base.Add(time.Duration(i+1) * time.Minute)
		sb := &Sandbox{ID: "s-" + tn, Tenant: tn, State: "Running", CreatedAt: base.Add(time.Duration(i) * time.Second), ExpiresAt: &exp}
		if err := s.CreateSandbox(ctx, sb, 0); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.ListSandboxes(ctx, "")
	if err != nil || len(all) != 3 || all[0].ID != "s-c" || all[2].ID != "s-a" {
		t.Fatalf("all, newest first = %v, %v", ids(all), err)
	}
	if own, _ := s.ListSandboxes(ctx, "b"); len(own) != 1 || own[0].ID != "s-b" {
		t.Fatalf("tenant b lists %v", ids(own))
	}
	if old, _ := s.OldestExpiry(ctx); !old.Equal(base.Add(time.Minute)) {
		t.Fatalf("oldest expiry %v, want %v", old, base.Add(time.Minute))
	}
	if due, _ := s.ExpiredSandboxes(ctx, base.Add(150*time.Second), 10); len(due) != 2 {
		t.Fatalf("due = %v", due)
	}
	// Tenant b cannot take a's id, nor overwrite a's record through an update.
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "s-a", Tenant: "b", CreatedAt: base}, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("b creating a's id: %v, want ErrConflict", err)
	}
	if err := s.UpdateSandbox(ctx, &Sandbox{ID: "s-a", Tenant: "b", Rev: 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("b updating a's record: %v, want ErrConflict", err)
	}
	if sb, err := s.GetSandbox(ctx, "s-a"); err != nil || sb.Tenant != "a" {
		t.Fatalf("a's record = %+v, %v", sb, err)
	}
	if n, _ := s.CountSandboxes(ctx, "b"); n != 1 {
		t.Fatalf("b holds %d", n)
	}
	got, err := s.GetSandboxes(ctx, []string{"s-a", "s-c", "missing"})
	if err != nil || len(got) != 2 {
		t.Fatalf("GetSandboxes = %v, %v", ids(got), err)
	}
}

func ids(sbs []*Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	return out
}

func formatInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestMigrateLayout: a store written in the layout from before Redis Cluster support
// (keys as that version's scripts wrote them, reproduced command by command) is moved to
// today's at the reconciler's first pass, and nothing of it is lost: claimed and warm
// pool members, their pool, the expiry schedule, usage, a batch with queued work, API
// keys and sessions, plugins.
func TestMigrateLayout(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	r := s.rdb
	P := s.prefix
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := now.Add(time.Hour)
	rec := func(sb *Sandbox) string { b, _ := json.Marshal(sb); return string(b) }
	// A claimed member of pool a/p, a warm one, and a plain sandbox of tenant b.
	r.HSet(ctx, P+"sandbox:c1", "json", rec(&Sandbox{ID: "c1", Tenant: "a", Pool: "p", State: "Running", CreatedAt: now, ExpiresAt: &exp}), "rev", 2, "tenant", "a", "pool", "a/p", "ucpu", 500, "umem", 100)
	r.HSet(ctx, P+"sandbox:w1", "json", rec(&Sandbox{ID: "w1", Tenant: "a", Pool: "p", State: "Running"}), "rev", 1, "tenant", "a", "pool", "a/p", "ucpu", 500, "umem", 100)
	r.HSet(ctx, P+"sandbox:b1", "json", rec(&Sandbox{ID: "b1", Tenant: "b", State: "Running", CreatedAt: now}), "rev", 1, "tenant", "b", "ucpu", 0, "umem", 0)
	r.ZAdd(ctx, P+"tenant:a:sandboxes", redisZ(now, "c1"))
	r.ZAdd(ctx, P+"tenant:b:sandboxes", redisZ(now, "b1"))
	r.ZAdd(ctx, P+"sandboxes", redisZ(now, "c1"), redisZ(now, "b1"))
	r.ZAdd(ctx, P+"expiry", redisZ(exp, "c1"))
	r.HSet(ctx, P+"tenant:a:usage", "sandboxes", 1, "cpu", 500, "mem", 100)
	r.HSet(ctx, P+"pools", "a/p", `{"tenant":"a","name":"p","template":{},"capacitySpec":{"bufferMin":1,"bufferMax":2,"poolMin":0,"poolMax":5},"version":1}`)
	r.RPush(ctx, P+"pool:a/p:ready", "w1")
	r.SAdd(ctx, P+"pool:a/p:allocated", "c1")
	r.SAdd(ctx, P+"warm", "w1")
	r.HSet(ctx, P+"batch:bt", "json", `{"id":"bt","tenant":"a","count":2,"members":["q1","q2"]}`, "tenant", "a", "work", `{"w":1}`, "queued:q2", "g1")
	r.SAdd(ctx, P+"batches:open", "bt")
	r.ZAdd(ctx, P+"tenant:a:batches", redisZ(now, "bt"))
	r.HSet(ctx, P+"keys", HashKey("secret"), `{"id":"k1","tenant":"a","role":"member"}`)
	r.HSet(ctx, P+"keyids", "k1", HashKey("secret"))
	r.SAdd(ctx, P+"tenant:a:keys", "k1")
	r.Set(ctx, P+"session:"+HashKey("cookie"), `{"keyId":"k1","tenant":"a","role":"member","csrfToken":"c"}`, time.Hour)
	r.HSet(ctx, P+"tenant:a:bucket", "tokens", "1", "ts", "1")
	r.HSet(ctx, P+"plugin:a:pl", "version", "1")
	r.SAdd(ctx, P+"plugins:a", "pl")
	r.SAdd(ctx, P+"plugins:tenants", "a")
	// A gateway of today wrote one sandbox of tenant b before the migration ran.
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "b2", Tenant: "b", State: "Running", CreatedAt: now}, 0); err != nil {
		t.Fatal(err)
	}

	m, err := s.MigrateLayout(ctx)
	if err != nil || m.Records != 3 || m.Batches != 1 {
		t.Fatalf("migration = %+v, %v", m, err)
	}
	if all, _ := s.ListSandboxes(ctx, ""); len(all) != 3 {
		t.Fatalf("records after the migration: %v (the warm w1 is not listed)", ids(all))
	}
	if own, _ := s.ListSandboxes(ctx, "b"); len(own) != 2 {
		t.Fatalf("tenant b's index lost a record: %v", ids(own))
	}
	if sb, err := s.GetSandbox(ctx, "c1"); err != nil || sb.Tenant != "a" || sb.Rev != 2 {
		t.Fatalf("c1 = %+v, %v", sb, err)
	}
	if warm, _ := s.WarmIDs(ctx); !warm["w1"] || len(warm) != 1 {
		t.Fatalf("warm = %v", warm)
	}
	if ready, _ := s.ReadyMembers(ctx, "a", "p"); !slices.Equal(ready, []string{"w1"}) {
		t.Fatalf("ready = %v", ready)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "a", "p"); !slices.Equal(alloc, []string{"c1"}) {
		t.Fatalf("allocated = %v", alloc)
	}
	if p, err := s.GetPool(ctx, "a", "p"); err != nil || p.Capacity.PoolMax != 5 {
		t.Fatalf("pool = %+v, %v", p, err)
	}
	if due, _ := s.ExpiredSandboxes(ctx, exp.Add(time.Second), 10); !slices.Equal(due, []string{"c1"}) {
		t.Fatalf("expiry = %v", due)
	}
	if u, _ := s.TenantUsage(ctx, "a"); u != (Usage{1, 500, 100}) {
		t.Fatalf("usage = %+v", u)
	}
	if open, _ := s.OpenBatches(ctx); !slices.Equal(open, []string{"bt"}) {
		t.Fatalf("open batches = %v", open)
	}
	if b, _, err := s.GetBatch(ctx, "bt"); err != nil || b.Queued["q2"] != "g1" {
		t.Fatalf("batch = %+v, %v", b, err)
	}
	if k, err := s.LookupKey(ctx, "secret"); err != nil || k.ID != "k1" {
		t.Fatalf("key = %+v, %v", k, err)
	}
	if sess, key, err := s.GetSession(ctx, "cookie", "admin"); err != nil || sess.KeyID != "k1" || key == nil {
		t.Fatalf("session = %+v, %+v, %v", sess, key, err)
	}
	if keys, _ := s.ListKeys(ctx, "a"); len(keys) != 1 {
		t.Fatalf("tenant keys = %v", keys)
	}
	if n, _ := r.Exists(ctx, P+"{plugins}:plugin:a:pl", P+"{plugins}:plugins:tenants").Result(); n != 2 {
		t.Fatalf("plugin keys moved: %d of 2", n)
	}
	// Nothing of the old layout is left but the bucket (today's name too).
	var left []string
	if err := s.scanKeys(ctx, P+"*", func(k string) {
		if !strings.Contains(k, "{") && !strings.HasPrefix(k, P+"loc:") && !strings.HasPrefix(k, P+"tenants:") {
			left = append(left, k)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{P + "tenant:a:bucket"}) {
		t.Fatalf("old keys left: %v", left)
	}
	if m, err := s.MigrateLayout(ctx); err != nil || m != (Migration{}) {
		t.Fatalf("second migration = %+v, %v", m, err)
	}
	// The migrated claimed member leaves its pool when deleted.
	if err := s.DeleteSandbox(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "a", "p"); len(alloc) != 0 {
		t.Fatalf("allocated after the delete = %v", alloc)
	}
}

func redisZ(at time.Time, id string) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: id}
}
