package e2e

// Fault tests of the data plane: a real redis-server killed with SIGKILL and frozen with
// SIGSTOP while sandboxes are in use, a real enforcer sidecar removed with `docker kill`,
// and a burst of real expiries. Each asserts the end state after a generous wait; the
// bound the design promises is in the test's name, and `make bench` measures it.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

// durableRedis is a private redis-server that writes every command to its append-only
// file before answering, so that it can be killed with SIGKILL and restarted on the same
// port with its data, as a crashed production Redis with AOF comes back.
type durableRedis struct {
	t    testing.TB
	Port int
	URL  string
	dir  string
	cmd  *exec.Cmd
}

func startDurableRedis(t testing.TB) *durableRedis {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &durableRedis{t: t, Port: port, URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), dir: t.TempDir()}
	r.start()
	t.Cleanup(func() {
		r.signal(syscall.SIGCONT)
		r.kill()
	})
	return r
}

func (r *durableRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	waitFor(r.t, 30*time.Second, func() bool {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(r.Port), "ping").Output()
		return err == nil && strings.TrimSpace(string(out)) == "PONG"
	}, "redis-server to answer (its append-only file loaded)")
}

// kill ends the server with SIGKILL.
func (r *durableRedis) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	r.cmd = nil
}

// signal sends sig (SIGSTOP freezes the server: it keeps accepting connections, never
// answers; SIGCONT thaws it).
func (r *durableRedis) signal(sig syscall.Signal) {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(sig)
	}
}

// proxyClient sends requests to sandbox ports through the gateway with the sandbox's
// access header, as an SDK does with the endpoint's headers.
type proxyClient struct {
	t       testing.TB
	base    string // http://gateway/sandboxes/{id}/proxy
	headers map[string]string
	client  *http.Client
}

func (g *gateway) proxyClient(id string) *proxyClient {
	g.t.Helper()
	_, headers, _ := g.endpoint(id, 44772, "")
	return &proxyClient{t: g.t, base: "http://" + g.Addr + "/sandboxes/" + id + "/proxy", headers: headers,
		client: &http.Client{Timeout: time.Minute}}
}

// get returns the status of GET port/path, or the transport error.
func (p *proxyClient) get(port int, path string) (int, string, error) {
	req, err := http.NewRequest("GET", fmt.Sprintf("%s/%d%s", p.base, port, path), nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range p.headers {
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}

// countEvents counts the sandbox's events of typ whose data has path (all pages).
func (g *gateway) countEvents(id, typ, path string) int {
	g.t.Helper()
	n, cursor := 0, ""
	for {
		q := "/v1/events?sandbox=" + id + "&type=" + typ + "&limit=1000"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := g.do("GET", q, nil)
		if r.Status != 200 {
			return -1
		}
		var page struct {
			Items []struct {
				Data map[string]any `json:"data"`
			} `json:"items"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			g.t.Fatal(err)
		}
		for _, it := range page.Items {
			if it.Data["path"] == path {
				n++
			}
		}
		if page.NextCursor == "" || len(page.Items) == 0 {
			return n
		}
		cursor = page.NextCursor
	}
}

// TestRedisOutageDataPlane kills and freezes the gateway's Redis while a sandbox is in use: the
// data plane (agent calls, previews) keeps being served from memory, readiness reports
// the outage while liveness does not, and the access events of the outage are written
// once Redis is back.
func TestRedisOutageDataPlane(t *testing.T) {
	redis := startDurableRedis(t)
	e := newEnv(t, &redisServer{Port: redis.Port, URL: redis.URL})
	g := e.startGateway()
	id := g.createSandbox(map[string]any{"timeout": 3600})
	startPreviewServer(t, g, id)
	// The access header is fetched with a tenant's key, as an SDK user's would be: its
	// check reads the key's binding from Redis, which must not stop the data plane.
	member := g.withTenantKey(g.createTenant("outage-"+randomHex(3), nil), "member")
	memberID := member.createSandbox(map[string]any{"timeout": 3600})
	p, mp := g.proxyClient(id), member.proxyClient(memberID)
	if st, body, err := mp.get(44772, "/ping"); err != nil || st != 200 {
		t.Fatalf("agent ping with the tenant key's access header before the outage: %d %v %s", st, err, body)
	}
	if st, body, err := p.get(44772, "/ping"); err != nil || st != 200 {
		t.Fatalf("agent ping before the outage: %d %v %s", st, err, body)
	}

	servedPings := 0
	t.Run("proxied_calls_served_through_a_15s_outage", func(t *testing.T) {
		redis.kill()
		var failures []string
		calls := 0
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			for _, c := range []struct {
				port int
				path string
				via  *proxyClient
			}{{44772, "/ping", p}, {previewPort, "/headers", p}, {44772, "/ping", mp}} {
				calls++
				st, body, err := c.via.get(c.port, c.path)
				if err != nil || st != 200 {
					failures = append(failures, fmt.Sprintf("port %d %s: %d %v %s", c.port, c.path, st, err, body))
				} else if c.port == 44772 && c.via == p {
					servedPings++
				}
			}
		}
		t.Logf("%d of %d proxied calls served through the outage", calls-len(failures), calls)
		if len(failures) > 0 {
			t.Errorf("%d of %d proxied calls failed while Redis was down; first: %s", len(failures), calls, failures[0])
		}
	})

	t.Run("ready_503_health_200_while_redis_is_down", func(t *testing.T) {
		expectError(t, g.do("GET", "/v1/ready", nil), 503, "STORE::UNAVAILABLE")
		if r := g.do("GET", "/v1/health", nil); r.Status != 200 {
			t.Errorf("/v1/health during the outage: %d %s (liveness must not fail with Redis)", r.Status, r.Body)
		}
		// The control plane says honestly that it cannot answer.
		expectError(t, g.do("GET", "/v1/sandboxes/"+id, nil), 503, "STORE::UNAVAILABLE")
	})

	t.Run("access_events_of_the_outage_written_when_redis_returns", func(t *testing.T) {
		redis.start()
		waitFor(t, time.Minute, func() bool { return g.do("GET", "/v1/ready", nil).Status == 200 }, "/v1/ready to answer 200 after Redis returned")
		if r := g.do("GET", "/v1/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("get sandbox after the outage: %d %s", r.Status, r.Body)
		}
		// The pings before the outage count too: at least one more than served through it.
		var got int
		waitFor(t, time.Minute, func() bool {
			got = g.countEvents(id, "preview.accessed", "/ping")
			return got >= servedPings+1
		}, fmt.Sprintf("the %d agent calls of the outage in the event stream", servedPings))
	})

	t.Run("frozen_redis_costs_a_proxied_call_at_most_1s", func(t *testing.T) {
		redis.signal(syscall.SIGSTOP)
		defer redis.signal(syscall.SIGCONT)
		var failures []string
		var slowest time.Duration
		calls := 0
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			calls++
			start := time.Now()
			st, body, err := p.get(44772, "/ping")
			slowest = max(slowest, time.Since(start))
			if err != nil || st != 200 {
				failures = append(failures, fmt.Sprintf("%d %v %s", st, err, body))
			}
		}
		start := time.Now()
		r := g.do("GET", "/v1/sandboxes/"+id, nil)
		t.Logf("frozen Redis: slowest proxied call %s; an API call answered %d after %s", slowest, r.Status, time.Since(start))
		if len(failures) > 0 {
			t.Errorf("%d of %d proxied calls failed while Redis was frozen; first: %s", len(failures), calls, failures[0])
		}
		expectError(t, r, 503, "STORE::UNAVAILABLE")
		redis.signal(syscall.SIGCONT)
		waitFor(t, time.Minute, func() bool { return g.do("GET", "/v1/sandboxes/"+id, nil).Status == 200 }, "the API to answer after Redis thawed")
	})
}

// createSandboxes creates n sandboxes at once (the gateway bounds how many cold creates
// run together) and returns their ids; it fails the test unless all are Running.
func (g *gateway) createSandboxes(n int, req map[string]any) []string {
	g.t.Helper()
	if req["image"] == nil {
		req["image"] = map[string]any{"uri": baseImage}
	}
	if req["entrypoint"] == nil {
		req["entrypoint"] = []string{"tail", "-f", "/dev/null"}
	}
	body, _ := json.Marshal(req)
	type result struct {
		id  string
		err error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go func() {
			hr, _ := http.NewRequest("POST", "http://"+g.Addr+"/v1/sandboxes", strings.NewReader(string(body)))
			hr.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := g.client.Do(hr)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var out struct {
				ID     string `json:"id"`
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			}
			data, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(data, &out); err != nil || resp.StatusCode != http.StatusAccepted || out.Status.State != "Running" {
				results <- result{err: fmt.Errorf("create: %d %s", resp.StatusCode, data)}
				return
			}
			results <- result{id: out.ID}
		}()
	}
	var ids []string
	var firstErr error
	for i := 0; i < n; i++ {
		r := <-results
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		if r.id != "" {
			ids = append(ids, r.id)
		}
	}
	if firstErr != nil {
		g.t.Fatalf("%d of %d creates failed; first: %v", n-len(ids), n, firstErr)
	}
	return ids
}

// sandboxContainers maps the sandbox id of every container on the env's network to true.
func (e *env) sandboxContainers() map[string]bool {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=sandgate.io/network="+e.Network, "--format", `{{.Label "sandgate.io/id"}}`).Output()
	if err != nil {
		e.t.Errorf("docker ps: %v", err)
		return nil
	}
	m := map[string]bool{}
	for _, id := range strings.Fields(string(out)) {
		m[id] = true
	}
	return m
}

// TestExpiryBurst: 20 sandboxes that expire at the same moment are all removed (record
// and containers), each with a sandbox.expired event and never a sandbox.failed one.
func TestExpiryBurst(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis)
	g := e.startGateway()
	const n = 20
	ids := g.createSandboxes(n, map[string]any{"timeout": 600})
	expiresAt := time.Now().Add(10 * time.Second).Truncate(time.Second)
	for _, id := range ids {
		if r := g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]any{"expiresAt": expiresAt.UTC().Format(time.RFC3339)}); r.Status != 200 {
			t.Fatalf("renew %s: %d %s", id, r.Status, r.Body)
		}
	}
	t.Run("20_sandboxes_gone_within_2s_of_expiresAt", func(t *testing.T) {
		gone := map[string]time.Duration{}
		waitFor(t, 2*time.Minute, func() bool {
			live := e.sandboxContainers()
			for _, id := range ids {
				if _, ok := gone[id]; ok {
					continue
				}
				if !live[id] && g.do("GET", "/v1/sandboxes/"+id, nil).Status == http.StatusNotFound {
					gone[id] = time.Since(expiresAt)
				}
			}
			return len(gone) == n
		}, "every sandbox of the burst to be removed")
		var delays []time.Duration
		for _, d := range gone {
			delays = append(delays, d)
		}
		sortDurations(delays)
		t.Logf("burst of %d: gone after expiresAt p50 %s, max %s (as polled)", n, delays[n/2], delays[n-1])
	})
	t.Run("no_sandbox_failed_events_only_sandbox_expired", func(t *testing.T) {
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
		}
		expired := map[string]time.Time{}
		waitFor(t, time.Minute, func() bool {
			for id, at := range g.eventSandboxes("sandbox.expired") {
				if want[id] {
					expired[id] = at
				}
			}
			return len(expired) == n
		}, "a sandbox.expired event for every sandbox of the burst")
		var delays []time.Duration
		for _, at := range expired {
			delays = append(delays, at.Sub(expiresAt))
		}
		sortDurations(delays)
		t.Logf("burst of %d: sandbox.expired after expiresAt p50 %s, max %s", n, delays[n/2], delays[n-1])
		for id := range g.eventSandboxes("sandbox.failed") {
			if want[id] {
				t.Errorf("sandbox %s expired but was reported failed", id)
			}
		}
	})
}

// eventSandboxes maps the sandbox ids of the tenant's events of typ (first 1000) to the
// time of the last such event.
func (g *gateway) eventSandboxes(typ string) map[string]time.Time {
	g.t.Helper()
	r := g.do("GET", "/v1/events?type="+typ+"&limit=1000", nil)
	if r.Status != 200 {
		g.t.Fatalf("events: %d %s", r.Status, r.Body)
	}
	var page struct {
		Items []struct {
			SandboxID string    `json:"sandboxId"`
			Time      time.Time `json:"time"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		g.t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, it := range page.Items {
		out[it.SandboxID] = it.Time
	}
	return out
}

func sortDurations(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

// TestEnforcerKilled: after `docker kill` of a sandbox's enforcer sidecar, the
// reconciler restores it with the policy last set through the egress API (not the one
// the sandbox was created with), and the platform's deny list still holds.
func TestEnforcerKilled(t *testing.T) {
	w := newEgressWorld(t, map[string][]string{
		"allowed": {"allowed.test"},
		"added":   {"added.test"},
		"blocked": {"blocked.test"},
	}, "SANDGATE_EGRESS_ALWAYS_DENY={ip:blocked}")
	ip := w.servers
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.test"},
	}})
	if r := s.egress("PATCH", []map[string]string{{"action": "allow", "target": "added.test"}}); r.Status != 200 {
		t.Fatalf("PATCH /policy: %d %s", r.Status, r.Body)
	}
	if got := s.httpStatus("added.test"); got != "200" {
		t.Fatalf("GET added.test after the PATCH = %s, want 200", got)
	}
	s.killEnforcer()

	t.Run("killed_enforcer_restored_with_its_current_policy_within_the_sync_interval", func(t *testing.T) {
		defer func() {
			if t.Failed() {
				for _, l := range strings.Split(w.g.proc.Logs(), "\n") {
					if strings.Contains(l, "enforcer") {
						t.Log(l)
					}
				}
			}
		}()
		waitFor(t, time.Minute, func() bool {
			time.Sleep(200 * time.Millisecond)
			return s.egress("GET", nil).Status == 200
		}, "the policy API to answer again")
		if p := s.policyOf(); !strings.Contains(p, "added.test") || !strings.Contains(p, "allowed.test") {
			t.Fatalf("restored policy %s lacks the rules in force before the kill", p)
		}
		if got := s.httpStatus("added.test"); got != "200" {
			t.Errorf("GET added.test after the restore = %s, want 200", got)
		}
		if got := s.httpStatus("allowed.test"); got != "200" {
			t.Errorf("GET allowed.test after the restore = %s, want 200", got)
		}
		if got := s.httpStatus(ip["blocked"]); got != "000" {
			t.Errorf("GET %s (platform-denied) after the restore = %s, want no connection", ip["blocked"], got)
		}
		r := w.g.do("GET", "/v1/sandboxes/"+s.id, nil)
		if st := r.JSON(t)["status"].(map[string]any)["state"]; st != "Running" {
			t.Errorf("state after the restore = %v, want Running", st)
		}
		if _, ok := w.g.eventSandboxes("sandbox.enforcer.restored")[s.id]; !ok {
			t.Errorf("no sandbox.enforcer.restored event")
		}
		_, metrics := scrape(t, "http://"+w.g.Addr+"/metrics", w.g.APIKey)
		if n, _ := seriesValue(metrics, "sandgate_enforcer_restores_total", "outcome=restored"); n != 1 {
			t.Errorf(`sandgate_enforcer_restores_total{outcome="restored"} %v after one restore, want 1`, n)
		}
	})
}

// TestDeleteBurst: 20 sandboxes deleted at once while the gateway reconciles every
// 100 ms: containers exit and leave the engine's list before their records go, and
// none is reported failed; each emits one sandbox.deleted.
func TestDeleteBurst(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway("SANDGATE_SYNC_INTERVAL=100ms")
	const n = 20
	ids := g.createSandboxes(n, map[string]any{"timeout": 600})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != http.StatusNoContent {
				t.Errorf("delete %s: %d %s", id, r.Status, r.Body)
			}
		}(id)
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // passes that would judge a deleted sandbox late
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	failed := 0
	for id := range g.eventSandboxes("sandbox.failed") {
		if want[id] {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d deleted sandboxes were reported failed", failed, n)
	}
	deleted := 0
	for id := range g.eventSandboxes("sandbox.deleted") {
		if want[id] {
			deleted++
		}
	}
	if deleted != n {
		t.Errorf("%d of %d deleted sandboxes have a sandbox.deleted event", deleted, n)
	}
}

// TestAdoptedSandboxKeepsItsEgressPolicy: a gateway on the embedded store is restarted
// (its records are gone) and adopts a sandbox whose policy was changed through the
// egress API; when that sandbox's enforcer is then killed, the restored one enforces
// the policy that was in force, read back from the enforcer at adoption, not deny-all.
func TestAdoptedSandboxKeepsItsEgressPolicy(t *testing.T) {
	w := newEgressWorldOn(t, newEnv(t, nil), map[string][]string{
		"allowed": {"allowed.test"},
		"added":   {"added.test"},
	})
	s := w.sandbox(map[string]any{"defaultAction": "deny", "egress": []map[string]string{
		{"action": "allow", "target": "allowed.test"},
	}})
	if r := s.egress("PATCH", []map[string]string{{"action": "allow", "target": "added.test"}}); r.Status != 200 {
		t.Fatalf("PATCH /policy: %d %s", r.Status, r.Body)
	}
	w.g.proc.Kill()
	w.g = w.e.startGateway()
	waitFor(t, 30*time.Second, func() bool {
		return w.g.do("GET", "/v1/sandboxes/"+s.id, nil).Status == 200
	}, "the restarted gateway to adopt the sandbox")
	s.a = w.g.agent(s.id)
	s.killEnforcer()
	waitFor(t, time.Minute, func() bool {
		_, ok := w.g.eventSandboxes("sandbox.enforcer.restored")[s.id]
		return ok
	}, "the enforcer to be restored")
	if p := s.policyOf(); !strings.Contains(p, "added.test") || !strings.Contains(p, "allowed.test") {
		t.Fatalf("restored policy %s lacks the rules in force before the restart", p)
	}
	if got := s.httpStatus("added.test"); got != "200" {
		t.Errorf("GET added.test after the restore = %s, want 200", got)
	}
}
