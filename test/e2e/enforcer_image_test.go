package e2e

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// tamperScript is what a root workload does to own the enforcer of its copies: it puts
// an allow-all policy where the enforcer keeps its state, and a /bin/sh that writes it
// again before running the real shell (an enforcer started through the image's shell
// would load it).
const tamperScript = `set -e
mkdir -p /var/lib/sandgate-egress
printf '%s' '{"policy":{"defaultAction":"allow","egress":[]}}' > /var/lib/sandgate-egress/policy.json
cp /bin/sh /bin/sh.real
printf '#!/bin/sh.real\nmkdir -p /var/lib/sandgate-egress\nprintf %%s '"'"'{"policy":{"defaultAction":"allow","egress":[]}}'"'"' > /var/lib/sandgate-egress/policy.json\nexec /bin/sh.real "$@"\n' > /tmp/hostile-sh
chmod 755 /tmp/hostile-sh
mv -f /tmp/hostile-sh /bin/sh
echo tampered`

// TestCopiesOfATamperedSandboxKeepTheirWalls attacks the enforcer through snapshots
// and forks: a deny-all sandbox whose root workload rewrote /bin/sh and planted an
// allow-all state file is snapshotted and forked; every copy must still enforce
// deny-all (its signed policy, and a connection to a server the test runs refused).
func TestCopiesOfATamperedSandboxKeepTheirWalls(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{"target": {"target.test"}})
	admin := w.g
	tenant := admin.createTenant("tamper-"+randomHex(3), nil)
	removeSnapshotImagesOfTenant(t, w.e, tenant)
	_, key := admin.issueKey(tenant, "member")
	w.g = admin.asKey(key)
	c := sdkClient(t, admin, key)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	denyAll := map[string]any{"defaultAction": "deny"}
	src := w.sandbox(denyAll)
	if out := src.sh("echo " + base64.StdEncoding.EncodeToString([]byte(tamperScript)) + " | base64 -d | bash"); out != "tampered" {
		t.Fatalf("tamper: %q", out)
	}
	target := w.servers["target"]
	if got := src.httpStatus(target); got != "000" {
		t.Fatalf("the deny-all source reaches the target: %s", got)
	}
	snap := w.g.snapshotOf(src.id)

	check := func(t *testing.T, id string) {
		t.Helper()
		cp := &egressSandbox{w: w, id: id, a: w.g.agent(id)}
		if got := cp.policyOf(); !strings.Contains(got, `"defaultAction":"deny"`) {
			t.Fatalf("a copy of a deny-all sandbox enforces %s", got)
		}
		if got := cp.httpStatus(target); got != "000" {
			t.Fatalf("a copy of a deny-all sandbox reaches the target: HTTP %s", got)
		}
	}
	t.Run("snapshot", func(t *testing.T) {
		cp, err := c.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap,
			NetworkPolicy: &sandgate.NetworkPolicy{DefaultAction: "deny"}})
		if err != nil {
			t.Fatalf("create from the snapshot: %v", err)
		}
		check(t, cp.ID)
	})
	t.Run("fork", func(t *testing.T) {
		batch, err := c.Fork(ctx, src.id, sandgate.ForkRequest{Count: 1})
		if err != nil || len(batch.Members) != 1 {
			t.Fatalf("fork: %+v, %v", batch, err)
		}
		if b, err := c.WaitBatch(ctx, batch.ID, nil); err != nil || b.Summary.Running != 1 {
			t.Fatalf("fork member: %+v, %v", b, err)
		}
		check(t, batch.Members[0].ID)
	})
}
