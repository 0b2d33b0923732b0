package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestStoreLostWhileGatewaysRun restarts a redis-server without persistence under two
// running gateways, so that the store comes back empty, and checks that the gateways,
// without a restart, adopt their sandboxes again from the runtime's labels: listed for
// their tenant by both gateways with their expiry and metadata, reachable through the
// proxy, and removed by the reaper once expired.
func TestStoreLostWhileGatewaysRun(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis, "SANDGATE_READY_TIMEOUT=10s")
	g1 := e.startGateway()
	g2 := e.startGateway()

	long := g1.createSandbox(map[string]any{"timeout": 600, "metadata": map[string]string{"team": "alpha"},
		"networkPolicy": map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "allowed.test"}}}})
	short := g1.createSandbox(map[string]any{"timeout": 40, "metadata": map[string]string{"team": "beta"}})
	before := map[string]sandboxSeen{}
	for _, id := range []string{long, short} {
		before[id] = g1.sandboxSeen(id)
		if before[id].ExpiresAt == "" {
			t.Fatalf("sandbox %s: no expiresAt", id)
		}
	}

	redis.Stop()
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}

	// Both gateways list both sandboxes again, as they were.
	for _, g := range []*gateway{g1, g2} {
		waitFor(t, 30*time.Second, func() bool {
			r := g.do("GET", "/v1/sandboxes?pageSize=200", nil)
			return r.Status == 200 && strings.Contains(string(r.Body), long) && strings.Contains(string(r.Body), short)
		}, "the gateway at "+g.Addr+" to list its sandboxes again after the store came back empty")
		for id, want := range before {
			if got := g.sandboxSeen(id); got != want {
				t.Errorf("gateway %s: sandbox %s after the store loss = %+v, want %+v", g.Addr, id, got, want)
			}
		}
	}
	for _, g := range []*gateway{g1, g2} {
		if out := stdoutOf(g.agent(long).run("echo regained")); strings.TrimSpace(out) != "regained" {
			t.Errorf("command through gateway %s after the store loss: stdout %q", g.Addr, out)
		}
		// The record keeps the egress policy in force, read back from the enforcer.
		if logs := g.proc.Logs(); strings.Contains(logs, "egress policy not read from its enforcer") {
			t.Errorf("gateway %s adopted a sandbox without its egress policy:\n%s", g.Addr, tail(logs, 4000))
		}
	}

	// The short one expires and the reaper removes it, container and all.
	waitFor(t, 60*time.Second, func() bool {
		return g2.do("GET", "/v1/sandboxes/"+short, nil).Status == 404 && !e.sandboxContainers()[short]
	}, "the expired sandbox to be removed after the store loss")
	if r := g1.do("GET", "/v1/sandboxes/"+long, nil); r.Status != 200 {
		t.Fatalf("the long-lived sandbox after the other's expiry: %d %s", r.Status, r.Body)
	}
}

// sandboxSeen is what a GET of a sandbox says that a store loss must not change.
type sandboxSeen struct {
	State     string
	ExpiresAt string
	Metadata  string
}

func (g *gateway) sandboxSeen(id string) sandboxSeen {
	g.t.Helper()
	r := g.do("GET", "/v1/sandboxes/"+id, nil)
	if r.Status != 200 {
		g.t.Fatalf("GET sandbox %s: %d %s", id, r.Status, r.Body)
	}
	var body struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
		ExpiresAt string            `json:"expiresAt"`
		Metadata  map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		g.t.Fatal(err)
	}
	md, _ := json.Marshal(body.Metadata)
	return sandboxSeen{State: body.Status.State, ExpiresAt: body.ExpiresAt, Metadata: string(md)}
}
