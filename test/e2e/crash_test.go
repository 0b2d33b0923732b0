package e2e

// Crash-only tests: a gateway is killed with SIGKILL (or its Redis frozen) in the middle
// of its work, and the end state is checked after a generous wait. Each subtest names
// the bound it shows; the wait is about twice that bound (never a timing assertion),
// and well below what the old behaviour took (about 60 s), so the test fails on it.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/runtimes/docker"
)

// sandboxFacts is what Docker itself says about one sandbox: the workload container's
// state, its enforcer's state ("running" for a live enforcer process, a sidecar's
// container state, "" when there is none) and whether the
// entrypoint process (tail -f /dev/null) runs in the workload.
type sandboxFacts struct {
	Workload   string
	Enforcer   string
	Entrypoint bool
}

// complete says whether the sandbox is running and enforced with its entrypoint started.
func (f sandboxFacts) complete() bool {
	return f.Workload == "running" && f.Enforcer == "running" && f.Entrypoint
}

// facts reads the facts of every sandbox on the env's network from Docker.
func (e *env) facts() map[string]sandboxFacts {
	e.t.Helper()
	out := map[string]sandboxFacts{}
	lines, err := exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.io/network="+e.Network, "--format", `{{.Label "sandgate.io/id"}} {{.State}}`).Output()
	if err != nil {
		e.t.Fatalf("docker ps: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		if id, state, ok := strings.Cut(l, " "); ok && id != "" {
			out[id] = sandboxFacts{Workload: state}
		}
	}
	lines, _ = exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.io/role=egress", "--format", `{{.Label "sandgate.io/id"}} {{.State}}`).Output()
	for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		if id, state, ok := strings.Cut(l, " "); ok {
			if f, mine := out[id]; mine {
				f.Enforcer = state
				out[id] = f
			}
		}
	}
	for id, f := range out {
		if rec, ok := docker.EnforcerProcessOf(id); ok {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(rec.PID) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
				f.Enforcer = "running"
			}
			out[id] = f
		}
		if f.Workload != "running" {
			continue
		}
		top, err := exec.Command("docker", "top", "sandgate-"+id).Output()
		f.Entrypoint = err == nil && strings.Contains(string(top), "tail -f /dev/null")
		out[id] = f
	}
	return out
}

// fireCreates sends n creates to g without waiting for their answers: the gateway is
// about to be killed under them. It returns a channel closed when every request ended.
func fireCreates(g *gateway, n int, extra map[string]any) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Minute}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600}
			for k, v := range extra {
				req[k] = v
			}
			js, _ := json.Marshal(req)
			r, err := http.NewRequest("POST", "http://"+g.Addr+"/v1/sandboxes", bytes.NewReader(js))
			if err != nil {
				return
			}
			r.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
			r.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(r); err == nil {
				resp.Body.Close()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// listed returns the sandboxes g lists: id → state.
func (g *gateway) listed() map[string]string {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes?pageSize=200", nil)
	if r.Status != 200 {
		g.t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	var body struct {
		Items []struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		g.t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range body.Items {
		out[it.ID] = it.Status.State
	}
	return out
}

// killMidCreates starts a gateway, fires creates at it and kills it (SIGKILL) once some
// containers exist while creates are still in flight. It retries (up to three rounds)
// until the kill leaves at least one sandbox half-made, so that the test exercises what
// it claims to; it returns the sandboxes it made completely before the kill.
func killMidCreates(t *testing.T, e *env, extra ...string) (kept []string) {
	t.Helper()
	for round := 0; round < 3; round++ {
		before := 0
		for _, f := range e.facts() {
			if f.Workload == "running" {
				before++
			}
		}
		g := e.startGateway(extra...)
		// One create that finishes: complete sandboxes must survive the recovery.
		kept = append(kept, g.createSandbox(map[string]any{"timeout": 600}))
		before++
		done := fireCreates(g, 12, nil)
		waitFor(t, 3*time.Minute, func() bool {
			select {
			case <-done:
				return true
			default:
			}
			// Kill once a workload has started while others are still being made: one
			// docker call per look, so that the kill lands while creates are in flight.
			out, _ := exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.io/network="+e.Network, "--format", "{{.State}}").Output()
			running, others := 0, 0
			for _, st := range strings.Fields(string(out)) {
				if st == "running" {
					running++
				} else {
					others++
				}
			}
			return running >= before+1 && others > 0
		}, "workloads of the creates to start")
		g.proc.Kill()
		<-done
		half := 0
		for id, f := range e.facts() {
			if !f.complete() {
				half++
				t.Logf("round %d: left half-made by the kill: %s %+v", round, id, f)
			}
		}
		if half > 0 {
			return kept
		}
	}
	t.Fatal("three kills in the middle of creates never left a sandbox half-made")
	return nil
}

func TestCrashOnly(t *testing.T) {
	// 14.1: with the embedded store, a gateway killed during creates and restarted
	// lists as Running only sandboxes whose workload runs behind a running enforcer with
	// the entrypoint started; everything half-made is removed.
	t.Run("restarted_gateway_adopts_only_complete_sandboxes", func(t *testing.T) {
		e := newEnv(t, nil)
		kept := killMidCreates(t, e)
		g := e.startGateway()
		// Startup reconciliation runs before the gateway answers; a few sync passes more.
		var lastListed map[string]string
		var lastFacts map[string]sandboxFacts
		ok := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			lastListed, lastFacts = g.listed(), e.facts()
			ok = len(lastFacts) == len(lastListed)
			for id := range lastFacts {
				if _, listed := lastListed[id]; !listed {
					ok = false
				}
			}
			if ok {
				break
			}
		}
		for id, st := range lastListed {
			f := lastFacts[id]
			if st == "Running" && !f.complete() {
				t.Errorf("sandbox %s is listed Running but is not complete: %+v", id, f)
			}
			if st != "Running" {
				t.Errorf("sandbox %s is listed %s after the restart", id, st)
			}
		}
		if !ok {
			t.Errorf("after 30 s, containers %v and listed sandboxes %v still differ: half-made sandboxes were neither finished nor removed", lastFacts, lastListed)
		}
		for _, id := range kept {
			if lastListed[id] != "Running" {
				t.Errorf("sandbox %s, complete before the kill, is %q after the restart", id, lastListed[id])
			}
		}
		t.Logf("%d complete sandboxes adopted", len(lastListed))
	})

	// 14.2: on Redis, the Pending records of a killed gateway and their containers are
	// taken over by a surviving replica within seconds of its heartbeat lapsing.
	t.Run("killed_gateway_pending_taken_over_within_10s", func(t *testing.T) {
		e := newEnv(t, startRedis(t))
		survivor := e.startGateway()
		kept := killMidCreates(t, e)
		var pending []string
		deadline := time.Now().Add(20 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			pending = pending[:0]
			listed := survivor.listed()
			for id, st := range listed {
				if st == "Pending" {
					pending = append(pending, id)
				}
			}
			leftover := 0
			for id, f := range e.facts() {
				if listed[id] != "Running" || !f.complete() {
					leftover++
				}
			}
			if len(pending) == 0 && leftover == 0 {
				break
			}
		}
		if len(pending) > 0 {
			t.Fatalf("20 s after the kill, %d sandboxes of the dead gateway are still Pending: %v", len(pending), pending)
		}
		for id, st := range survivor.listed() {
			if f := e.facts()[id]; st != "Running" || !f.complete() {
				t.Errorf("sandbox %s is %s with %+v after the takeover", id, st, f)
			}
		}
		for id, f := range e.facts() {
			if !f.complete() {
				t.Errorf("the dead gateway's half-made sandbox %s is still there: %+v", id, f)
			}
		}
		listed := survivor.listed()
		for _, id := range kept {
			if listed[id] != "Running" {
				t.Errorf("sandbox %s, complete before the kill, is %q after the takeover", id, listed[id])
			}
		}
	})

	// 14.3: the cold members of a batch are durable work: after the accepting gateway
	// is killed, a surviving one makes them (or fails them with a cause); none vanishes.
	t.Run("killed_gateway_batch_members_made_elsewhere_within_60s", func(t *testing.T) {
		e := newEnv(t, startRedis(t))
		survivor := e.startGateway()
		accepting := e.startGateway()
		r := accepting.do("POST", "/v1/batches", map[string]any{
			"count":    10,
			"template": map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600},
		})
		if r.Status != 202 && r.Status != 200 && r.Status != 201 {
			t.Fatalf("create batch: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["id"].(string)
		// Kill once the first members exist: the rest are still queued in its memory.
		waitFor(t, 2*time.Minute, func() bool { return len(e.facts()) >= 2 }, "the first members to start")
		accepting.proc.Kill()
		var states map[string]int
		var members []any
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			r := survivor.do("GET", "/v1/batches/"+id, nil)
			if r.Status != 200 {
				t.Fatalf("get batch: %d %s", r.Status, r.Body)
			}
			members = r.JSON(t)["members"].([]any)
			states = map[string]int{}
			for _, m := range members {
				states[m.(map[string]any)["status"].(map[string]any)["state"].(string)]++
			}
			if states["Running"]+states["Failed"] == 10 {
				break
			}
		}
		if states["Running"]+states["Failed"] != 10 {
			t.Fatalf("2 min after the kill the batch's members are %v, want every one Running or Failed: %v", states, members)
		}
		for _, m := range members {
			st := m.(map[string]any)["status"].(map[string]any)
			if st["state"] == "Failed" && st["reason"] == "" {
				t.Errorf("member failed without a cause: %v", m)
			}
		}
		facts := e.facts()
		for _, m := range members {
			mm := m.(map[string]any)
			if mm["status"].(map[string]any)["state"] == "Running" && !facts[mm["id"].(string)].complete() {
				t.Errorf("member %v is Running but not complete: %+v", mm["id"], facts[mm["id"].(string)])
			}
		}
		t.Logf("members after the takeover: %v", states)
	})

	// 14.7: every replica reports the same count of starting pool members (not only
	// the one whose manager starts them).
	t.Run("pool_starting_reported_by_every_replica", func(t *testing.T) {
		e := newEnv(t, startRedis(t))
		a, b := e.startGateway(), e.startGateway()
		r := a.do("POST", "/v1/pools", map[string]any{
			"name":         "crash",
			"template":     map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}},
			"capacitySpec": map[string]any{"bufferMin": 6, "bufferMax": 6, "poolMin": 0, "poolMax": 6},
		})
		if r.Status/100 != 2 {
			t.Fatalf("create pool: %d %s", r.Status, r.Body)
		}
		t.Cleanup(func() { a.do("DELETE", "/v1/pools/crash", nil) })
		seen := map[*gateway]bool{}
		starting := func(g *gateway) float64 {
			r := g.do("GET", "/v1/pools/crash", nil)
			if r.Status != 200 {
				t.Fatalf("get pool: %d %s", r.Status, r.Body)
			}
			return r.JSON(t)["status"].(map[string]any)["starting"].(float64)
		}
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline) && !(seen[a] && seen[b]); time.Sleep(100 * time.Millisecond) {
			for _, g := range []*gateway{a, b} {
				if starting(g) > 0 {
					seen[g] = true
				}
			}
			if r := a.do("GET", "/v1/pools/crash", nil); r.JSON(t)["status"].(map[string]any)["available"].(float64) >= 6 && !(seen[a] && seen[b]) {
				break
			}
		}
		if !seen[a] || !seen[b] {
			t.Fatalf("while the pool filled, replica A saw members starting: %v, replica B: %v; want both", seen[a], seen[b])
		}
	})

	// 14.7: a create that overlaps the start of a store outage leaves no Pending record
	// behind once the store answers again.
	t.Run("create_overlapping_outage_leaves_no_pending_within_10s", func(t *testing.T) {
		rs := startRedis(t)
		e := newEnv(t, rs)
		// A longer ready timeout stretches how long the old patience rule left the
		// record Pending (ready timeout + 30 s), so the bound below tells the two apart.
		g := e.startGateway("SANDGATE_READY_TIMEOUT=60s")
		rdb := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(rs.URL, "redis://"), "/0")})
		defer rdb.Close()
		// The outage must catch the create between its record and its end: retry
		// (deleting the sandbox) when the create finished first.
		for attempt := 0; ; attempt++ {
			if attempt == 3 {
				t.Fatal("three creates all finished before the outage began")
			}
			done := fireCreates(g, 1, nil)
			waitFor(t, 2*time.Minute, func() bool { return containsState(g.listed(), "Pending") }, "the create's Pending record")
			// Freeze Redis (a real one, paused by its own command) long enough for the
			// create's last write and its clean-up to fail on it, client retries
			// included.
			if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
				t.Fatalf("pause redis: %v", err)
			}
			paused := time.Now()
			<-done
			time.Sleep(time.Until(paused.Add(30 * time.Second))) // the pause's end
			// Redis ends a pause on its own clock (up to a cron tick late), and the
			// gateway's writes queued behind it drain first: wait until the store
			// answers again, as the bound below does.
			waitFor(t, 30*time.Second, func() bool {
				return g.do("GET", "/v1/sandboxes?pageSize=1", nil).Status == 200
			}, "the store to answer after the pause")
			listed := g.listed()
			if !containsState(listed, "Running") {
				break
			}
			for id := range listed {
				g.do("DELETE", "/v1/sandboxes/"+id, nil)
			}
		}
		var left map[string]string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if left = g.listed(); len(left) == 0 {
				break
			}
		}
		if len(left) > 0 {
			t.Fatalf("20 s after the outage the failed create's record is still listed: %v", left)
		}
		waitFor(t, 20*time.Second, func() bool { return len(e.facts()) == 0 }, "the failed create's container to go")
	})
}

func containsState(m map[string]string, state string) bool {
	for _, st := range m {
		if st == state {
			return true
		}
	}
	return false
}

// 13.10: two gateways with separate stores on one Docker engine (and one network) each
// keep to their own sandboxes: neither adopts the other's, and a renewal keeps a
// sandbox past the expiry its labels were made with.
func TestSeparateStoresOnOneEngine(t *testing.T) {
	e := newEnv(t, startRedis(t))
	a := e.startGateway()
	x := a.createSandbox(map[string]any{"timeout": 15})
	r := a.do("POST", "/v1/sandboxes/"+x+"/renew-expiration", map[string]any{"expiresAt": time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)})
	if r.Status != 200 {
		t.Fatalf("renew: %d %s", r.Status, r.Body)
	}
	// The second gateway has a store of its own (another key prefix) on the same network.
	b := e.startGateway("SANDGATE_REDIS_PREFIX=other" + randomHex(4) + ":")
	y := b.createSandbox(map[string]any{"timeout": 600})
	// Well past the expiry x's labels carry, and many sync passes of both.
	time.Sleep(25 * time.Second)
	la, lb := a.listed(), b.listed()
	if la[x] != "Running" {
		t.Errorf("gateway A's renewed sandbox is %q, want Running (containers: %v)", la[x], e.facts())
	}
	if _, ok := lb[x]; ok {
		t.Errorf("gateway B adopted gateway A's sandbox: %v", lb)
	}
	if lb[y] != "Running" {
		t.Errorf("gateway B's sandbox is %q, want Running", lb[y])
	}
	if _, ok := la[y]; ok {
		t.Errorf("gateway A adopted gateway B's sandbox: %v", la)
	}
	if f := e.facts(); !f[x].complete() || !f[y].complete() {
		t.Errorf("a sandbox was removed or broken by the other gateway: %v", f)
	}
}

// TestEmbeddedGatewaysOfOneUser: two gateways one user runs with the embedded store and
// the same settings (two `sandgate run` on one host) share an engine: neither adopts nor
// removes the other's sandboxes, and the first, restarted, gets its own back.
func TestEmbeddedGatewaysOfOneUser(t *testing.T) {
	e := newEnv(t, nil)
	user := []string{"XDG_CONFIG_HOME=" + t.TempDir(), "SANDGATE_READY_TIMEOUT=5s"}
	a := e.startGateway(user...)
	x := a.createSandbox(map[string]any{"timeout": 600})
	b := e.startGateway(user...)
	y := b.createSandbox(map[string]any{"timeout": 600})
	// Past the adoption grace (the ready timeout) of both, and many sync passes.
	time.Sleep(8 * time.Second)
	la, lb := a.listed(), b.listed()
	if len(la) != 1 || la[x] != "Running" {
		t.Errorf("gateway A lists %v, want only its own %s Running", la, x)
	}
	if len(lb) != 1 || lb[y] != "Running" {
		t.Errorf("gateway B lists %v, want only its own %s Running", lb, y)
	}
	if f := e.facts(); !f[x].complete() || !f[y].complete() {
		t.Errorf("a sandbox was removed or broken by the other gateway: %v", f)
	}
	a.Stop()
	again := e.startGateway(user...)
	if l := again.listed(); len(l) != 1 || l[x] != "Running" {
		t.Errorf("gateway A restarted lists %v, want its own %s adopted Running and nothing else", l, x)
	}
}

// TestOutOfMemoryReported: a sandbox whose entrypoint is killed at its memory limit is
// Failed with reason OOM_KILLED, not a bare exit code, in its status and its event.
func TestOutOfMemoryReported(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	// Settles first (a create whose entrypoint exits at once fails), then touches
	// 256 MiB under a 64 MiB limit with no swap.
	id := g.createSandbox(map[string]any{
		"resourceLimits": map[string]string{"memory": "64Mi"},
		"entrypoint":     []string{"python3", "-c", "import time; time.sleep(1); b = b'x' * (256 << 20); time.sleep(600)"},
	})
	var status map[string]any
	waitFor(t, 30*time.Second, func() bool {
		status = g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
		return status["state"] == "Failed"
	}, "the sandbox to fail")
	if status["reason"] != "OOM_KILLED" {
		t.Fatalf("status %v, want reason OOM_KILLED", status)
	}
	if msg, _ := status["message"].(string); !strings.Contains(msg, "memory") {
		t.Errorf("message %q does not say it was memory", msg)
	}
	if _, ok := g.eventSandboxes("sandbox.failed")[id]; !ok {
		t.Errorf("no sandbox.failed event")
	}
}

// TestDeadSandboxAnswersUnavailable: a sandbox (not from a pool) whose workload is
// killed behind the gateway's back is Failed with its reason, its calls answer
// SANDBOX::UNAVAILABLE (never an unreachable upstream or "not running"), and its
// enforcer and namespace holder are removed at once while its workload's container
// stays for its logs.
func TestDeadSandboxAnswersUnavailable(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	a := g.agent(id)
	if out, err := exec.Command("docker", "kill", "sandgate-"+id).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	// The first call after the death, and every one after it.
	for i := range 3 {
		r := a.call("POST", "/command", map[string]any{"command": "true"})
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "SANDBOX::UNAVAILABLE") || !strings.Contains(string(r.Body), "EXITED") {
			t.Fatalf("call %d after the death: %d %s, want 503 SANDBOX::UNAVAILABLE naming EXITED", i, r.Status, r.Body)
		}
	}
	status := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["status"].(map[string]any)
	if status["state"] != "Failed" || status["reason"] != "EXITED" {
		t.Fatalf("status %v, want Failed EXITED", status)
	}
	waitFor(t, 20*time.Second, func() bool {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^sandgate-"+id+"-").Output()
		return len(strings.Fields(string(out))) == 0
	}, "the dead sandbox's enforcer and holder to be removed")
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^sandgate-"+id+"$").Output(); len(strings.Fields(string(out))) != 1 {
		t.Errorf("the dead workload's container is gone before its record's retention: %q", out)
	}
	if g.do("DELETE", "/v1/sandboxes/"+id, nil).Status != 204 {
		t.Errorf("delete of the failed sandbox")
	}
}
