package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestClaimSurvivesSlowRedis: a claim whose answer comes after the client's read deadline
// (Redis busy past CommandTimeout, a slow network: lateAnswerStandIn) is sent again by
// the client; the second run answers the members the first one bound instead of binding
// more, so none is bound and lost.
func TestClaimSurvivesSlowRedis(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if err := s.PutPool(ctx, &Pool{Tenant: "o", Name: "p", Template: []byte(`{}`)}, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range 6 {
		sb := &Sandbox{ID: fmt.Sprintf("m%d", i), Tenant: "o", State: "Running", CreatedAt: now, LastTransitionAt: now, Pool: "p"}
		if ok, err := s.AddWarm(ctx, sb); err != nil || !ok {
			t.Fatalf("AddWarm: %v, %v", ok, err)
		}
	}
	// The script is loaded (a first claim): the client sends EVALSHA, which runs.
	if got, err := s.Claim(ctx, "o", "p", "o", 1, ClaimPatch{"state": "Running"}, now.UnixMilli(), ""); err != nil || len(got) != 1 {
		t.Fatalf("first claim: %d, %v", len(got), err)
	}
	var got []*Sandbox
	err := answerLate(t, s, "evalsha", 1, func() (err error) {
		got, err = s.Claim(ctx, "o", "p", "o", 4, ClaimPatch{"state": "Running"}, now.UnixMilli(), "")
		return err
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	left, _ := s.ReadyMembers(ctx, "o", "p")
	alloc, _ := s.AllocatedMembers(ctx, "o", "p")
	if len(got) != 4 || len(left) != 1 || len(alloc) != 5 {
		t.Errorf("claimed %d, %v left in the pool, %d allocated; want 4, one left, 5", len(got), left, len(alloc))
	}
	if u, err := s.TenantUsage(ctx, "o"); err != nil || u.Sandboxes != 5 {
		t.Errorf("usage %+v, %v; want 5 sandboxes", u, err)
	}
}
