package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The Lua scripts against a real redis-server: what each promises its callers.

// TestCreateSandboxQuota: the record write enforces the tenant's concurrency quota
// atomically and refuses a second record with the same id.
func TestCreateSandboxQuota(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	mk := func(id string) *Sandbox {
		return &Sandbox{ID: id, Tenant: "q", State: "Pending", CreatedAt: now, LastTransitionAt: now}
	}
	if err := s.CreateSandbox(ctx, mk("a"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, mk("a"), 2); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id again: %v, want ErrConflict", err)
	}
	if err := s.CreateSandbox(ctx, mk("b"), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, mk("c"), 2); !errors.Is(err, ErrQuota) {
		t.Fatalf("third of a quota of 2: %v, want ErrQuota", err)
	}
	if n, _ := s.CountSandboxes(ctx, "q"); n != 2 {
		t.Fatalf("tenant holds %d, want 2", n)
	}
	if err := s.DeleteSandbox(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, mk("c"), 2); err != nil {
		t.Fatalf("after a delete the quota has room: %v", err)
	}
	if err := s.CreateSandbox(ctx, mk("d"), 0); err != nil {
		t.Fatalf("quota 0 means none: %v", err)
	}
}

// TestClaimScript: a claim pops at most n ready members, binds them to the claiming
// tenant with the patch, and a member is never handed out twice, even to concurrent claims.
func TestClaimScript(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	pool := &Pool{Tenant: "owner", Name: "p", Template: []byte(`{}`), Capacity: Capacity{BufferMax: 10, PoolMax: 10}}
	if err := s.PutPool(ctx, pool, true); err != nil {
		t.Fatal(err)
	}
	const members = 6
	for i := range members {
		ok, err := s.AddWarm(ctx, &Sandbox{ID: fmt.Sprintf("w%d", i), Tenant: "owner", Pool: "p", State: "Running"})
		if err != nil || !ok {
			t.Fatalf("AddWarm: %v, %v", ok, err)
		}
	}
	if ok, err := s.AddWarm(ctx, &Sandbox{ID: "x", Tenant: "owner", Pool: "gone"}); err != nil || ok {
		t.Fatalf("AddWarm to a missing pool = %v, %v, want false", ok, err)
	}
	expires := time.Now().Add(time.Hour).UnixMilli()
	got, err := s.Claim(ctx, "owner", "p", "claimer", 2, ClaimPatch{"metadata": map[string]string{"k": "v"}}, time.Now().UnixMilli(), fmt.Sprint(expires))
	if err != nil || len(got) != 2 {
		t.Fatalf("Claim 2 = %d, %v", len(got), err)
	}
	for _, sb := range got {
		if sb.Metadata["k"] != "v" {
			t.Errorf("claimed %s without the patch: %+v", sb.ID, sb.Metadata)
		}
		rec, err := s.GetSandbox(ctx, sb.ID)
		if err != nil || rec.Metadata["k"] != "v" {
			t.Errorf("record of %s = %+v, %v", sb.ID, rec, err)
		}
	}
	if n, _ := s.CountSandboxes(ctx, "claimer"); n != 2 {
		t.Errorf("claimer holds %d, want 2", n)
	}
	expired, _ := s.ExpiredSandboxes(ctx, time.UnixMilli(expires+1), 10)
	if len(expired) != 2 {
		t.Errorf("expiry schedule holds %v, want the 2 claimed", expired)
	}
	// Concurrent claims share the 4 left without overlap; the fifth claimer gets none.
	results := make(chan []*Sandbox, 5)
	for range 5 {
		go func() {
			r, err := s.Claim(ctx, "owner", "p", "claimer", 1, ClaimPatch{}, time.Now().UnixMilli(), "")
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	seen := map[string]bool{}
	for _, sb := range got {
		seen[sb.ID] = true
	}
	for range 5 {
		for _, sb := range <-results {
			if seen[sb.ID] {
				t.Errorf("member %s handed out twice", sb.ID)
			}
			seen[sb.ID] = true
		}
	}
	if len(seen) != members {
		t.Errorf("claimed %d members, want all %d", len(seen), members)
	}
	if left, _ := s.ReadyMembers(ctx, "owner", "p"); len(left) != 0 {
		t.Errorf("ready after claiming all: %v", left)
	}
	alloc, _ := s.AllocatedMembers(ctx, "owner", "p")
	if len(alloc) != members {
		t.Errorf("allocated %v, want %d", alloc, members)
	}
}

// TestRemoveWarmLosesToClaim: a member being claimed is not also removed.
func TestRemoveWarmLosesToClaim(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.PutPool(ctx, &Pool{Tenant: "o", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddWarm(ctx, &Sandbox{ID: "m", Tenant: "o", Pool: "p"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Claim(ctx, "o", "p", "c", 1, ClaimPatch{}, 0, ""); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if ok, err := s.RemoveWarm(ctx, "o", "p", "m"); err != nil || ok {
		t.Fatalf("RemoveWarm of a claimed member = %v, %v, want false", ok, err)
	}
	if _, err := s.GetSandbox(ctx, "m"); err != nil {
		t.Fatalf("the claimed record is gone: %v", err)
	}
}

// TestLeaseScripts: one owner at a time; only the owner extends or releases it.
func TestLeaseScripts(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	take := func(owner string) bool {
		ok, err := s.AcquireLease(ctx, "job", owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take("a") || take("b") || !take("a") {
		t.Fatal("a takes, b is refused, a extends")
	}
	if err := s.ReleaseLease(ctx, "job", "b"); err != nil {
		t.Fatal(err)
	}
	if take("b") {
		t.Fatal("b released a's lease")
	}
	if err := s.ReleaseLease(ctx, "job", "a"); err != nil {
		t.Fatal(err)
	}
	if !take("b") {
		t.Fatal("b could not take the released lease")
	}
	// A lease whose owner stops extending it lapses (Redis expires it: no clock of ours).
	if ok, _ := s.AcquireLease(ctx, "short", "a", 50*time.Millisecond); !ok {
		t.Fatal("take short")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !take2(t, s, "short", "b") {
		if time.Now().After(deadline) {
			t.Fatal("the lapsed lease never came free")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func take2(t *testing.T, s *Store, name, owner string) bool {
	ok, err := s.AcquireLease(context.Background(), name, owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestTokenBucket: the create bucket starts full, refuses past its burst, refills at its
// rate with the time it is given, never beyond the burst.
func TestTokenBucket(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	t0 := time.Now()
	take := func(n int, at time.Time) (bool, float64) {
		ok, left, err := s.TakeTokens(ctx, "b", 2, 5, n, at)
		if err != nil {
			t.Fatal(err)
		}
		return ok, left
	}
	if ok, left := take(3, t0); !ok || left != 2 {
		t.Fatalf("take 3 of 5 = %v, %v left", ok, left)
	}
	if ok, left := take(3, t0); ok || left != 2 {
		t.Fatalf("take 3 of 2 = %v, %v left, want refused with 2 left", ok, left)
	}
	if ok, left := take(3, t0.Add(500*time.Millisecond)); !ok || left != 0 {
		t.Fatalf("after 0.5 s at 2/s: %v, %v left, want 3 taken and 0 left", ok, left)
	}
	if ok, left := take(0, t0.Add(time.Hour)); !ok || left != 5 {
		t.Fatalf("after an hour: %v, %v left, want the burst of 5", ok, left)
	}
	if ok, _ := take(6, t0.Add(time.Hour)); ok {
		t.Fatal("took more than the burst")
	}
}

// TestBatchMemberScripts: a queued member is settled only by the gateway holding it, and
// taken over only from the one holding it, counting takeovers.
func TestBatchMemberScripts(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	b := &Batch{ID: "b1", Tenant: "t", Count: 3, Members: []string{"m1", "m2", "m3"}, CreatedAt: time.Now()}
	if err := s.PutBatchWork(ctx, b, []byte(`{"w":1}`), "g1", b.Members); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.OpenBatches(ctx); !slices.Contains(open, "b1") {
		t.Fatalf("open batches %v", open)
	}
	if w, err := s.BatchWork(ctx, "b1"); err != nil || string(w) != `{"w":1}` {
		t.Fatalf("work = %s, %v", w, err)
	}
	if ok, _ := s.FinishMember(ctx, "b1", "m1", "g2"); ok {
		t.Fatal("g2 finished g1's member")
	}
	if ok, _ := s.FinishMember(ctx, "b1", "m1", "g1"); !ok {
		t.Fatal("g1 could not finish its member")
	}
	if n, _ := s.TakeMember(ctx, "b1", "m2", "g1", "g2"); n != 1 {
		t.Fatalf("first takeover counted %d", n)
	}
	if n, _ := s.TakeMember(ctx, "b1", "m2", "g1", "g3"); n != 0 {
		t.Fatalf("a second taker from g1 got %d, want 0 (g2 holds it)", n)
	}
	if ok, _ := s.FailMember(ctx, "b1", "m2", "g1", MemberError{Code: "X", Message: "late"}); ok {
		t.Fatal("g1 failed a member it no longer holds")
	}
	if ok, _ := s.FailMember(ctx, "b1", "m2", "g2", MemberError{Code: "SANDBOX::X", Message: "boom"}); !ok {
		t.Fatal("g2 could not fail its member")
	}
	got, errs, err := s.GetBatch(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Queued) != 1 || got.Queued["m3"] != "g1" {
		t.Errorf("queued = %v, want m3 by g1", got.Queued)
	}
	if errs["m2"].Code != "SANDBOX::X" || len(errs) != 1 {
		t.Errorf("errors = %v", errs)
	}
	if err := s.DeleteBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetBatch(ctx, "b1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted batch: %v", err)
	}
}

// TestClaimPreparedRecords: a claim of members this process added writes the records it
// prepared (warmCache) instead of patching them in the script; what it writes and
// returns is the record the script's own patch makes, and a member written since it
// was added (its rev moved on) is patched by the script from what it holds now.
func TestClaimPreparedRecords(t *testing.T) {
	const claimN = 8
	s := openTestStore(t)
	ctx := context.Background()
	s.SetMeter(func(*Sandbox) (int64, int64) { return 50, 64 << 20 })
	if err := s.PutPool(ctx, &Pool{Tenant: "o", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var ids []string
	for i := range 2 * claimN {
		ids = append(ids, fmt.Sprintf("m%d", i))
	}
	for _, id := range ids {
		sb := &Sandbox{ID: id, Tenant: "o", Image: "sandgate/base:0.1.0", Entrypoint: []string{"sleep", "infinity"},
			Metadata: map[string]string{"sandgate.io/pool": "p"}, ResourceLimits: map[string]string{"cpu": "50m"},
			State: "Running", CreatedAt: now, LastTransitionAt: now, Address: "10.0.0.1", AgentToken: "tok", Pool: "p",
			EgressPolicy: []byte(`{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}`), PoolVersion: 3}
		if ok, err := s.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm %s: %v, %v", id, ok, err)
		}
	}
	// m1 changes after it was added: the prepared body would be stale.
	m1, err := s.GetSandbox(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	m1.Address = "10.0.0.99"
	if err := s.UpdateSandbox(ctx, m1); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	exp := at.Add(time.Hour)
	patch := ClaimPatch{"tenant": "o", "metadata": map[string]string{"sandgate.io/pool": "p", "team": "a"}, "createdAt": at,
		"lastTransitionAt": at, "state": "Running", "extensions": map[string]string(nil), "batch": "b1", "expiresAt": exp,
		"lateBind": &LateBind{Env: map[string]string{"K": "v"}}}
	claim := func() []*Sandbox {
		got, err := s.Claim(ctx, "o", "p", "o", claimN, patch, at.UnixMilli(), fmt.Sprint(exp.UnixMilli()))
		if err != nil || len(got) != claimN {
			t.Fatalf("Claim %d = %d, %v", claimN, len(got), err)
		}
		return got
	}
	prepared := claim() // prepared here but for m1, patched by the script
	for _, sb := range prepared {
		// What was written is the prepared body, spliced in Go, not cjson's encoding
		// (which writes the pool label's "/" as "\/").
		body, err := s.rdb.HGet(ctx, s.sandboxKey("o", sb.ID), "json").Result()
		if err != nil {
			t.Fatal(err)
		}
		if prep := strings.Contains(body, `"sandgate.io/pool"`); prep != (sb.ID != "m1") {
			t.Errorf("%s: stored %s; prepared: %v, want %v", sb.ID, body, prep, sb.ID != "m1")
		}
	}
	s.warm.take(ids)   // as on a gateway that did not add them
	patched := claim() // patched by the script

	// Records compared as JSON values: the script's cjson re-encodes what it patches.
	canon := func(sb *Sandbox) map[string]any {
		body, err := json.Marshal(sb)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "id")
		return m
	}
	want := canon(patched[0])
	for _, sb := range append(prepared, patched...) {
		rec, err := s.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(canon(rec), canon(sb)); diff != "" {
			t.Errorf("%s: returned record differs from the stored one (-stored +returned):\n%s", sb.ID, diff)
		}
		w := want
		if sb.ID == "m1" {
			if sb.Address != "10.0.0.99" || sb.Rev != 3 {
				t.Errorf("m1 claimed from a stale body: address %s, rev %d", sb.Address, sb.Rev)
			}
			w = canon(patched[0])
			w["address"], w["rev"] = "10.0.0.99", float64(3)
		}
		if diff := cmp.Diff(w, canon(rec)); diff != "" {
			t.Errorf("%s: claimed record differs from the script's patch (-script +got):\n%s", sb.ID, diff)
		}
	}
	all := int64(len(ids))
	if u, err := s.TenantUsage(ctx, "o"); err != nil || u != (Usage{Sandboxes: all, CPUMillis: 50 * all, MemoryBytes: all * 64 << 20}) {
		t.Errorf("usage after claiming %d = %+v, %v", all, u, err)
	}
	if expired, _ := s.ExpiredSandboxes(ctx, exp.Add(time.Second), 100); len(expired) != len(ids) {
		t.Errorf("expiry schedule holds %v, want the %d claimed", expired, all)
	}
	if alloc, _ := s.AllocatedMembers(ctx, "o", "p"); len(alloc) != len(ids) {
		t.Errorf("allocated %v, want %d", alloc, all)
	}
}

// TestClaimedBody: a prepared body spliced from a warm record's parts and a claim's
// patch decodes to the same record as the claimed Sandbox's own encoding, whichever of
// the claim's fields the patch holds or leaves to the record.
func TestClaimedBody(t *testing.T) {
	now := time.Now().UTC()
	later := now.Add(time.Minute)
	exp := later.Add(time.Hour)
	warm := []*Sandbox{
		{ID: "w1", Tenant: "o", Image: "img", Entrypoint: []string{"sleep", "infinity"}, Metadata: map[string]string{"sandgate.io/pool": "p"},
			ResourceLimits: map[string]string{"cpu": "50m"}, State: "Running", CreatedAt: now, LastTransitionAt: now, Address: "10.0.0.1",
			AgentToken: "a<&>", Pool: "p", PoolVersion: 2, EgressPolicy: []byte(`{"defaultAction":"deny"}`), Rev: 1},
		{ID: "w2", Tenant: "o", State: "Running", CreatedAt: now, LastTransitionAt: now, Extensions: map[string]string{"x": "1"},
			Batch: "old", ExpiresAt: &now, LateBind: &LateBind{Entrypoint: true}, Rev: 4},
		{ID: "w3", Rev: 1},
	}
	patches := map[string]ClaimPatch{
		"empty": {},
		"batch": {"tenant": "o", "metadata": map[string]string{"sandgate.io/pool": "p", "team": "a"}, "createdAt": later,
			"lastTransitionAt": later, "state": "Running", "extensions": map[string]string(nil), "batch": "b1", "expiresAt": exp},
		"late-bind": {"tenant": "o", "metadata": map[string]string{}, "createdAt": later, "lastTransitionAt": later, "state": "Running",
			"extensions": map[string]string{"k": "v"}, "entrypoint": []string{"python", "-m", "http.server"},
			"lateBind": &LateBind{Env: map[string]string{"K": `"v"`}, Entrypoint: true, NetworkPolicy: `{"a":1}`}},
		"nil-entrypoint": {"entrypoint": []string(nil), "lateBind": (*LateBind)(nil)},
	}
	for name, patch := range patches {
		claimed, ok := patch.claimJSON()
		if !ok {
			t.Fatalf("%s: claimJSON refused the patch", name)
		}
		for _, w := range warm {
			body, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			e, err := newWarmEntry(w, body)
			if err != nil {
				t.Fatal(err)
			}
			want := *w
			if !patch.applyTo(&want) {
				t.Fatalf("%s: applyTo refused the patch", name)
			}
			want.Rev = w.Rev + 1
			wantBody, _ := json.Marshal(&want)
			var fromStruct, fromSplice Sandbox
			if err := json.Unmarshal(wantBody, &fromStruct); err != nil {
				t.Fatal(err)
			}
			spliced := e.claimedBody(patch, claimed, want.Rev)
			if err := json.Unmarshal(spliced, &fromSplice); err != nil {
				t.Fatalf("%s/%s: spliced body %s: %v", name, w.ID, spliced, err)
			}
			if diff := cmp.Diff(fromStruct, fromSplice); diff != "" {
				t.Errorf("%s/%s: spliced record differs (-encoded +spliced):\n%s\nspliced: %s", name, w.ID, diff, spliced)
			}
			// No member twice: a decoder keeping the first of two would read another record.
			if dup := duplicateMember(t, spliced); dup != "" {
				t.Errorf("%s/%s: member %q twice in %s", name, w.ID, dup, spliced)
			}
		}
	}
	if _, ok := (ClaimPatch{"address": "10.0.0.2"}).claimJSON(); ok {
		t.Error("claimJSON took a field a claim does not write")
	}
}

// duplicateMember returns a name the JSON object body holds twice, or "".
func duplicateMember(t *testing.T, body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		name := tok.(string)
		if seen[name] {
			return name
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return ""
}

// TestAppendPerSandbox: the events AppendPerSandbox splices read back as the same events
// one by one would (AppendEvents), each with its own sandbox.
func TestAppendPerSandbox(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	at := time.Now().UTC()
	ev := Event{Type: "sandbox.created", Tenant: "e", Time: at, Data: map[string]any{"image": "img", "source": "pool", "note": `a "quoted" <b>`}}
	ids := []string{"s1", "s2", `odd"id`}
	if err := s.AppendPerSandbox(ctx, ev, ids); err != nil {
		t.Fatal(err)
	}
	var one []Event
	for _, id := range ids {
		e := ev
		e.SandboxID = id
		one = append(one, e)
	}
	if err := s.AppendEvents(ctx, one); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadEvents(ctx, "e", "", 10)
	if err != nil || len(got) != 2*len(ids) {
		t.Fatalf("read %d events, %v; want %d", len(got), err, 2*len(ids))
	}
	for i := range ids {
		spliced, single := got[i], got[len(ids)+i]
		spliced.ID, single.ID = "", ""
		if diff := cmp.Diff(single, spliced); diff != "" {
			t.Errorf("event of %s (-one by one +spliced):\n%s", ids[i], diff)
		}
		if spliced.SandboxID != ids[i] {
			t.Errorf("event %d names sandbox %q, want %q", i, spliced.SandboxID, ids[i])
		}
	}
}

// TestClaimPreparesWithOthersAdding: a claim prepares the members this process added
// without asking Redis for the pool's head; when another gateway's members come first
// there, the script patches those, and the members prepared but not popped are
// prepared again by the next claim (their bodies, spliced in Go, are what is stored).
func TestClaimPreparesWithOthersAdding(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	// Another gateway: the same Redis, caches of its own.
	other := &Store{rdb: s.rdb, probe: s.probe, prefix: s.prefix, cluster: s.cluster, log: s.log}
	if err := s.PutPool(ctx, &Pool{Tenant: "o", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	add := func(st *Store, id string) {
		sb := &Sandbox{ID: id, Tenant: "o", State: "Running", CreatedAt: now, LastTransitionAt: now, Pool: "p",
			Metadata: map[string]string{"sandgate.io/pool": "p"}}
		if ok, err := st.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm %s: %v, %v", id, ok, err)
		}
	}
	add(other, "x") // the head of the ready list, unknown to s
	add(s, "a")
	add(s, "b")
	prepared := func(id string) bool {
		body, err := s.rdb.HGet(ctx, s.sandboxKey("o", id), "json").Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(body, `"sandgate.io/pool"`) // cjson would write "sandgate.io\/pool"
	}
	patch := ClaimPatch{"tenant": "o", "state": "Running", "metadata": map[string]string{"sandgate.io/pool": "p", "team": "a"}}
	_ = s.rdb.ConfigResetStat(ctx).Err()
	got, err := s.Claim(ctx, "o", "p", "o", 2, patch, now.UnixMilli(), "")
	if err != nil || len(got) != 2 || got[0].ID != "x" || got[1].ID != "a" {
		t.Fatalf("claim of 2: %v, %v; want x and a", got, err)
	}
	if prepared("x") || !prepared("a") {
		t.Errorf("x prepared: %v (want false: another gateway added it), a prepared: %v (want true)", prepared("x"), prepared("a"))
	}
	if info, _ := s.rdb.Info(ctx, "commandstats").Result(); strings.Contains(info, "cmdstat_lrange:") {
		t.Error("the claim asked Redis for the pool's head")
	}
	got, err = s.Claim(ctx, "o", "p", "o", 1, patch, now.UnixMilli(), "")
	if err != nil || len(got) != 1 || got[0].ID != "b" || got[0].Metadata["team"] != "a" {
		t.Fatalf("claim of 1: %v, %v; want b", got, err)
	}
	if !prepared("b") {
		t.Error("b, prepared by the first claim and not popped, was not prepared again")
	}
}

// TestAppendEventsReadsBack: a batch of events of several tenants and types, typed
// access data among them, reads back as the events written one by one (AppendEvent)
// with Data; an event that cannot be encoded is skipped, not the batch.
func TestAppendEventsReadsBack(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	at := time.Now().UTC()
	access := &AccessData{Port: 8000, Method: "GET", Path: "/a?b=<c>", Status: 200, Bytes: 512, DurationMs: 1.25, Credential: "cookie"}
	batch := []Event{
		{Type: "preview.accessed", Tenant: "e1", SandboxID: "s1", Time: at, Access: access},
		{Type: "command.started", Tenant: "e2", SandboxID: "s2", Time: at, Data: map[string]any{"command": `echo "hi"`}},
		{Type: "x", Tenant: "e1", Time: at, Data: map[string]any{"bad": make(chan int)}},
		{Type: "preview.accessed", Tenant: "e1", SandboxID: "s3", Time: at, Access: &AccessData{Method: "HEAD", Path: "/", Status: 204}},
		{Type: "sandbox.deleted", Tenant: "e2", SandboxID: "s2", Time: at},
	}
	if err := s.AppendEvents(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []Event{batch[0], batch[1], batch[3], batch[4]} {
		one := ev.withData()
		one.Tenant = "one-" + ev.Tenant
		if _, err := s.AppendEvent(ctx, one); err != nil {
			t.Fatal(err)
		}
	}
	for _, tenant := range []string{"e1", "e2"} {
		got, err := s.ReadEvents(ctx, tenant, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.ReadEvents(ctx, "one-"+tenant, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			want[i].ID, want[i].Tenant = "", tenant
		}
		for i := range got {
			got[i].ID = ""
		}
		if diff := cmp.Diff(want, got); diff != "" || len(got) != 2 {
			t.Errorf("tenant %s: %d events (-one by one +batch):\n%s", tenant, len(got), diff)
		}
	}
}
