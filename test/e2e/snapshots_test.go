package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
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
	r := g.do("POST", "/v1/sandboxes/"+id+"/snapshots", map[string]any{"name": "s"})
	if r.Status != http.StatusAccepted {
		g.t.Fatalf("snapshot: %d %s", r.Status, r.Body)
	}
	m := r.JSON(g.t)
	if st := m["status"].(map[string]any)["state"]; st != "Creating" {
		g.t.Fatalf("snapshot answered in state %v, want Creating", st)
	}
	snap := m["id"].(string)
	var last string
	waitFor(g.t, 2*time.Minute, func() bool {
		r := g.do("GET", "/v1/snapshots/"+snap, nil)
		last = string(r.Body)
		st := r.JSON(g.t)["status"].(map[string]any)["state"]
		if st == "Failed" {
			g.t.Fatalf("snapshot failed: %s", r.Body)
		}
		return st == "Ready"
	}, "the snapshot to be Ready")
	_ = last
	return snap
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
	a, b := admin.asKey(ak), admin.asKey(bk)

	src := a.createSandbox(map[string]any{"env": map[string]string{"FROM_SOURCE": "yes"}, "entrypoint": []string{"sleep", "infinity"}})
	if ev := lastEvent(a.agent(src).run("mkdir -p /srv/state && echo kept-in-snapshot > /srv/state/f")); ev.Type != "execution_complete" {
		t.Fatalf("write: %+v", ev)
	}
	snap := a.snapshotOf(src)
	if out := stdoutOf(a.agent(src).run("echo still-running")); out != "still-running" {
		t.Fatalf("the source does not answer after its snapshot: %q", out)
	}

	r := a.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap})
	if r.Status != http.StatusAccepted {
		t.Fatalf("create from snapshot: %d %s", r.Status, r.Body)
	}
	copyID := r.JSON(t)["id"].(string)
	if ep := r.JSON(t)["entrypoint"].([]any); len(ep) != 2 || ep[0] != "sleep" {
		t.Fatalf("entrypoint of the copy = %v, want the source's", ep)
	}
	if out := stdoutOf(a.agent(copyID).run("cat /srv/state/f; echo $FROM_SOURCE")); out != "kept-in-snapshot\nyes" {
		t.Fatalf("the copy sees %q, want the file and the env of the source", out)
	}
	if a.agent(copyID).headers["X-EXECD-ACCESS-TOKEN"] == a.agent(src).headers["X-EXECD-ACCESS-TOKEN"] {
		t.Fatal("the copy shares the source's access token")
	}

	t.Run("list and filters", func(t *testing.T) {
		for _, q := range []string{"", "?sandboxId=" + src, "?state=Ready", "?state=ready&sandboxId=" + src} {
			if items := a.do("GET", "/v1/snapshots"+q, nil).JSON(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != snap {
				t.Fatalf("list %q: %v", q, items)
			}
		}
		for _, q := range []string{"?state=Failed", "?sandboxId=" + copyID} {
			if items := a.do("GET", "/v1/snapshots"+q, nil).JSON(t)["items"].([]any); len(items) != 0 {
				t.Fatalf("list %q: %v", q, items)
			}
		}
		expectError(t, a.do("GET", "/v1/snapshots?pageSize=0", nil), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("another tenant cannot see or use it", func(t *testing.T) {
		expectError(t, b.do("GET", "/v1/snapshots/"+snap, nil), 404, "SNAPSHOT::NOT_FOUND")
		expectError(t, b.do("DELETE", "/v1/snapshots/"+snap, nil), 404, "SNAPSHOT::NOT_FOUND")
		if items := b.do("GET", "/v1/snapshots", nil).JSON(t)["items"].([]any); len(items) != 0 {
			t.Fatalf("tenant B lists %v", items)
		}
		expectError(t, b.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap}), 404, "SNAPSHOT::NOT_FOUND")
		refs := snapshotImagesOfTenant(t, ta)
		if len(refs) != 1 {
			t.Fatalf("tenant A's snapshot images: %v", refs)
		}
		before := len(e.containers())
		for _, uri := range []string{refs[0], "docker.io/" + refs[0], "index.docker.io/" + refs[0]} {
			expectError(t, b.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": uri}, "entrypoint": []string{"sleep", "infinity"}}), 404, "SNAPSHOT::NOT_FOUND")
			r := b.do("POST", "/v1/pools", map[string]any{"name": "steal", "template": map[string]any{"image": map[string]any{"uri": uri}, "entrypoint": []string{"sleep", "infinity"}},
				"capacitySpec": map[string]any{"bufferMin": 1, "bufferMax": 1, "poolMin": 1, "poolMax": 1}})
			expectError(t, r, 404, "SNAPSHOT::NOT_FOUND")
		}
		expectError(t, b.do("POST", "/v1/sandboxes/"+src+"/snapshots", nil), 404, "SANDBOX::NOT_FOUND")
		if n := len(e.containers()); n != before {
			t.Fatalf("containers %d → %d", before, n)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		expectError(t, a.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap, "image": map[string]any{"uri": baseImage}, "entrypoint": []string{"sleep", "1"}}), 400, "SANDBOX::INVALID_PARAMETER")
		expectError(t, a.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": "not-a-snapshot"}), 404, "SNAPSHOT::NOT_FOUND")
		expectError(t, a.do("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/snapshots", nil), 404, "SANDBOX::NOT_FOUND")
		expectError(t, a.do("POST", "/v1/sandboxes/"+src+"/snapshots", []byte(`{"name":`)), 400, "SANDBOX::INVALID_PARAMETER")
	})

	t.Run("a pool template may name a snapshot", func(t *testing.T) {
		r := a.do("POST", "/v1/pools", map[string]any{"name": "from-snap", "template": map[string]any{"snapshotId": snap},
			"capacitySpec": map[string]any{"bufferMin": 1, "bufferMax": 1, "poolMin": 1, "poolMax": 1}})
		if r.Status != 201 {
			t.Fatalf("pool: %d %s", r.Status, r.Body)
		}
		var id string
		waitFor(t, 2*time.Minute, func() bool {
			r := a.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "from-snap"}})
			if r.Status == http.StatusAccepted {
				id = r.JSON(t)["id"].(string)
				return true
			}
			return false
		}, "a claim from the snapshot's pool")
		if out := stdoutOf(a.agent(id).run("cat /srv/state/f")); out != "kept-in-snapshot" {
			t.Fatalf("pool member sees %q", out)
		}
		if r := a.do("DELETE", "/v1/pools/from-snap", nil); r.Status != 204 {
			t.Fatalf("delete pool: %d %s", r.Status, r.Body)
		}
		if r := a.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
	})

	t.Run("quota", func(t *testing.T) {
		second := a.snapshotOf(copyID)
		expectError(t, a.do("POST", "/v1/sandboxes/"+src+"/snapshots", nil), 429, "QUOTA::SNAPSHOTS")
		if r := a.do("DELETE", "/v1/snapshots/"+second, nil); r.Status != 204 {
			t.Fatalf("delete unused snapshot: %d %s", r.Status, r.Body)
		}
	})

	t.Run("outlives its source, deleted once unused", func(t *testing.T) {
		if r := a.do("DELETE", "/v1/sandboxes/"+src, nil); r.Status != 204 {
			t.Fatalf("delete source: %d %s", r.Status, r.Body)
		}
		if st := a.do("GET", "/v1/snapshots/"+snap, nil).JSON(t)["status"].(map[string]any)["state"]; st != "Ready" {
			t.Fatalf("snapshot after its source went: %v", st)
		}
		expectError(t, a.do("DELETE", "/v1/snapshots/"+snap, nil), 409, "SNAPSHOT::IN_USE")
		if r := a.do("DELETE", "/v1/sandboxes/"+copyID, nil); r.Status != 204 {
			t.Fatalf("delete copy: %d %s", r.Status, r.Body)
		}
		var r response
		waitFor(t, time.Minute, func() bool {
			r = a.do("DELETE", "/v1/snapshots/"+snap, nil)
			return r.Status == 204
		}, "the snapshot to be deleted")
		expectError(t, a.do("GET", "/v1/snapshots/"+snap, nil), 404, "SNAPSHOT::NOT_FOUND")
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
	a := admin.asKey(ak)
	policy := map[string]any{"defaultAction": "deny", "egress": []map[string]any{{"action": "allow", "target": "fork-test.example"}}}
	src := a.createSandbox(map[string]any{"env": map[string]string{"FORKED_ENV": "carried"}, "networkPolicy": policy})
	if ev := lastEvent(a.agent(src).run("echo forked-file > /srv/f")); ev.Type != "execution_complete" {
		t.Fatalf("write: %+v", ev)
	}

	t.Run("count above the batch quota leaves nothing", func(t *testing.T) {
		before := len(e.containers())
		expectError(t, a.do("POST", "/v1/sandboxes/"+src+"/fork", map[string]any{"count": 11}), 429, "QUOTA::BATCH_SIZE")
		expectError(t, a.do("POST", "/v1/sandboxes/"+src+"/fork", map[string]any{"count": 0}), 400, "SANDBOX::INVALID_PARAMETER")
		if items := a.do("GET", "/v1/snapshots", nil).JSON(t)["items"].([]any); len(items) != 0 {
			t.Fatalf("a refused fork left snapshots: %v", items)
		}
		if n := len(e.containers()); n != before {
			t.Fatalf("containers %d → %d", before, n)
		}
	})

	r := a.do("POST", "/v1/sandboxes/"+src+"/fork", map[string]any{"count": 10})
	if r.Status != http.StatusAccepted {
		t.Fatalf("fork: %d %s", r.Status, r.Body)
	}
	var batch struct {
		ID      string `json:"id"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if err := json.Unmarshal(r.Body, &batch); err != nil || len(batch.Members) != 10 {
		t.Fatalf("fork answer: %v %s", err, r.Body)
	}
	waitFor(t, 5*time.Minute, func() bool {
		s := a.do("GET", "/v1/batches/"+batch.ID, nil).JSON(t)["summary"].(map[string]any)
		if s["failed"] != nil && s["failed"].(float64) > 0 {
			t.Fatalf("fork members failed: %v", s)
		}
		return s["running"].(float64) == 10
	}, "every copy to run")
	seen := map[string]bool{src: true}
	tokens := map[string]bool{a.agent(src).headers["X-EXECD-ACCESS-TOKEN"]: true}
	for _, m := range batch.Members {
		if seen[m.ID] {
			t.Fatalf("copy id %s repeats", m.ID)
		}
		seen[m.ID] = true
		ag := a.agent(m.ID)
		if tok := ag.headers["X-EXECD-ACCESS-TOKEN"]; tokens[tok] {
			t.Fatalf("copy %s shares an access token", m.ID)
		} else {
			tokens[tok] = true
		}
		if out := stdoutOf(ag.run("cat /srv/f; echo $FORKED_ENV")); out != "forked-file\ncarried" {
			t.Fatalf("copy %s sees %q", m.ID, out)
		}
	}
	w := &egressWorld{t: t, g: a}
	got := (&egressSandbox{w: w, id: batch.Members[0].ID}).policyOf()
	if !strings.Contains(got, "fork-test.example") || !strings.Contains(got, `"deny"`) {
		t.Fatalf("a copy's egress policy is %s, want the source's", got)
	}
}

// TestSnapshotFailed: a snapshot whose commit fails ends Failed with a message, and a
// create from it (not Ready) is refused with SNAPSHOT::NOT_READY, creating nothing. The
// container is removed behind the gateway's back (reconciliation slowed down so that the
// record still says Running): the one way to make a commit fail on demand.
func TestSnapshotFailed(t *testing.T) {
	e := newEnv(t, nil)
	g := e.startGateway("SANDGATE_SYNC_INTERVAL=10m")
	id := g.createSandbox(map[string]any{})
	if out, err := exec.Command("docker", "rm", "-f", "sandgate-"+id).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v %s", err, out)
	}
	r := g.do("POST", "/v1/sandboxes/"+id+"/snapshots", nil)
	if r.Status != http.StatusAccepted {
		t.Fatalf("snapshot: %d %s", r.Status, r.Body)
	}
	snap := r.JSON(t)["id"].(string)
	var st map[string]any
	waitFor(t, time.Minute, func() bool {
		st = g.do("GET", "/v1/snapshots/"+snap, nil).JSON(t)["status"].(map[string]any)
		return st["state"] != "Creating"
	}, "the snapshot to end")
	if st["state"] != "Failed" || st["message"] == "" {
		t.Fatalf("snapshot status %v, want Failed with a message", st)
	}
	before := len(e.containers())
	expectError(t, g.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap}), 409, "SNAPSHOT::NOT_READY")
	expectError(t, g.do("POST", "/v1/sandboxes/"+id+"/fork", map[string]any{"count": 2}), 409, "SANDBOX::NOT_RUNNING")
	if n := len(e.containers()); n != before {
		t.Fatalf("containers %d → %d", before, n)
	}
	if r := g.do("DELETE", "/v1/snapshots/"+snap, nil); r.Status != 204 {
		t.Fatalf("delete a failed snapshot: %d %s", r.Status, r.Body)
	}
	if items := g.do("GET", "/v1/snapshots", nil).JSON(t)["items"].([]any); len(items) != 0 {
		t.Fatalf("snapshots left: %v", items)
	}
}
