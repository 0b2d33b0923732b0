package store

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lateAnswerStandIn is a TCP relay between the store's client and Redis that holds back
// the answer to one chosen command for 1.5 CommandTimeouts: Redis has run the command,
// the client gives up on its answer at the read deadline and sends it again on another
// connection, as it does when a busy Redis or a slow network answers late. A stand-in:
// a real Redis is late when it will be, not when a test asks.
type lateAnswerStandIn struct {
	ln     net.Listener
	redis  string
	armed  atomic.Pointer[[]byte] // the command's name as the client writes it, in RESP
	held   atomic.Bool
	closed chan struct{}
}

func startLateAnswer(t *testing.T, redisAddr string) *lateAnswerStandIn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &lateAnswerStandIn{ln: ln, redis: redisAddr, closed: make(chan struct{})}
	t.Cleanup(func() { close(h.closed); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.relay(c)
		}
	}()
	return h
}

func (h *lateAnswerStandIn) relay(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", h.redis)
	if err != nil {
		return
	}
	defer server.Close()
	var holdNext atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if name := h.armed.Load(); name != nil && bytes.Contains(bytes.ToLower(buf[:n]), *name) && h.armed.CompareAndSwap(name, nil) {
					holdNext.Store(true)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				server.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if holdNext.CompareAndSwap(true, false) {
				h.held.Store(true)
				select {
				case <-time.After(CommandTimeout * 3 / 2):
				case <-h.closed:
				}
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// answerLate runs op with the answer to its first command named cmd (as Redis counts
// them: "evalsha") held back past the read deadline; it fails the test unless Redis
// ran that command calls+1 times (calls: how often op runs it when nothing is late),
// so that the case is sure to have met a command sent twice.
func answerLate(t *testing.T, s *Store, cmd string, calls int, op func() error) error {
	t.Helper()
	rc, ok := s.rdb.(*redis.Client)
	if !ok {
		t.Skip("needs one redis-server to relay")
	}
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: rc.Options().Addr, Password: rc.Options().Password})
	defer direct.Close()
	h := startLateAnswer(t, rc.Options().Addr)
	// The store's client, through the relay: the same options (deadlines, one retry).
	o := *rc.Options()
	o.Addr = h.ln.Addr().String()
	relayed := redis.NewClient(&o)
	defer relayed.Close()
	relayed.AddHook(slotCheck{t})
	orig := s.rdb
	s.rdb = relayed
	defer func() { s.rdb = orig }()
	if err := direct.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	name := []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(cmd), cmd))
	h.armed.Store(&name)
	err := op()
	if !h.held.Load() {
		t.Fatalf("op sent no %s", cmd)
	}
	info, ierr := direct.Info(ctx, "commandstats").Result()
	if ierr != nil {
		t.Fatal(ierr)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+),`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("no %s in the command stats:\n%s", cmd, info)
	}
	if n, _ := strconv.Atoi(m[1]); n != calls+1 {
		t.Fatalf("Redis ran %s %d times, want %d (the late one sent again)", cmd, n, calls+1)
	}
	return err
}

// The tests below each send one write of the store twice (its answer late, as above)
// and check that it took effect once and answered as if sent once.

func sentAgainSandbox(id string) *Sandbox {
	now := time.Now().UTC()
	return &Sandbox{ID: id, Tenant: "o", State: "Running", CreatedAt: now, LastTransitionAt: now}
}

// TestCreateSentAgain: a create sent twice succeeds (no conflict with itself) and counts
// once in the tenant's usage.
func TestCreateSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, sentAgainSandbox("a"), 0); err != nil { // loads the script
		t.Fatal(err)
	}
	sb := sentAgainSandbox("b")
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.CreateSandbox(ctx, sb, 0) }); err != nil {
		t.Fatalf("create sent again: %v", err)
	}
	if sb.Rev != 1 {
		t.Errorf("rev %d, want 1", sb.Rev)
	}
	if u, _ := s.TenantUsage(ctx, "o"); u.Sandboxes != 2 {
		t.Errorf("usage %+v, want 2 sandboxes", u)
	}
}

// TestUpdateSentAgain: an update sent twice succeeds instead of conflicting with itself.
func TestUpdateSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	sb := sentAgainSandbox("a")
	if err := s.CreateSandbox(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	sb.State = "Paused"
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.UpdateSandbox(ctx, sb) }); err != nil {
		t.Fatalf("update sent again: %v", err)
	}
	got, err := s.GetSandbox(ctx, "a")
	if err != nil || got.Rev != 2 || got.State != "Paused" || sb.Rev != 2 {
		t.Errorf("record %+v, %v (caller's rev %d); want Paused at rev 2", got, err, sb.Rev)
	}
}

// TestDeleteSentAgain: a delete sent twice removes the id's locator (the second run of
// the old script found no record and left it) and counts once.
func TestDeleteSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if err := s.CreateSandbox(ctx, sentAgainSandbox(id), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteSandbox(ctx, "a"); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.DeleteSandbox(ctx, "b") }); err != nil {
		t.Fatalf("delete sent again: %v", err)
	}
	if n, _ := s.rdb.Exists(ctx, s.locKey(locSandbox, "b")).Result(); n != 0 {
		t.Error("the deleted sandbox's locator is left")
	}
	if u, _ := s.TenantUsage(ctx, "o"); u.Sandboxes != 1 {
		t.Errorf("usage %+v, want 1 sandbox", u)
	}
}

func sentAgainPool(t *testing.T, s *Store, tenant string, members int) {
	t.Helper()
	ctx := context.Background()
	if err := s.PutPool(ctx, &Pool{Tenant: tenant, Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range members {
		sb := &Sandbox{ID: fmt.Sprintf("%s-m%d", tenant, i), Tenant: tenant, State: "Running", CreatedAt: now, LastTransitionAt: now, Pool: "p"}
		if ok, err := s.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm: %v, %v", ok, err)
		}
	}
}

// TestAddWarmSentAgain: a warm member added twice is in its pool's ready list once (the
// old script pushed it twice, and a claim then bound it twice).
func TestAddWarmSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	sentAgainPool(t, s, "o", 1)
	now := time.Now().UTC()
	sb := &Sandbox{ID: "w", Tenant: "o", State: "Running", CreatedAt: now, LastTransitionAt: now, Pool: "p"}
	var ok bool
	err := answerLate(t, s, "evalsha", 1, func() (err error) { ok, err = s.AddWarm(ctx, sb); return err })
	if err != nil || !ok {
		t.Fatalf("AddWarm sent again: %v, %v", ok, err)
	}
	if ids, _ := s.ReadyMembers(ctx, "o", "p"); len(ids) != 2 {
		t.Errorf("ready %v, want o-m0 and w once each", ids)
	}
}

// TestRemoveWarmSentAgain: a warm member removed by a command sent twice is reported
// removed (the old second run reported it claimed meanwhile) and loses its locator.
func TestRemoveWarmSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	sentAgainPool(t, s, "o", 2)
	if ok, err := s.RemoveWarm(ctx, "o", "p", "o-m0"); err != nil || !ok { // loads the script
		t.Fatal(ok, err)
	}
	var ok bool
	// The remove, then the locator's drop.
	err := answerLate(t, s, "evalsha", 2, func() (err error) { ok, err = s.RemoveWarm(ctx, "o", "p", "o-m1"); return err })
	if err != nil || !ok {
		t.Fatalf("RemoveWarm sent again: %v, %v; want removed", ok, err)
	}
	if n, _ := s.rdb.Exists(ctx, s.locKey(locSandbox, "o-m1")).Result(); n != 0 {
		t.Error("the removed member's locator is left")
	}
}

// TestClaimAcrossSentAgain: a claim from another tenant's pool whose pop is sent twice
// binds the members the first pop took, and no more: none is left parked, the pool keeps
// the rest.
func TestClaimAcrossSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	sentAgainPool(t, s, "d", 6)
	now := time.Now().UTC()
	if got, err := s.Claim(ctx, "d", "p", "o", 1, ClaimPatch{"tenant": "o"}, now.UnixMilli(), ""); err != nil || len(got) != 1 {
		t.Fatalf("first claim: %d, %v", len(got), err) // loads the scripts
	}
	var got []*Sandbox
	// The pop is the first script; bind and finish follow.
	err := answerLate(t, s, "evalsha", 3, func() (err error) {
		got, err = s.Claim(ctx, "d", "p", "o", 3, ClaimPatch{"tenant": "o"}, now.UnixMilli(), "")
		return err
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	left, _ := s.ReadyMembers(ctx, "d", "p")
	alloc, _ := s.AllocatedMembers(ctx, "d", "p")
	parked, _ := s.rdb.HLen(ctx, s.claimingKey("d")).Result()
	if len(got) != 3 || len(left) != 2 || len(alloc) != 4 || parked != 0 {
		t.Errorf("claimed %d, %v left, %d allocated, %d parked; want 3, two left, 4, none", len(got), left, len(alloc), parked)
	}
	if u, _ := s.TenantUsage(ctx, "o"); u.Sandboxes != 4 {
		t.Errorf("claimer's usage %+v, want 4", u)
	}
}

// TestAppendPerSandboxSentAgain: a batch's events sent twice are written once.
func TestAppendPerSandboxSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	ev := Event{Type: "sandbox.created", Tenant: "o", Time: time.Now().UTC()}
	if err := s.AppendPerSandbox(ctx, ev, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.AppendPerSandbox(ctx, ev, []string{"a", "b", "c"}) }); err != nil {
		t.Fatalf("append sent again: %v", err)
	}
	evs, _ := s.ReadEvents(ctx, "o", "", 100)
	if len(evs) != 4 {
		t.Errorf("%d events, want 4", len(evs))
	}
}

// TestBatchMemberSentAgain: settling a batch member, and taking one over, by a command
// sent twice reports that it happened (the old second runs reported another gateway's
// doing, and a member taken over so was made by nobody).
func TestBatchMemberSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	b := &Batch{ID: "b1", Tenant: "o", Count: 3, CreatedAt: time.Now().UTC()}
	if err := s.PutBatchWork(ctx, b, []byte(`{}`), "g1", []string{"m1", "m2", "m3"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.FinishMember(ctx, "b1", "m1", "g1"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n, err := s.TakeMember(ctx, "b1", "m3", "g1", "g0"); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	var ok bool
	if err := answerLate(t, s, "evalsha", 1, func() (err error) { ok, err = s.FinishMember(ctx, "b1", "m2", "g1"); return err }); err != nil || !ok {
		t.Errorf("FinishMember sent again: %v, %v; want true", ok, err)
	}
	b2 := &Batch{ID: "b2", Tenant: "o", Count: 1, CreatedAt: time.Now().UTC()}
	if err := s.PutBatchWork(ctx, b2, []byte(`{}`), "g1", []string{"m1"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := answerLate(t, s, "evalsha", 1, func() (err error) { n, err = s.TakeMember(ctx, "b2", "m1", "g1", "g2"); return err }); err != nil || n != 1 {
		t.Errorf("TakeMember sent again: %d, %v; want the first takeover (1)", n, err)
	}
}

// TestCooldownSentAgain: a cooldown started by a command sent twice is reported started
// (the old second run saw the first's start and said no, and no gateway renewed).
func TestCooldownSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := time.Now()
	if ok, err := s.TryCooldown(ctx, "x", now, time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	var ok bool
	if err := answerLate(t, s, "evalsha", 1, func() (err error) { ok, err = s.TryCooldown(ctx, "y", now, time.Minute); return err }); err != nil || !ok {
		t.Errorf("cooldown sent again: %v, %v; want started", ok, err)
	}
}

// TestUnscheduleIdleSentAgain: a conditional unschedule sent twice reports that it took
// the sandbox off (the old second run reported a request moved it, and the gateway woke
// the sandbox it had just paused).
func TestUnscheduleIdleSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	at := time.Now().Add(time.Minute)
	for _, id := range []string{"a", "b"} {
		if err := s.ScheduleIdle(ctx, id, at); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.UnscheduleIdleIf(ctx, "a", at); err != nil || !ok {
		t.Fatal(ok, err)
	}
	var ok bool
	if err := answerLate(t, s, "evalsha", 1, func() (err error) { ok, err = s.UnscheduleIdleIf(ctx, "b", at); return err }); err != nil || !ok {
		t.Errorf("unschedule sent again: %v, %v; want true", ok, err)
	}
}

// TestRevokeKeySentAgain: a key revoked by a command sent twice is no "not found".
func TestRevokeKeySentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	for i, id := range []string{"k1", "k2"} {
		if err := s.PutKey(ctx, fmt.Sprintf("secret-%d", i), &APIKey{ID: id, Tenant: "o", Role: "member"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RevokeKey(ctx, "o", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.RevokeKey(ctx, "o", "k2") }); err != nil {
		t.Errorf("revoke sent again: %v", err)
	}
}

// TestTakeTokensSentAgain: a take from the create bucket sent twice takes once.
func TestTakeTokensSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := time.Now()
	if ok, _, err := s.TakeTokens(ctx, "o", 0.001, 10, 1, now); err != nil || !ok {
		t.Fatal(ok, err)
	}
	var ok bool
	var left float64
	if err := answerLate(t, s, "evalsha", 1, func() (err error) { ok, left, err = s.TakeTokens(ctx, "o", 0.001, 10, 5, now); return err }); err != nil {
		t.Fatal(err)
	}
	if !ok || left > 4.01 || left < 3.99 {
		t.Errorf("took: %v, %v left; want true, 4", ok, left)
	}
	if ok, _, _ := s.TakeTokens(ctx, "o", 0.001, 10, 4, now); !ok {
		t.Error("the bucket lost the tokens of a take sent twice")
	}
}

// TestRotateLinkKeySentAgain: a rotation sent twice keeps the previous key (the old
// second run dropped it: links signed a moment before stopped working).
func TestRotateLinkKeySentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if _, err := s.RotateLinkKey(ctx, "k1", "aa"); err != nil {
		t.Fatal(err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error { _, err := s.RotateLinkKey(ctx, "k2", "bb"); return err }); err != nil {
		t.Fatal(err)
	}
	keys, cur, err := s.LinkKeys(ctx)
	if err != nil || cur != "k2" || keys["k1"] != "aa" || keys["k2"] != "bb" {
		t.Errorf("keys %v, current %q, %v; want k1 kept and k2 current", keys, cur, err)
	}
}

// TestCreateSnapshotSentAgain: the last snapshot a quota allows, created by a command
// sent twice, is no quota error.
func TestCreateSnapshotSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.CreateSnapshot(ctx, &Snapshot{ID: "s1", Tenant: "o", State: "Creating"}, 2); err != nil {
		t.Fatal(err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error {
		return s.CreateSnapshot(ctx, &Snapshot{ID: "s2", Tenant: "o", State: "Creating"}, 2)
	}); err != nil {
		t.Errorf("snapshot sent again: %v", err)
	}
}

// TestPutPoolAndTenantSentAgain: a pool or tenant created by a command sent twice is no
// conflict with itself.
func TestPutPoolAndTenantSentAgain(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	sentAgainPool(t, s, "o", 0)
	if err := s.PutTenant(ctx, &Tenant{ID: "t0"}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPool(ctx, &Pool{Tenant: "o", Name: "q", Template: []byte(`{}`)}, false); err != nil {
		t.Fatal(err) // loads the script, if it is one
	}
	if err := answerLate(t, s, "evalsha", 1, func() error {
		return s.PutPool(ctx, &Pool{Tenant: "o", Name: "r", Template: []byte(`{}`)}, true)
	}); err != nil {
		t.Errorf("pool create sent again: %v", err)
	}
	if err := answerLate(t, s, "evalsha", 1, func() error { return s.PutTenant(ctx, &Tenant{ID: "t1"}, true) }); err != nil {
		t.Errorf("tenant create sent again: %v", err)
	}
}
