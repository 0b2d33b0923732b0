package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// TestRedisClusterGateway: a gateway on a Redis Cluster of three real primaries
// (SANDGATE_REDIS_CLUSTER=on) serves the store's hot paths — a pool's warm members, a
// claim from one's own pool, a batch, a claim across tenants (a tenant's admin key
// from the default tenant's pool), a cold create, its expiry by the reaper, deletes —
// and no script or transaction of it ever crosses slots (a CROSSSLOT or non-local-key
// error would fail the request or show in its logs).
func TestRedisClusterGateway(t *testing.T) {
	c, err := testenv.StartRedisCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	e := newEnv(t, nil, "SANDGATE_REDIS_URL="+c.URL, "SANDGATE_REDIS_CLUSTER=on")
	g := e.startGateway()
	g.createPool("warm", 2, 2, 0, 6, nil)
	g.waitAvailable("warm", 2, 3*time.Minute)

	own := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
	if out := stdoutOf(g.agent(own).run("echo up")); out != "up" {
		t.Fatalf("claimed member answered %q", out)
	}
	g.waitAvailable("warm", 2, 3*time.Minute)
	r := g.do("POST", "/v1/batches", map[string]any{"count": 2, "poolRef": "warm"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var b struct {
		ID      string `json:"id"`
		Members []struct {
			ID     string `json:"id"`
			Source string `json:"source"`
		} `json:"members"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || len(b.Members) != 2 {
		t.Fatalf("batch members: %s", r.Body)
	}
	for _, m := range b.Members {
		if out := stdoutOf(g.agent(m.ID).run("echo member")); out != "member" {
			t.Fatalf("batch member %s (%s) answered %q", m.ID, m.Source, out)
		}
	}
	if r := g.do("GET", "/v1/batches/"+b.ID, nil); r.Status != 200 {
		t.Fatalf("get batch: %d %s", r.Status, r.Body)
	}

	// A tenant's admin key claims from the default tenant's pool: the record moves to
	// the tenant's slot (two scripts, each on one slot).
	tenant := g.createTenant("cluster-team", nil)
	_, key := g.issueKey(tenant, "admin")
	ta := g.asKey(key)
	g.waitAvailable("warm", 2, 3*time.Minute)
	across := ta.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
	if out := stdoutOf(ta.agent(across).run("echo across")); out != "across" {
		t.Fatalf("member claimed across tenants answered %q", out)
	}
	if r := ta.do("GET", "/v1/sandboxes/"+across, nil); r.Status != 200 {
		t.Fatalf("the claimer does not see its member: %d %s", r.Status, r.Body)
	}
	// A cold sandbox of the tenant, expired by the reaper from the tenant's schedule.
	short := ta.createSandbox(map[string]any{"timeout": 2})
	waitFor(t, 2*time.Minute, func() bool { return ta.do("GET", "/v1/sandboxes/"+short, nil).Status == 404 }, "the reaper to remove the expired sandbox")

	for _, who := range []struct {
		g  *gateway
		id string
	}{{g, own}, {ta, across}} {
		if r := who.g.do("DELETE", "/v1/sandboxes/"+who.id, nil); r.Status != 204 {
			t.Fatalf("delete %s: %d %s", who.id, r.Status, r.Body)
		}
	}
	if r := g.do("DELETE", "/v1/batches/"+b.ID, nil); r.Status != 204 {
		t.Fatalf("delete batch: %d %s", r.Status, r.Body)
	}
	_, allocated, _ := g.poolStatus("warm")
	if allocated != 0 {
		t.Errorf("pool counts %d allocated after every claimed member went", allocated)
	}
	for _, bad := range []string{"CROSSSLOT", "non local key", "MOVED", "hash to the same slot"} {
		if strings.Contains(g.proc.Logs(), bad) {
			t.Errorf("the gateway's logs show %q:\n%s", bad, tail(g.proc.Logs(), 4000))
		}
	}
}

// layoutBeforeCluster is the last commit whose store kept the key layout from before
// Redis Cluster support (global sandbox:<id>, sandboxes, expiry, warm, pools keys).
const layoutBeforeCluster = "28f7b73c82cb093593a0503bfcb483ecf8fa9a3c"

// TestUpgradeFromOldKeyLayout: a gateway of the version before the cluster layout
// (built from its commit) makes a pool with warm members, a claimed member, a plain
// sandbox and a tenant key; a gateway of this version started on the same Redis moves
// the keys to the new layout at its first reconcile, and loses nothing: the sandboxes
// are listed and answer, no container was removed as an orphan, the key still works.
func TestUpgradeFromOldKeyLayout(t *testing.T) {
	oldBin := buildAt(t, layoutBeforeCluster)
	e := newEnv(t, startRedis(t))
	e.bin = filepath.Join(oldBin, "sandgate")
	old := e.startGateway("SANDGATE_AGENT_BINARY=" + filepath.Join(oldBin, "sandbox-agent"))
	old.createPool("warm", 2, 2, 0, 5, nil)
	old.waitAvailable("warm", 2, 3*time.Minute)
	claimed := old.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
	plain := old.createSandbox(map[string]any{"metadata": map[string]string{"k": "v"}})
	old.waitAvailable("warm", 2, 3*time.Minute)
	tenant := old.createTenant("upgraders", nil)
	_, key := old.issueKey(tenant, "member")
	before := e.poolLabels()
	old.Stop()

	e.bin = ""
	g := e.startGateway()
	waitFor(t, time.Minute, func() bool { return strings.Contains(g.proc.Logs(), "migrated the old key layout") }, "the new gateway to migrate the old layout")
	for _, id := range []string{claimed, plain} {
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		if r.Status != 200 {
			t.Fatalf("sandbox %s after the upgrade: %d %s", id, r.Status, r.Body)
		}
		if st := r.JSON(t)["status"].(map[string]any)["state"]; st != "Running" {
			t.Fatalf("sandbox %s is %v after the upgrade", id, st)
		}
		if out := stdoutOf(g.agent(id).run("echo still")); out != "still" {
			t.Fatalf("sandbox %s answered %q after the upgrade", id, out)
		}
	}
	if r := g.asKey(key).do("GET", "/v1/sandboxes", nil); r.Status != 200 {
		t.Fatalf("the tenant's key after the upgrade: %d %s", r.Status, r.Body)
	}
	// Two more reconcile passes (500 ms each): nothing of before was removed.
	time.Sleep(2 * time.Second)
	after := e.poolLabels()
	for id, pool := range before {
		if _, ok := after[id]; !ok {
			t.Errorf("container of %s (pool %q) removed by the upgrade", id, pool)
		}
	}
	if _, _, avail := g.poolStatus("warm"); avail != 2 {
		t.Errorf("pool holds %d available after the upgrade, want the 2 warm members", avail)
	}
	next := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
	if before[next] != "warm" {
		t.Errorf("the claim after the upgrade got %s, not one of the old warm members", next)
	}
	if strings.Contains(g.proc.Logs(), "removing orphaned sandbox container") {
		t.Errorf("the new gateway removed orphans:\n%s", tail(g.proc.Logs(), 4000))
	}
}

// buildAt builds sandgate and sandbox-agent of commit into a temporary directory.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("git", "-C", repoRoot, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Skipf("commit %s is not in this checkout (a shallow clone?): %v", commit, err)
	}
	if err := untar.Wait(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, b := range []struct {
		out, pkg string
		static   bool
	}{{"sandgate", "./caddy", false}, {"sandbox-agent", "./sandbox-agent", true}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(out, b.out), b.pkg)
		cmd.Dir = src
		cmd.Env = os.Environ()
		if b.static {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		}
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s at %s: %v\n%s", b.pkg, commit, err, o)
		}
	}
	return out
}
