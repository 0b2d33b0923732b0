package store

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/test/testenv"
)

// testCluster is the Redis Cluster openTestStore opens stores on, while
// TestStoreOnRedisCluster runs (the store tests are not parallel).
var testCluster *testenv.RedisCluster

// TestStoreOnRedisCluster runs the store's tests — every script (create with its quota,
// claim from one's own pool and across tenants, delete, expiry, warm members, batches,
// leases, token bucket, usage counters and their repair, sessions and keys) — on a
// Redis Cluster of three real primaries, where a script or MULTI whose keys span two
// slots fails with CROSSSLOT, and a script's key on another node with a redirect error.
func TestStoreOnRedisCluster(t *testing.T) {
	c, err := testenv.StartRedisCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	// The cluster refuses what the store must never do, so the tests below can fail.
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{strings.TrimPrefix(strings.SplitN(c.URL, "?", 2)[0], "redis://")}})
	defer raw.Close()
	ctx := context.Background()
	err = raw.Eval(ctx, `redis.call('SET', KEYS[1], 1) redis.call('SET', KEYS[2], 1) return 1`, []string{"{t:a}:x", "{t:b}:x"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script over two slots: %v, want CROSSSLOT", err)
	}
	err = raw.Eval(ctx, `redis.call('SET', KEYS[1], 1) redis.call('SET', ARGV[1], 1) return 1`, []string{"{t:a}:x"}, "{t:b}:x").Err()
	if err == nil {
		t.Fatal("a script reaching an undeclared key of another slot succeeded")
	}
	t.Logf("undeclared key of another slot: %v", err)

	testCluster = c
	t.Cleanup(func() { testCluster = nil })
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"CreateSandboxQuota", TestCreateSandboxQuota},
		{"ClaimScript", TestClaimScript},
		{"ClaimOwnPool", TestClaimOwnPool},
		{"ClaimAcrossRepaired", TestClaimAcrossRepaired},
		{"RemoveWarmLosesToClaim", TestRemoveWarmLosesToClaim},
		{"ClaimPreparedRecords", TestClaimPreparedRecords},
		{"AppendPerSandbox", TestAppendPerSandbox},
		{"LeaseScripts", TestLeaseScripts},
		{"TokenBucket", TestTokenBucket},
		{"BatchMemberScripts", TestBatchMemberScripts},
		{"BatchWork", TestBatchWork},
		{"UsageCounters", TestUsageCounters},
		{"Sessions", TestSessions},
		{"PolicyOverridesAndReloadNotice", TestPolicyOverridesAndReloadNotice},
		{"SandboxWritesAnnounced", TestSandboxWritesAnnounced},
		{"EventReads", TestEventReads},
		{"Heartbeat", TestHeartbeat},
		{"PublishStarting", TestPublishStarting},
		{"ListAcrossTenants", TestListAcrossTenants},
		{"StoreLoss", TestStoreLoss},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// infoOf returns an INFO section of the server that holds key (on a cluster, its node).
func infoOf(ctx context.Context, s *Store, key, section string) string {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return ""
		}
		return node.Info(ctx, section).Val()
	}
	return s.rdb.Info(ctx, section).Val()
}

// TestClusterPrimaryLost: once a primary of the cluster is gone and the cluster says so
// (CLUSTERDOWN from the surviving nodes), the store answers ErrUnavailable (503), as
// for an unreachable Redis, not an internal error.
func TestClusterPrimaryLost(t *testing.T) {
	c, err := testenv.StartRedisCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	testCluster = c
	s := openTestStore(t)
	testCluster = nil
	ctx := context.Background()
	cc := s.rdb.(*redis.ClusterClient)
	// Two tenants whose slots are on different primaries.
	nodeOf := func(tenant string) string {
		n, err := cc.MasterForKey(ctx, s.tenantIndex(tenant))
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	lost, alive := "", ""
	for i := 0; alive == "" && i < 100; i++ {
		tn := fmt.Sprintf("t%d", i)
		if lost == "" {
			lost = tn
		} else if nodeOf(tn) != nodeOf(lost) {
			alive = tn
		}
	}
	_, portText, _ := strings.Cut(nodeOf(lost), ":")
	port, _ := strconv.Atoi(portText)
	c.StopNode(port)
	_, aliveAddr, _ := strings.Cut(nodeOf(alive), ":")
	testenv.WaitFor(t, 30*time.Second, func() bool {
		out, _ := exec.Command("redis-cli", "-p", aliveAddr, "cluster", "info").Output()
		return strings.Contains(string(out), "cluster_state:fail")
	}, "the surviving nodes to see the cluster down")
	_, err = s.TenantUsage(ctx, alive)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("usage read on a cluster that is down: %v, want ErrUnavailable", err)
	}
	t.Logf("the store answered: %v", err)
}
