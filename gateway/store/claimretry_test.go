package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClaimSurvivesSlowRedis: a claim whose answer comes after the client's read deadline
// (Redis busy past CommandTimeout) is sent again by the client; the second run answers
// the members the first one bound instead of binding more, so none is bound and lost.
func TestClaimSurvivesSlowRedis(t *testing.T) {
	s := openTestStore(t)
	rc, ok := s.rdb.(*redis.Client)
	if !ok {
		t.Skip("needs one redis-server to keep busy")
	}
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
	other := redis.NewClient(&redis.Options{Addr: rc.Options().Addr, ReadTimeout: -1})
	defer other.Close()
	busy := make(chan error, 1)
	go func() {
		// Redis runs nothing else for 1.5 CommandTimeouts.
		busy <- other.Eval(ctx, `local s = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break end
end`, nil, (CommandTimeout * 3 / 2).Microseconds()).Err()
	}()
	time.Sleep(50 * time.Millisecond)
	got, err := s.Claim(ctx, "o", "p", "o", 4, ClaimPatch{"state": "Running"}, now.UnixMilli(), "")
	if err := <-busy; err != nil && err != redis.Nil {
		t.Fatalf("busy script: %v", err)
	}
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	info, _ := s.rdb.Info(ctx, "commandstats").Result()
	if !strings.Contains(info, "cmdstat_lpop:calls=2,") {
		t.Fatalf("the claim script did not pop once (first claim and this one):\n%s", info)
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
