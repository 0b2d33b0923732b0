package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sandgate "github.com/sandgate/sandgate/client"
)

// poolStatus reads a pool's live numbers.
func (g *gateway) poolStatus(name string) (total, allocated, available int) {
	g.t.Helper()
	r := g.do("GET", "/v1/pools/"+name, nil)
	if r.Status != 200 {
		g.t.Fatalf("get pool: %d %s", r.Status, r.Body)
	}
	st := r.JSON(g.t)["status"].(map[string]any)
	return int(st["total"].(float64)), int(st["allocated"].(float64)), int(st["available"].(float64))
}

func (g *gateway) createPool(name string, bufferMin, bufferMax, poolMin, poolMax int, template map[string]any) {
	g.t.Helper()
	if template == nil {
		template = map[string]any{}
	}
	if template["image"] == nil {
		template["image"] = map[string]any{"uri": baseImage}
	}
	if template["entrypoint"] == nil {
		template["entrypoint"] = []string{"tail", "-f", "/dev/null"}
	}
	r := g.do("POST", "/v1/pools", map[string]any{"name": name, "template": template,
		"capacitySpec": map[string]int{"bufferMin": bufferMin, "bufferMax": bufferMax, "poolMin": poolMin, "poolMax": poolMax}})
	if r.Status != 201 {
		g.t.Fatalf("create pool: %d %s", r.Status, r.Body)
	}
}

func (g *gateway) waitAvailable(name string, want int, within time.Duration) {
	g.t.Helper()
	waitFor(g.t, within, func() bool { _, _, a := g.poolStatus(name); return a == want }, fmt.Sprintf("pool %s to hold %d available", name, want))
}

func TestPools(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	c, ctx := sdkClient(t, g, g.APIKey), context.Background()

	t.Run("bad pool definitions", func(t *testing.T) {
		tmpl := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}
		for name, body := range map[string]map[string]any{
			"bad name":          {"name": "Bad_Name", "template": tmpl, "capacitySpec": map[string]int{"bufferMax": 1, "poolMax": 1}},
			"no template":       {"name": "x", "capacitySpec": map[string]int{"bufferMax": 1, "poolMax": 1}},
			"buffer above pool": {"name": "x", "template": tmpl, "capacitySpec": map[string]int{"bufferMax": 5, "poolMax": 2}},
			"min above max":     {"name": "x", "template": tmpl, "capacitySpec": map[string]int{"bufferMin": 3, "bufferMax": 2, "poolMax": 4}},
		} {
			t.Run(name, func(t *testing.T) { expectError(t, g.do("POST", "/v1/pools", body), 400, "POOL::INVALID_PARAMETER") })
		}
		expectError(t, g.do("POST", "/v1/pools", map[string]any{"name": "x", "template": map[string]any{"image": map[string]any{"uri": "nope/nope:1"}, "entrypoint": []string{"true"}},
			"capacitySpec": map[string]int{"bufferMax": 1, "poolMax": 1}}), 400, "SANDBOX::IMAGE_NOT_FOUND")
		expectError(t, g.do("GET", "/v1/pools/none", nil), 404, "POOL::NOT_FOUND")
		expectError(t, g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "none"}}), 404, "POOL::NOT_FOUND")
	})

	g.createPool("warm", 2, 3, 0, 6, map[string]any{"env": map[string]string{"FROM_TEMPLATE": "t"}, "metadata": map[string]string{"tier": "warm"}})
	t.Run("fills to its bounds", func(t *testing.T) {
		g.waitAvailable("warm", 3, 60*time.Second)
		time.Sleep(time.Second) // no overshoot after settling
		if total, _, avail := g.poolStatus("warm"); total != 3 || avail != 3 {
			t.Fatalf("total %d available %d, want 3/3", total, avail)
		}
		if n := len(e.containers()); n != 3 {
			t.Fatalf("%d containers, want 3", n)
		}
		if r := g.do("GET", "/v1/sandboxes", nil); len(r.JSON(t)["items"].([]any)) != 0 {
			t.Fatalf("warm sandboxes must not be listed before a claim: %s", r.Body)
		}
	})

	t.Run("claim binds env, metadata and timeout late", func(t *testing.T) {
		sb, err := c.CreateSandbox(ctx, sandgate.CreateRequest{Extensions: map[string]string{"poolRef": "warm"},
			Env: map[string]string{"CLAIMED": "yes"}, Metadata: map[string]string{"team": "alpha"}, Timeout: sandgate.Seconds(300 * time.Second)})
		if err != nil || sb.Metadata["team"] != "alpha" || sb.Metadata["tier"] != "warm" || sb.Metadata["sandgate.io/pool"] != "warm" || sb.ExpiresAt == nil {
			t.Fatalf("claim: %+v, %v", sb, err)
		}
		if out := sdkExec(t, ctx, c, sb.ID, `echo "$CLAIMED $FROM_TEMPLATE"`); out != "yes t" {
			t.Fatalf("env after claim = %q, want \"yes t\"", out)
		}
		if _, alloc, _ := g.poolStatus("warm"); alloc != 1 {
			t.Fatalf("allocated = %d, want 1", alloc)
		}
		g.waitAvailable("warm", 3, 30*time.Second)
		if page, err := c.ListSandboxes(ctx, sandgate.ListOptions{Metadata: map[string]string{"team": "alpha"}}); err != nil || len(page.Items) != 1 {
			t.Fatalf("claimed sandbox not listed: %+v, %v", page, err)
		}
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, alloc, _ := g.poolStatus("warm"); alloc != 0 {
			t.Fatalf("allocated after delete = %d, want 0", alloc)
		}
	})

	t.Run("claim with another entrypoint starts it", func(t *testing.T) {
		id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"},
			"entrypoint": []string{"sh", "-c", "echo started > /tmp/ep; exec sleep 1000"}})
		waitFor(t, 10*time.Second, func() bool { return stdoutOf(g.agent(id).run("cat /tmp/ep 2>/dev/null")) == "started" }, "the claimed entrypoint to run")
		g.do("DELETE", "/v1/sandboxes/"+id, nil)
	})

	t.Run("a killed warm sandbox is noticed and replaced", func(t *testing.T) {
		g.waitAvailable("warm", 3, 30*time.Second)
		out, _ := exec.Command("docker", "ps", "-q", "--filter", "label=sandgate.io/network="+e.Network, "--filter", "label=sandgate.io/pool=warm").Output()
		victim := strings.Fields(string(out))[0]
		if err := exec.Command("docker", "kill", victim).Run(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			err := exec.Command("docker", "inspect", victim).Run()
			_, _, avail := g.poolStatus("warm")
			return err != nil && avail == 3
		}, "the dead member to be removed and replaced")
		// Every claim now gets a live sandbox.
		for i := 0; i < 3; i++ {
			id := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
			if out := stdoutOf(g.agent(id).run("echo alive")); out != "alive" {
				t.Fatalf("claimed a dead sandbox: %q", out)
			}
			g.do("DELETE", "/v1/sandboxes/"+id, nil)
		}
	})

	t.Run("batch larger than the pool mixes warm and cold", func(t *testing.T) {
		g.waitAvailable("warm", 3, 30*time.Second)
		b, err := c.CreateBatch(ctx, sandgate.BatchRequest{Count: 5, PoolRef: "warm", Metadata: map[string]string{"job": "mix"}, Env: map[string]string{"B": "1"}})
		if err != nil {
			t.Fatalf("batch: %v", err)
		}
		sources := map[string]int{}
		for _, m := range b.Members {
			sources[m.Source]++
		}
		if len(b.Members) != 5 || sources["pool"] != 3 || sources["cold"] != 2 {
			t.Fatalf("members by source %v, want 3 pool + 2 cold: %+v", sources, b)
		}
		waitFor(t, 60*time.Second, func() bool {
			s, err := c.GetBatch(ctx, b.ID)
			return err == nil && s.Summary.Running == 5
		}, "every member to run")
		for _, m := range b.Members {
			if out := sdkExec(t, ctx, c, m.ID, `echo $B`); out != "1" {
				t.Fatalf("member %s (%s): env B = %q", m.ID, m.Source, out)
			}
		}
		if page, err := c.ListSandboxes(ctx, sandgate.ListOptions{Metadata: map[string]string{"sandgate.io/batch": b.ID}}); err != nil || len(page.Items) != 5 {
			t.Fatalf("batch members not listed by batch key: %+v, %v", page, err)
		}
		if err := c.DeleteBatch(ctx, b.ID); err != nil {
			t.Fatalf("delete batch: %v", err)
		}
		expectSDKError(t, errOf(c.GetBatch(ctx, b.ID)), 404, "BATCH::NOT_FOUND")
		for _, m := range b.Members {
			if exec.Command("docker", "inspect", "sandgate-"+m.ID).Run() == nil {
				t.Fatalf("member %s still has a container", m.ID)
			}
		}
	})

	t.Run("batch failures are reported per member", func(t *testing.T) {
		b, err := c.CreateBatch(ctx, sandgate.BatchRequest{Count: 2, Template: &sandgate.CreateRequest{
			Image: &sandgate.Image{URI: baseImage}, Entrypoint: []string{"sh", "-c", "exit 4"}}})
		if err != nil {
			t.Fatalf("batch: %v", err)
		}
		id := b.ID
		waitFor(t, 60*time.Second, func() bool {
			s, err := c.GetBatch(ctx, id)
			return err == nil && s.Summary.Failed == 2
		}, "both members to be reported failed")
		body := g.do("GET", "/v1/batches/"+id, nil).Body
		if !strings.Contains(string(body), "SANDBOX::START_FAILED") || !strings.Contains(string(body), "code 4") {
			t.Fatalf("member failure lacks its code and cause: %s", body)
		}
		g.do("DELETE", "/v1/batches/"+id, nil)
	})

	t.Run("pool deletion removes its warm sandboxes", func(t *testing.T) {
		claimed := g.createSandbox(map[string]any{"extensions": map[string]string{"poolRef": "warm"}})
		if r := g.do("DELETE", "/v1/pools/warm", nil); r.Status != 204 {
			t.Fatalf("delete pool: %d %s", r.Status, r.Body)
		}
		waitFor(t, 30*time.Second, func() bool { return len(e.containers()) == 1 }, "warm containers to go")
		// The claimed sandbox lives on.
		if out := stdoutOf(g.agent(claimed).run("echo still")); out != "still" {
			t.Fatalf("claimed sandbox after pool deletion: %q", out)
		}
		g.do("DELETE", "/v1/sandboxes/"+claimed, nil)
		expectError(t, g.do("GET", "/v1/pools/warm", nil), 404, "POOL::NOT_FOUND")
	})
}

// TestPoolBatchOfFifty: a batch of 50 from a pool holding 50 comes back complete, warm.
func TestPoolBatchOfFifty(t *testing.T) {
	e := newEnv(t, startRedis(t), "SANDGATE_POOL_CONCURRENCY=6")
	g := e.startGateway()
	g.createPool("fifty", 50, 50, 0, 50, nil)
	g.waitAvailable("fifty", 50, 5*time.Minute)
	r := g.do("POST", "/v1/batches", map[string]any{"count": 50, "poolRef": "fifty"})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var b struct {
		ID      string `json:"id"`
		Members []struct {
			ID     string                 `json:"id"`
			Source string                 `json:"source"`
			Status struct{ State string } `json:"status"`
		} `json:"members"`
	}
	json.Unmarshal(r.Body, &b)
	if len(b.Members) != 50 {
		t.Fatalf("%d members, want 50", len(b.Members))
	}
	seen := map[string]bool{}
	for _, m := range b.Members {
		if m.Source != "pool" || m.Status.State != "Running" || seen[m.ID] {
			t.Fatalf("member %+v: want a distinct, running pool member", m)
		}
		seen[m.ID] = true
	}
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for _, m := range b.Members {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if out := stdoutOf(g.agent(id).run("echo up")); out != "up" {
				errs <- id + ": " + out
			}
		}(m.ID)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r := g.do("DELETE", "/v1/batches/"+b.ID, nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	g.do("DELETE", "/v1/pools/fifty", nil)
	waitFor(t, time.Minute, func() bool { return len(e.containers()) == 0 }, "every container to go")
}

// TestTwoGatewaysShareAPool: two gateways on one Redis claim 200 times from a pool of 100
// warm sandboxes; every claim gets its own sandbox, the pool never exceeds poolMax, and
// when one gateway dies the other keeps the pool filled.
func TestTwoGatewaysShareAPool(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis, "SANDGATE_POOL_WAIT=100ms", "SANDGATE_POOL_CONCURRENCY=6")
	a := e.startGateway()
	b := e.startGateway()
	// Half the claims are cold creates queued behind each other on two cores: give each
	// request the time that queue takes.
	a.client.Timeout, b.client.Timeout = 10*time.Minute, 10*time.Minute
	a.createPool("shared", 100, 100, 0, 100, nil)
	a.waitAvailable("shared", 100, 6*time.Minute)

	var mu sync.Mutex
	ids := map[string]int{}
	var maxPool, maxCold int // containers of the pool (warm or claimed) and cold ones
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() { // poolMax is never exceeded while claims and refills race
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pool, cold := 0, 0
			for _, p := range e.poolLabels() {
				if p == "shared" {
					pool++
				} else if p == "" {
					cold++
				}
			}
			mu.Lock()
			maxPool, maxCold = max(maxPool, pool), max(maxCold, cold)
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	failures := make(chan string, 200)
	for i := 0; i < 200; i++ {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Add(1)
		go func(g *gateway) {
			defer wg.Done()
			r := g.do("POST", "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "shared"}})
			if r.Status != 202 {
				failures <- fmt.Sprintf("%d %s", r.Status, r.Body)
				return
			}
			var m struct{ ID string }
			json.Unmarshal(r.Body, &m)
			mu.Lock()
			ids[m.ID]++
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	close(stopWatch)
	<-watchDone
	close(failures)
	for f := range failures {
		t.Errorf("claim failed: %s", f)
	}
	if len(ids) != 200 {
		t.Fatalf("%d distinct sandboxes for 200 claims", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("sandbox %s handed out %d times", id, n)
		}
	}
	// The pool's members, warm or claimed, never exceed poolMax while claims and refills
	// race; and no container is made beyond the claims the pool could not serve: a member
	// that proves dead on its claim is replaced, but inside the pool's bound or by one of
	// those cold creates.
	labels, fromPool := e.poolLabels(), 0
	for id := range ids {
		if labels[id] == "shared" {
			fromPool++
		}
	}
	cold := 200 - fromPool
	if maxPool > 100 {
		t.Fatalf("saw %d members of the pool at once; poolMax is 100", maxPool)
	}
	if maxCold > cold {
		t.Fatalf("saw %d cold sandboxes at once; only %d claims were served cold", maxCold, cold)
	}
	t.Logf("%d claims from the pool, %d cold; at most %d pool members and %d cold at once", fromPool, cold, maxPool, maxCold)

	// Free the pool's allocation so it refills, kill one gateway outright and check the
	// other takes the pool over.
	for id := range ids {
		a.do("DELETE", "/v1/sandboxes/"+id, nil)
	}
	a.proc.Kill()
	b.waitAvailable("shared", 100, 6*time.Minute)
	if r := b.do("DELETE", "/v1/pools/shared", nil); r.Status != 204 {
		t.Fatalf("delete pool: %d", r.Status)
	}
	waitFor(t, 2*time.Minute, func() bool { return len(e.containers()) == 0 }, "every container to go")
	_ = http.StatusOK
}
