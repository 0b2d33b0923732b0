package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// removeSnapshotImagesOfTenant removes, at the end of the test, the snapshot images
// sandgate made for tenant (after the env's containers, which may use them).
func removeSnapshotImagesOfTenant(t testing.TB, e *env, tenant string) {
	t.Cleanup(func() {
		e.removeDockerObjects()
		for _, ref := range snapshotImagesOfTenant(t, tenant) {
			_ = exec.Command("docker", "image", "rm", "-f", ref).Run()
		}
	})
}

func snapshotImagesOfTenant(t testing.TB, tenant string) []string {
	out, err := exec.Command("docker", "image", "ls", "--filter", "label=sandgate.io/tenant="+tenant,
		"--filter", "label=sandgate.io/snapshot", "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		t.Errorf("docker image ls: %v", err)
	}
	return strings.Fields(string(out))
}

// snapshotOf snapshots a sandbox and waits until the snapshot is Ready.
func (g *gateway) snapshotOf(id string) string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sdkClient(g.t, g, g.APIKey)
	s, err := c.CreateSnapshot(ctx, id, "s")
	if err != nil || s.Status.State != sandgate.SnapshotCreating {
		g.t.Fatalf("snapshot = %+v, %v; want it answered Creating", s, err)
	}
	if _, err := c.WaitSnapshot(ctx, s.ID); err != nil {
		g.t.Fatalf("the snapshot did not become Ready: %v", err)
	}
	return s.ID
}

// accessToken is the agent access token the gateway hands out for sandbox id.
func accessToken(t testing.TB, ctx context.Context, c *sandgate.Client, id string) string {
	t.Helper()
	ep, err := c.GetEndpoint(ctx, id, 44772)
	if err != nil {
		t.Fatalf("endpoint of %s: %v", id, err)
	}
	return ep.Headers["X-EXECD-ACCESS-TOKEN"]
}

// TestSnapshots: a snapshot of a sandbox with a file written keeps the file for a new
// sandbox made from it (by snapshotId, the source's entrypoint and env coming along),
// the source keeps running, the snapshot is listed and filtered, outlives its source,
// counts against a quota, is invisible to another tenant (by id and by its image's
// name) and goes with DELETE once nothing uses it.
func TestSnapshots(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta := admin.createTenant("snap-a-"+randomHex(3), map[string]any{"maxSnapshots": 2})
	tb := admin.createTenant("snap-b-"+randomHex(3), nil)
	removeSnapshotImagesOfTenant(t, e, ta)
	removeSnapshotImagesOfTenant(t, e, tb)
	_, ak := admin.issueKey(ta, "member")
	_, bk := admin.issueKey(tb, "member")
	a := admin.asKey(ak)
	ca, cb := sdkClient(t, admin, ak), sdkClient(t, admin, bk)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	src := sdkCreate(t, ctx, ca, sandgate.CreateRequest{Env: map[string]string{"FROM_SOURCE": "yes"}, Entrypoint: []string{"sleep", "infinity"}}).ID
	sdkExec(t, ctx, ca, src, "mkdir -p /srv/state && echo kept-in-snapshot > /srv/state/f")
	snap := a.snapshotOf(src)
	if out := sdkExec(t, ctx, ca, src, "echo still-running"); out != "still-running" {
		t.Fatalf("the source does not answer after its snapshot: %q", out)
	}

	cp, err := ca.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap})
	if err != nil {
		t.Fatalf("create from snapshot: %v", err)
	}
	if len(cp.Entrypoint) != 2 || cp.Entrypoint[0] != "sleep" {
		t.Fatalf("entrypoint of the copy = %v, want the source's", cp.Entrypoint)
	}
	if out := sdkExec(t, ctx, ca, cp.ID, "cat /srv/state/f; echo $FROM_SOURCE"); out != "kept-in-snapshot\nyes" {
		t.Fatalf("the copy sees %q, want the file and the env of the source", out)
	}
	if got, err := ca.GetSandbox(ctx, cp.ID); err != nil || got.SnapshotID != snap {
		t.Fatalf("GET of the copy: %+v, %v; want snapshotId %s", got, err, snap)
	}
	if got, err := ca.GetSandbox(ctx, src); err != nil || got.SnapshotID != "" {
		t.Fatalf("GET of the source: %+v, %v; want no snapshotId", got, err)
	}
	// The container says it too, so that a gateway adopting the copy keeps it.
	if got := dockerInspect(t, `{{index .Config.Labels "sandgate.io/from-snapshot"}}`, "sandgate-"+cp.ID); got != snap {
		t.Fatalf("the copy's container names snapshot %q, want %s", got, snap)
	}
	if accessToken(t, ctx, ca, cp.ID) == accessToken(t, ctx, ca, src) {
		t.Fatal("the copy shares the source's access token")
	}

	t.Run("list and filters", func(t *testing.T) {
		for _, q := range []sandgate.SnapshotListOptions{{}, {SandboxID: src}, {States: []string{"Ready"}}, {States: []string{"ready"}, SandboxID: src}} {
			if page, err := ca.ListSnapshots(ctx, q); err != nil || len(page.Items) != 1 || page.Items[0].ID != snap {
				t.Fatalf("list %+v: %+v, %v", q, page, err)
			}
		}
		for _, q := range []sandgate.SnapshotListOptions{{States: []string{"Failed"}}, {SandboxID: cp.ID}} {
			if page, err := ca.ListSnapshots(ctx, q); err != nil || len(page.Items) != 0 {
				t.Fatalf("list %+v: %+v, %v", q, page, err)
			}
		}
		expectError(t, a.do("GET", "/v1/snapshots?pageSize=0", nil), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("another tenant cannot see or use it", func(t *testing.T) {
		expectSDKError(t, errOf(cb.GetSnapshot(ctx, snap)), 404, "SNAPSHOT::NOT_FOUND")
		expectSDKError(t, cb.DeleteSnapshot(ctx, snap), 404, "SNAPSHOT::NOT_FOUND")
		if page, err := cb.ListSnapshots(ctx, sandgate.SnapshotListOptions{}); err != nil || len(page.Items) != 0 {
			t.Fatalf("tenant B lists %+v, %v", page, err)
		}
		expectSDKError(t, errOf(cb.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap})), 404, "SNAPSHOT::NOT_FOUND")
		refs := snapshotImagesOfTenant(t, ta)
		if len(refs) != 1 {
			t.Fatalf("tenant A's snapshot images: %v", refs)
		}
		before := len(e.containers())
		for _, uri := range []string{refs[0], "docker.io/" + refs[0], "index.docker.io/" + refs[0]} {
			steal := sandgate.CreateRequest{Image: &sandgate.Image{URI: uri}, Entrypoint: []string{"sleep", "infinity"}}
			expectSDKError(t, errOf(cb.CreateSandbox(ctx, steal)), 404, "SNAPSHOT::NOT_FOUND")
			expectSDKError(t, errOf(cb.CreatePool(ctx, sandgate.PoolRequest{Name: "steal", Template: steal, CapacitySpec: sandgate.Capacity{BufferMin: 1, BufferMax: 1, PoolMin: 1, PoolMax: 1}})), 404, "SNAPSHOT::NOT_FOUND")
		}
		expectSDKError(t, errOf(cb.CreateSnapshot(ctx, src, "")), 404, "SANDBOX::NOT_FOUND")
		if n := len(e.containers()); n != before {
			t.Fatalf("containers %d → %d", before, n)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		expectSDKError(t, errOf(ca.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: snap, Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"sleep", "1"}})), 400, "SANDBOX::INVALID_PARAMETER")
		expectSDKError(t, errOf(ca.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: "not-a-snapshot"})), 404, "SNAPSHOT::NOT_FOUND")
		expectSDKError(t, errOf(ca.CreateSnapshot(ctx, "00000000-0000-0000-0000-000000000000", "")), 404, "SANDBOX::NOT_FOUND")
		expectError(t, a.do("POST", "/v1/sandboxes/"+src+"/snapshots", []byte(`{"name":`)), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("a pool template may name a snapshot", func(t *testing.T) {
		if _, err := ca.CreatePool(ctx, sandgate.PoolRequest{Name: "from-snap", Template: sandgate.CreateRequest{SnapshotID: snap},
			CapacitySpec: sandgate.Capacity{BufferMin: 1, BufferMax: 1, PoolMin: 1, PoolMax: 1}}); err != nil {
			t.Fatalf("pool: %v", err)
		}
		var claimed *sandgate.Sandbox
		waitFor(t, 2*time.Minute, func() bool {
			claimed, err = ca.CreateSandbox(ctx, sandgate.CreateRequest{Extensions: map[string]string{"poolRef": "from-snap"}})
			return err == nil
		}, "a claim from the snapshot's pool")
		if out := sdkExec(t, ctx, ca, claimed.ID, "cat /srv/state/f"); out != "kept-in-snapshot" {
			t.Fatalf("pool member sees %q", out)
		}
		if err := ca.DeletePool(ctx, "from-snap"); err != nil {
			t.Fatalf("delete pool: %v", err)
		}
		if err := ca.DeleteSandbox(ctx, claimed.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})

	t.Run("quota", func(t *testing.T) {
		second := a.snapshotOf(cp.ID)
		expectSDKError(t, errOf(ca.CreateSnapshot(ctx, src, "")), 429, "QUOTA::SNAPSHOTS")
		if err := ca.DeleteSnapshot(ctx, second); err != nil {
			t.Fatalf("delete unused snapshot: %v", err)
		}
	})

	t.Run("outlives its source, deleted once unused", func(t *testing.T) {
		if err := ca.DeleteSandbox(ctx, src); err != nil {
			t.Fatalf("delete source: %v", err)
		}
		if s, err := ca.GetSnapshot(ctx, snap); err != nil || s.Status.State != sandgate.SnapshotReady {
			t.Fatalf("snapshot after its source went: %+v, %v", s, err)
		}
		expectSDKError(t, ca.DeleteSnapshot(ctx, snap), 409, "SNAPSHOT::IN_USE")
		if err := ca.DeleteSandbox(ctx, cp.ID); err != nil {
			t.Fatalf("delete copy: %v", err)
		}
		waitFor(t, time.Minute, func() bool { return ca.DeleteSnapshot(ctx, snap) == nil }, "the snapshot to be deleted")
		expectSDKError(t, errOf(ca.GetSnapshot(ctx, snap)), 404, "SNAPSHOT::NOT_FOUND")
		if refs := snapshotImagesOfTenant(t, ta); len(refs) != 0 {
			t.Fatalf("images left after DELETE: %v", refs)
		}
	})
}

// TestFork: a fork of 10 gives 10 new sandboxes, each with the source's file, env and
// egress policy and its own id and token, all answering; a fork above the tenant's batch
// quota is refused and leaves neither snapshot nor container.
func TestFork(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta := admin.createTenant("fork-"+randomHex(3), map[string]any{"maxBatchSize": 10})
	removeSnapshotImagesOfTenant(t, e, ta)
	_, ak := admin.issueKey(ta, "member")
	c := sdkClient(t, admin, ak)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	policy := &sandgate.NetworkPolicy{DefaultAction: "deny", Egress: []sandgate.EgressRule{{Action: "allow", Target: "fork-test.example"}}}
	src := sdkCreate(t, ctx, c, sandgate.CreateRequest{Env: map[string]string{"FORKED_ENV": "carried"}, NetworkPolicy: policy}).ID
	sdkExec(t, ctx, c, src, "echo forked-file > /srv/f")

	t.Run("count above the batch quota leaves nothing", func(t *testing.T) {
		before := len(e.containers())
		expectSDKError(t, errOf(c.Fork(ctx, src, sandgate.ForkRequest{Count: 11})), 429, "QUOTA::BATCH_SIZE")
		expectSDKError(t, errOf(c.Fork(ctx, src, sandgate.ForkRequest{Count: 0})), 400, "SANDBOX::INVALID_PARAMETER")
		if page, err := c.ListSnapshots(ctx, sandgate.SnapshotListOptions{}); err != nil || len(page.Items) != 0 {
			t.Fatalf("a refused fork left snapshots: %+v, %v", page, err)
		}
		if n := len(e.containers()); n != before {
			t.Fatalf("containers %d → %d", before, n)
		}
	})

	batch, err := c.Fork(ctx, src, sandgate.ForkRequest{Count: 10})
	if err != nil || len(batch.Members) != 10 {
		t.Fatalf("fork answer: %+v, %v", batch, err)
	}
	if b, err := c.WaitBatch(ctx, batch.ID, nil); err != nil || b.Summary.Failed > 0 || b.Summary.Running != 10 {
		t.Fatalf("fork members: %+v, %v; want every copy running", b, err)
	}
	snaps, err := c.ListSnapshots(ctx, sandgate.SnapshotListOptions{})
	if err != nil || len(snaps.Items) != 1 {
		t.Fatalf("the fork's snapshot: %+v, %v", snaps, err)
	}
	seen := map[string]bool{src: true}
	tokens := map[string]bool{accessToken(t, ctx, c, src): true}
	for _, m := range batch.Members {
		if got, err := c.GetSandbox(ctx, m.ID); err != nil || got.SnapshotID != snaps.Items[0].ID {
			t.Fatalf("copy %s: %+v, %v; want snapshotId %s, the fork's snapshot", m.ID, got, err, snaps.Items[0].ID)
		}
		if seen[m.ID] {
			t.Fatalf("copy id %s repeats", m.ID)
		}
		seen[m.ID] = true
		if tok := accessToken(t, ctx, c, m.ID); tokens[tok] {
			t.Fatalf("copy %s shares an access token", m.ID)
		} else {
			tokens[tok] = true
		}
		if out := sdkExec(t, ctx, c, m.ID, "cat /srv/f; echo $FORKED_ENV"); out != "forked-file\ncarried" {
			t.Fatalf("copy %s sees %q", m.ID, out)
		}
	}
	w := &egressWorld{t: t, g: admin.asKey(ak)}
	got := (&egressSandbox{w: w, id: batch.Members[0].ID}).policyOf()
	if !strings.Contains(got, "fork-test.example") || !strings.Contains(got, `"deny"`) {
		t.Fatalf("a copy's egress policy is %s, want the source's", got)
	}
}

// TestSnapshotFailed: a snapshot whose commit fails ends Failed with a message, and a
// create from it (not Ready) is refused with SNAPSHOT::NOT_READY, creating nothing. The
// container is removed behind the gateway's back (reconciliation slowed down so that the
// record still says Running), then the snapshot asked for at once: the one way to make a
// commit fail on demand. The engine's report of the removal may reach the gateway first
// (the sandbox is then Failed and the snapshot refused, as it should be); the test then
// tries again with another sandbox, a few times.
func TestSnapshotFailed(t *testing.T) {
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_SYNC_INTERVAL=10m")
	c := sdkClient(t, g, g.APIKey)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var id string
	var s *sandgate.Snapshot
	for attempt := 1; s == nil; attempt++ {
		id = sdkCreate(t, ctx, c, sandgate.CreateRequest{}).ID
		if out, err := exec.Command("docker", "rm", "-f", "-v", "sandgate-"+id).CombinedOutput(); err != nil {
			t.Fatalf("docker rm: %v %s", err, out)
		}
		got, err := c.CreateSnapshot(ctx, id, "")
		if err == nil {
			s = got
			break
		}
		if attempt == 5 || !strings.Contains(err.Error(), "SANDBOX::NOT_RUNNING") {
			t.Fatalf("snapshot (attempt %d): %v", attempt, err)
		}
		t.Logf("attempt %d: the gateway learnt of the removal first: %v", attempt, err)
	}
	waitFor(t, time.Minute, func() bool {
		if got, err := c.GetSnapshot(ctx, s.ID); err == nil {
			s = got
		}
		return s.Status.State != sandgate.SnapshotCreating
	}, "the snapshot to end")
	if s.Status.State != sandgate.SnapshotFailed || s.Status.Message == "" {
		t.Fatalf("snapshot status %+v, want Failed with a message", s.Status)
	}
	before := len(e.containers())
	expectSDKError(t, errOf(c.CreateSandbox(ctx, sandgate.CreateRequest{SnapshotID: s.ID})), 409, "SNAPSHOT::NOT_READY")
	expectSDKError(t, errOf(c.Fork(ctx, id, sandgate.ForkRequest{Count: 2})), 409, "SANDBOX::NOT_RUNNING")
	if n := len(e.containers()); n != before {
		t.Fatalf("containers %d → %d", before, n)
	}
	if err := c.DeleteSnapshot(ctx, s.ID); err != nil {
		t.Fatalf("delete a failed snapshot: %v", err)
	}
	if page, err := c.ListSnapshots(ctx, sandgate.SnapshotListOptions{}); err != nil || len(page.Items) != 0 {
		t.Fatalf("snapshots left: %+v, %v", page, err)
	}
}
