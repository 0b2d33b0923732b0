package pool

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// claimPatch is the patch the core's claim writes, with lb to bind late.
func claimPatch(pool string, lb *store.LateBind) store.ClaimPatch {
	now := time.Now().UTC()
	p := store.ClaimPatch{
		"tenant": "default", "metadata": map[string]string{MetadataPool: pool},
		"createdAt": now, "lastTransitionAt": now, "state": stateRunning,
	}
	if lb != nil {
		p["lateBind"] = lb
	}
	return p
}

func (s started) claim(t *testing.T, p *store.Pool, lb *store.LateBind) *store.Sandbox {
	t.Helper()
	got, err := s.m.Claim(context.Background(), p, "default", 1, claimPatch(p.Name, lb), time.Now().UnixMilli(), "")
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %d members, %v", len(got), err)
	}
	return got[0]
}

func (s started) record(t *testing.T, id string) *store.Sandbox {
	t.Helper()
	sb, err := s.d.Store.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

func (s started) waitGone(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.d.Runtime.Inspect(context.Background(), id); errors.Is(err, runtimes.ErrNotFound) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sandbox %s still in the runtime", id)
}

// TestRefillKeepsBounds: the manager fills a pool to bufferMax, shrinks it when the
// bounds come down, and replaces members built from an older template.
func TestRefillKeepsBounds(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 4})
	s.m.Start()
	s.waitAvailable(t, p, 2)
	if insts, _ := s.d.Runtime.List(ctx); len(insts) != 2 {
		t.Fatalf("%d sandboxes in the runtime, want 2", len(insts))
	}

	p.Capacity = store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 4}
	if err := s.d.Store.PutPool(ctx, p, false); err != nil {
		t.Fatal(err)
	}
	s.m.Kick()
	s.waitAvailable(t, p, 1)
	old, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)

	p.Version++
	if err := s.d.Store.PutPool(ctx, p, false); err != nil {
		t.Fatal(err)
	}
	s.m.Kick()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
		if len(ready) == 1 && ready[0] != old[0] {
			if s.record(t, ready[0]).PoolVersion != p.Version {
				t.Fatalf("the new member is of version %d, want %d", s.record(t, ready[0]).PoolVersion, p.Version)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outdated member %s was not replaced (ready %v)", old[0], ready)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.waitGone(t, old[0])
}

// TestRefillReplacesDeadMembers: a warm member the runtime no longer runs leaves its
// pool at the next sweep and another takes its place.
func TestRefillReplacesDeadMembers(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{HealthInterval: time.Nanosecond})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 2})
	s.m.Start()
	s.waitAvailable(t, p, 2)
	ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
	dead := ready[0]
	if err := s.d.Runtime.Delete(ctx, dead); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
		if len(ready) == 2 && !slices.Contains(ready, dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead member %s not replaced: ready %v", dead, ready)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefillWithoutLease: a gateway that does not hold the "pools" lease leaves the
// pools to the one that does.
func TestRefillWithoutLease(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 1})
	if ok, err := s.d.Store.AcquireLease(ctx, "pools", "another", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	s.m.refillOnce(ctx)
	if n := s.m.startingCount(store.PoolKey(p.Tenant, p.Name)); n != 0 {
		t.Fatalf("%d members starting without the lease", n)
	}
}

// TestRefillInvalidTemplate: a template the core refuses makes no members.
func TestRefillInvalidTemplate(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	s.host.badTemplate = true
	p := s.putPool(t, "p", store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 1})
	s.m.refillOnce(ctx)
	if n := s.m.startingCount(store.PoolKey(p.Tenant, p.Name)); n != 0 {
		t.Fatalf("%d members starting from a refused template", n)
	}
}

// TestClaimLateBinding: a claim hands out warm members at once, routes them, and
// applies their binding before their first call goes through; a member whose binding
// is refused is marked Failed and removed, and its calls get ErrMemberDied.
func TestClaimLateBinding(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 4})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 2)

	sb := s.claim(t, p, &store.LateBind{Env: map[string]string{"A": "1"}})
	if s.m.SettleWait() <= 0 {
		t.Error("no settle wait right after a claim")
	}
	s.host.mu.Lock()
	routed := s.host.routed[sb.ID]
	s.host.mu.Unlock()
	if !routed {
		t.Error("the claimed member was not put into the route cache")
	}
	if err := s.m.BeforeCall(ctx, sb); err != nil {
		t.Fatalf("first call: %v", err)
	}
	s.host.mu.Lock()
	lb := s.host.binds[sb.ID]
	s.host.mu.Unlock()
	if lb == nil || lb.Env["A"] != "1" {
		t.Fatalf("binding applied = %+v, want env A=1", lb)
	}
	if rec := s.record(t, sb.ID); rec.LateBind != nil {
		t.Errorf("the record still names its binding: %+v", rec.LateBind)
	}

	s.host.mu.Lock()
	s.host.refuseBinds = true
	s.host.mu.Unlock()
	bad := s.claim(t, p, &store.LateBind{Env: map[string]string{"B": "2"}})
	if err := s.m.BeforeCall(ctx, bad); !errors.Is(err, ErrMemberDied) {
		t.Fatalf("first call to a member whose binding was refused: %v, want ErrMemberDied", err)
	}
	rec := s.record(t, bad.ID)
	if rec.State != stateFailed || rec.Reason != ReasonMemberDied {
		t.Errorf("record %s/%s, want %s/%s", rec.State, rec.Reason, stateFailed, ReasonMemberDied)
	}
	if err := s.m.BeforeCall(ctx, rec); !errors.Is(err, ErrMemberDied) {
		t.Errorf("a call on the Failed record: %v, want ErrMemberDied", err)
	}
	s.waitGone(t, bad.ID)
	s.host.mu.Lock()
	routed = s.host.routed[bad.ID]
	s.host.mu.Unlock()
	if routed {
		t.Error("the failed member is still routed")
	}
}

// TestClaimEmptyPool: a claim of an empty pool gets nothing and no error.
func TestClaimEmptyPool(t *testing.T) {
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{PoolMax: 1})
	got, err := s.m.Claim(context.Background(), p, "default", 1, claimPatch("p", nil), time.Now().UnixMilli(), "")
	if err != nil || len(got) != 0 {
		t.Fatalf("claim of an empty pool: %d, %v", len(got), err)
	}
	if err := s.m.BeforeCall(context.Background(), &store.Sandbox{ID: "cold"}); err != nil {
		t.Fatalf("a call to a sandbox not from a pool: %v", err)
	}
}

// TestBindElsewhere: a member claimed by another gateway has its first call here wait
// for that gateway's binding; one whose claiming gateway died is bound here.
func TestBindElsewhere(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 2})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 2)

	// Another replica on the same store and runtime claims and binds.
	other := New(s.m.cfg, s.d.Store, s.d.Runtime, newTestHost(s.d.Runtime), s.d.Log)
	t.Cleanup(other.Stop)
	got, err := other.Claim(ctx, p, "default", 1, claimPatch("p", &store.LateBind{Env: map[string]string{"A": "1"}}), time.Now().UnixMilli(), "")
	if err != nil || len(got) != 1 {
		t.Fatalf("claim on the other replica: %d, %v", len(got), err)
	}
	if err := s.m.BeforeCall(ctx, got[0]); err != nil {
		t.Fatalf("call here to a member the other replica binds: %v", err)
	}

	// A claim whose gateway died before it bound: the record alone names the binding.
	orphans, err := s.d.Store.Claim(ctx, p.Tenant, p.Name, "default", 1, claimPatch("p", &store.LateBind{Env: map[string]string{"C": "3"}}), time.Now().UnixMilli(), "")
	if err != nil || len(orphans) != 1 {
		t.Fatalf("store claim: %d, %v", len(orphans), err)
	}
	if err := s.m.BeforeCall(ctx, orphans[0]); err != nil {
		t.Fatalf("call to a member whose claiming gateway died: %v", err)
	}
	s.host.mu.Lock()
	lb := s.host.binds[orphans[0].ID]
	s.host.mu.Unlock()
	if lb == nil || lb.Env["C"] != "3" {
		t.Fatalf("binding applied here = %+v, want env C=3", lb)
	}
}

// TestMemberUnreachable: a claimed member that the runtime still runs is left alone;
// one it does not is marked Failed.
func TestMemberUnreachable(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 2})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 1)
	sb := s.claim(t, p, nil)
	if err := s.m.MemberUnreachable(ctx, sb, errors.New("timeout")); err != nil {
		t.Fatalf("a running member: %v", err)
	}
	if err := s.d.Runtime.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.m.MemberUnreachable(ctx, sb, errors.New("refused")); !errors.Is(err, ErrMemberDied) {
		t.Fatalf("a gone member: %v, want ErrMemberDied", err)
	}
	if rec := s.record(t, sb.ID); rec.State != stateFailed || rec.Reason != ReasonMemberDied {
		t.Errorf("record %s/%s, want Failed/%s", rec.State, rec.Reason, ReasonMemberDied)
	}
}

// TestSandboxDied: the runtime's report of a death takes a warm member out of its pool,
// marks a claimed one Failed, and hands any other sandbox to the host.
func TestSandboxDied(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 3})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 2)
	ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)

	s.m.sandboxDied(ctx, ready[0])
	if now, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name); slices.Contains(now, ready[0]) {
		t.Errorf("the dead warm member %s is still in its pool", ready[0])
	}
	s.waitGone(t, ready[0])

	claimed := s.claim(t, p, nil)
	s.m.sandboxDied(ctx, claimed.ID)
	if rec := s.record(t, claimed.ID); rec.State != stateFailed || rec.Reason != ReasonMemberDied {
		t.Errorf("claimed member %s/%s, want Failed/%s", rec.State, rec.Reason, ReasonMemberDied)
	}

	now := time.Now().UTC()
	cold := &store.Sandbox{ID: "cold-1", Tenant: "default", State: stateRunning, CreatedAt: now, LastTransitionAt: now}
	if err := s.d.Store.CreateSandbox(ctx, cold, 0); err != nil {
		t.Fatal(err)
	}
	s.m.sandboxDied(ctx, cold.ID)
	s.m.sandboxDied(ctx, "no-such-sandbox")
	s.host.mu.Lock()
	died := slices.Clone(s.host.died)
	s.host.mu.Unlock()
	if !slices.Equal(died, []string{"cold-1"}) {
		t.Errorf("host told of deaths %v, want [cold-1]", died)
	}
}

// blockingPuller is an image puller whose pull ends when the test says, with the
// error it says: a registry cannot be made to fail, or wait, on demand.
type blockingPuller struct {
	release chan error
}

func (b blockingPuller) HasImage(context.Context, string, string) (bool, error) { return false, nil }
func (b blockingPuller) CheckRegistry(context.Context, string) error            { return nil }
func (b blockingPuller) Pull(ctx context.Context, _ string, _ *runtimes.ImageAuth, progress func(runtimes.PullProgress)) error {
	progress(runtimes.PullProgress{})
	select {
	case err := <-b.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestPull: a pool waits for its image's pull, fills once it is done, and makes no
// members when it fails; the status says which.
func TestPull(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	tests := []struct {
		name    string
		pullErr error
		state   string
		members int64
	}{
		{"pulled", nil, ImageReady, 1},
		{"refused", errors.New("manifest unknown"), ImageFailed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := s.putPool(t, tt.name, store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 1})
			key := store.PoolKey(p.Tenant, p.Name)
			ip := blockingPuller{release: make(chan error)}
			s.m.StartPull(key, "img:"+tt.name, nil, ip)
			if st := s.m.Pull(key); st == nil || st.State != ImagePulling {
				t.Fatalf("status while pulling = %+v", st)
			}
			s.m.refillOnce(ctx)
			if c, _ := s.d.Store.CountPool(ctx, p.Tenant, p.Name); c.Available != 0 || s.m.startingCount(key) != 0 {
				t.Fatal("members started before the pull ended")
			}
			ip.release <- tt.pullErr
			deadline := time.Now().Add(5 * time.Second)
			for s.m.Pull(key).State == ImagePulling {
				if time.Now().After(deadline) {
					t.Fatal("the pull did not end")
				}
				time.Sleep(5 * time.Millisecond)
			}
			st := s.m.Pull(key)
			if st.State != tt.state {
				t.Fatalf("state %s, want %s", st.State, tt.state)
			}
			if tt.pullErr != nil && !strings.Contains(st.Message, tt.pullErr.Error()) {
				t.Errorf("message %q does not say %q", st.Message, tt.pullErr)
			}
			s.m.refillOnce(ctx)
			s.waitAvailable(t, p, tt.members)
			s.m.ClearPull(key)
			if s.m.Pull(key) != nil {
				t.Error("status kept after ClearPull")
			}
		})
	}
}

// TestWarmConns: each member made warm gets the proxy's connection at once, is used
// again once idle for half the proxy's timeout, and one made by another gateway gets
// its connection at this gateway's next pass.
func TestWarmConns(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{AgentIdleTimeout: 100 * time.Millisecond})
	var mu sync.Mutex
	uses := map[string]int{}
	s.m.SetConnWarmer(func(_ context.Context, addr, token string) error {
		mu.Lock()
		defer mu.Unlock()
		uses[addr]++
		return nil
	})
	count := func(addr string) int {
		mu.Lock()
		defer mu.Unlock()
		return uses[addr]
	}
	p := s.putPool(t, "p", store.Capacity{BufferMin: 1, BufferMax: 1, PoolMax: 2})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 1)
	ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
	addr := s.record(t, ready[0]).Address + ":44772"
	if n := count(addr); n != 1 {
		t.Fatalf("%d uses of the new member's connection, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	s.m.refillOnce(ctx)
	waitFor(t, func() bool { return count(addr) >= 2 }, "the idle connection used again")

	// Another gateway, which never opened it, opens it at its pass.
	other := New(s.m.cfg, s.d.Store, s.d.Runtime, newTestHost(s.d.Runtime), s.d.Log)
	t.Cleanup(other.Stop)
	seen := make(chan string, 4)
	other.SetConnWarmer(func(_ context.Context, addr, _ string) error {
		seen <- addr
		return nil
	})
	other.refreshWarmConns(ctx, ready)
	select {
	case got := <-seen:
		if got != addr {
			t.Errorf("other gateway opened %s, want %s", got, addr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other gateway opened no connection")
	}

	// A member claimed meanwhile is forgotten once past its refresh.
	s.claim(t, p, nil)
	time.Sleep(60 * time.Millisecond)
	s.m.forgetWarmConns(map[string]bool{})
	s.m.mu.Lock()
	left := len(s.m.warmConns)
	s.m.mu.Unlock()
	if left != 0 {
		t.Errorf("%d warm connections remembered, want 0", left)
	}
}

// TestStartingPublished: the counts of members starting on this gateway reach the
// store, where every replica reads them, and a count that falls to zero is cleared.
func TestStartingPublished(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	key := store.PoolKey("default", "p")
	published := func() int64 {
		t.Helper()
		n, err := s.d.Store.StartingCount(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	s.m.mu.Lock()
	s.m.starting[key] = 3
	s.m.mu.Unlock()
	s.m.publishStarting(ctx)
	if n := published(); n != 3 {
		t.Fatalf("published starting count %d, want 3", n)
	}
	s.m.mu.Lock()
	s.m.starting[key] = 0
	s.m.mu.Unlock()
	s.m.publishStarting(ctx)
	if n := published(); n != 0 {
		t.Fatalf("published starting count %d after the starts ended, want 0", n)
	}
}

// TestRefillCountsMembersStartingElsewhere: the gateway that refills counts the
// members another gateway is still starting (one that held the "pools" lease before),
// so the two together never pass poolMax.
func TestRefillCountsMembersStartingElsewhere(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 3, BufferMax: 3, PoolMax: 3})
	key := store.PoolKey(p.Tenant, p.Name)
	if err := s.d.Store.PublishStarting(ctx, "previous-holder", map[string]int{key: 2}, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.m.managePool(ctx, p, nil)
	if n := s.m.startingCount(key); n != 1 {
		t.Fatalf("the pass started %d members; 2 start elsewhere and poolMax is 3, so want 1", n)
	}
}

// TestRefillCountsAMemberThatJoinsWhileItCounts: a member that finishes its start
// between the pass's read of the starting counts and its read of the pool is not
// missed, so the pass does not start one beyond poolMax.
func TestRefillCountsAMemberThatJoinsWhileItCounts(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 2})
	key := store.PoolKey(p.Tenant, p.Name)
	addWarm := func(id string) {
		t.Helper()
		now := time.Now().UTC()
		sb := &store.Sandbox{ID: id, Tenant: p.Tenant, State: stateRunning, CreatedAt: now, LastTransitionAt: now, Pool: p.Name, PoolVersion: p.Version}
		if ok, err := s.d.Store.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm %s: %v, %v", id, ok, err)
		}
	}
	addWarm("ready-1")
	s.m.mu.Lock()
	s.m.starting[key] = 1 // the pool's second member is starting
	s.m.mu.Unlock()
	betweenPoolReads = func() { // and finishes while the pass counts
		addWarm("ready-2")
		s.m.mu.Lock()
		s.m.starting[key]--
		s.m.mu.Unlock()
	}
	t.Cleanup(func() { betweenPoolReads = func() {} })
	s.m.managePool(ctx, p, nil)
	betweenPoolReads = func() {}
	if n := s.m.startingCount(key); n != 0 {
		t.Fatalf("the pass started %d members of a full pool (poolMax 2)", n)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClaimDropsAMemberThatDiedUnreported: a warm member whose agent is gone before the
// runtime reported its death (no event, no sweep yet) is not handed out: the claim's
// ping finds it, its record goes, and the claim returns the members that answer.
func TestClaimDropsAMemberThatDiedUnreported(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	// What the gateway's proxy does: a /ping to the agent at addr (host:44772).
	s.m.SetConnWarmer(func(ctx context.Context, addr, token string) error {
		host, _, _ := net.SplitHostPort(addr)
		return s.host.agents.Ping(ctx, host, token, time.Second)
	})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 2})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 2)
	ready, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
	dead := ready[0]
	if err := s.d.Runtime.Delete(ctx, dead); err != nil { // the runtime tells no one
		t.Fatal(err)
	}
	got, err := s.m.Claim(ctx, p, "default", 2, claimPatch(p.Name, nil), time.Now().UnixMilli(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID == dead {
		ids := []string{}
		for _, sb := range got {
			ids = append(ids, sb.ID)
		}
		t.Fatalf("claim handed out %v; %s is dead, want only the other member", ids, dead)
	}
	if _, err := s.d.Store.GetSandbox(ctx, dead); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the dead member's record is still there: %v", err)
	}
	s.host.mu.Lock()
	routed := s.host.routed[dead]
	s.host.mu.Unlock()
	if routed {
		t.Fatal("the dead member was put in the route cache")
	}
	if c, _ := s.d.Store.CountPool(ctx, p.Tenant, p.Name); c.Allocated != 1 {
		t.Fatalf("pool counts %+v after claiming one live member and one dead: want 1 allocated", c)
	}
}
