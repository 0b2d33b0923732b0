package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// asKey returns a copy of the gateway client that sends another API key.
func (g *gateway) asKey(key string) *gateway {
	c := *g
	c.APIKey = key
	return &c
}

func (g *gateway) createTenant(name string, quotas map[string]any) string {
	g.t.Helper()
	r := g.do("POST", "/v1/tenants", map[string]any{"name": name, "quotas": quotas})
	if r.Status != 201 {
		g.t.Fatalf("create tenant: %d %s", r.Status, r.Body)
	}
	return r.JSON(g.t)["id"].(string)
}

func (g *gateway) issueKey(tenant, role string) (id, key string) {
	g.t.Helper()
	r := g.do("POST", "/v1/tenants/"+tenant+"/keys", map[string]string{"role": role})
	if r.Status != 201 {
		g.t.Fatalf("issue %s key: %d %s", role, r.Status, r.Body)
	}
	m := r.JSON(g.t)
	return m["id"].(string), m["key"].(string)
}

func TestTenancy(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis)
	admin := e.startGateway()
	ta := admin.createTenant("team-a", nil)
	tb := admin.createTenant("team-b", nil)
	_, aAdminKey := admin.issueKey(ta, "tenant-admin")
	_, aMemberKey := admin.issueKey(ta, "member")
	_, aViewerKey := admin.issueKey(ta, "viewer")
	_, bMemberKey := admin.issueKey(tb, "member")
	a, viewer, b := admin.asKey(aMemberKey), admin.asKey(aViewerKey), admin.asKey(bMemberKey)

	if r := a.do("GET", "/v1/whoami", nil); r.JSON(t)["tenant"] != ta || r.JSON(t)["role"] != "member" {
		t.Fatalf("whoami: %s", r.Body)
	}
	id := a.createSandbox(map[string]any{"metadata": map[string]string{"owner": "a"}})
	startPreviewServer(t, a, id)
	a.createPool("apool", 0, 1, 0, 1, nil)
	br := a.do("POST", "/v1/batches", map[string]any{"count": 1, "poolRef": "apool"})
	if br.Status != 202 {
		t.Fatalf("batch: %d %s", br.Status, br.Body)
	}
	batch := br.JSON(t)["id"].(string)

	t.Run("another tenant gets 404 on every route", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/sandboxes/" + id, nil},
			{"DELETE", "/v1/sandboxes/" + id, nil},
			{"PATCH", "/v1/sandboxes/" + id + "/metadata", map[string]string{"x": "y"}},
			{"POST", "/v1/sandboxes/" + id + "/pause", nil},
			{"POST", "/v1/sandboxes/" + id + "/renew-expiration", map[string]string{"expiresAt": time.Now().Add(time.Hour).Format(time.RFC3339)}},
			{"GET", "/v1/sandboxes/" + id + "/endpoints/44772", nil},
			{"GET", "/sandboxes/" + id + "/proxy/44772/ping", nil},
			{"GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", id, previewPort), nil},
			{"GET", "/v1/pools/apool", nil},
			{"DELETE", "/v1/pools/apool", nil},
			{"GET", "/v1/batches/" + batch, nil},
			{"DELETE", "/v1/batches/" + batch, nil},
			{"GET", "/v1/tenants/" + ta, nil},
			{"GET", "/v1/tenants/" + ta + "/keys", nil},
		} {
			t.Run(c.method+" "+c.path, func(t *testing.T) {
				r := b.do(c.method, c.path, c.body)
				if r.Status != 404 {
					t.Fatalf("status %d, want 404: %s", r.Status, r.Body)
				}
			})
		}
		if r := b.do("GET", "/v1/sandboxes", nil); len(r.JSON(t)["items"].([]any)) != 0 {
			t.Fatalf("tenant B lists A's sandboxes: %s", r.Body)
		}
		if r := a.do("GET", "/v1/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("A lost its own sandbox: %d", r.Status)
		}
	})

	t.Run("roles", func(t *testing.T) {
		expectError(t, viewer.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"true"}}), 403, "POLICY::DENIED")
		if r := viewer.do("GET", "/v1/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("viewer get: %d", r.Status)
		}
		expectError(t, viewer.do("DELETE", "/v1/sandboxes/"+id, nil), 403, "POLICY::DENIED")
		expectError(t, viewer.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil), 403, "POLICY::DENIED")
		expectError(t, a.do("POST", "/v1/tenants/"+ta+"/keys", map[string]string{"role": "viewer"}), 403, "POLICY::DENIED")
		expectError(t, a.do("POST", "/v1/tenants", map[string]string{"name": "nope"}), 403, "POLICY::DENIED")
		tadmin := admin.asKey(aAdminKey)
		if r := tadmin.do("POST", "/v1/tenants/"+ta+"/keys", map[string]string{"role": "viewer"}); r.Status != 201 {
			t.Fatalf("tenant-admin issues a viewer key: %d %s", r.Status, r.Body)
		}
		expectError(t, tadmin.do("POST", "/v1/tenants/"+ta+"/keys", map[string]string{"role": "admin"}), 403, "POLICY::ROLE_ESCALATION")
	})

	t.Run("a revoked key stops working at once", func(t *testing.T) {
		kid, key := admin.issueKey(ta, "member")
		k := admin.asKey(key)
		if r := k.do("GET", "/v1/sandboxes", nil); r.Status != 200 {
			t.Fatalf("fresh key: %d", r.Status)
		}
		if r := admin.do("DELETE", "/v1/tenants/"+ta+"/keys/"+kid, nil); r.Status != 204 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		expectError(t, k.do("GET", "/v1/sandboxes", nil), 401, "INVALID_API_KEY")
		if r := admin.do("GET", "/v1/tenants/"+ta+"/keys", nil); strings.Contains(string(r.Body), kid) || strings.Contains(string(r.Body), `"key"`) {
			t.Fatalf("key list shows a revoked key or a secret: %s", r.Body)
		}
	})

	t.Run("decisions reach the audit stream", func(t *testing.T) {
		waitFor(t, 5*time.Second, func() bool {
			out, _ := exec.Command("redis-cli", "-p", fmt.Sprint(redis.Port), "XRANGE", e.Prefix+"events:"+ta, "-", "+").Output()
			s := string(out)
			return strings.Contains(s, `"type":"policy.denied"`) && strings.Contains(s, `"decisionId"`) && strings.Contains(s, `"inputHash"`)
		}, "policy.denied with decision id and input hash")
	})
	a.do("DELETE", "/v1/batches/"+batch, nil)
	a.do("DELETE", "/v1/pools/apool", nil)
	a.do("DELETE", "/v1/sandboxes/"+id, nil)
}

// TestQuotasAcrossGateways: the concurrency quota and the create rate hold when two
// gateways share one Redis.
func TestQuotasAcrossGateways(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis)
	g1 := e.startGateway()
	g2 := e.startGateway()
	tc := g1.createTenant("capped", map[string]any{"maxConcurrent": 3, "maxTimeoutSeconds": 3600, "allowedImages": []string{"sandgate/base:*"}})
	_, key := g1.issueKey(tc, "member")
	c1, c2 := g1.asKey(key), g2.asKey(key)
	expectError(t, c1.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "sandgate/code-interpreter:0.1.0"}, "entrypoint": []string{"true"}, "timeout": 60}), 403, "ADMISSION::IMAGE_NOT_ALLOWED")
	expectError(t, c1.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"true"}}), 400, "QUOTA::TIMEOUT")

	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		g := c1
		if i%2 == 1 {
			g = c2
		}
		wg.Add(1)
		go func(g *gateway) {
			defer wg.Done()
			r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600})
			mu.Lock()
			codes[r.Status]++
			mu.Unlock()
			if r.Status != 202 && !strings.Contains(string(r.Body), "QUOTA::CONCURRENT_SANDBOXES") {
				t.Errorf("unexpected answer %d %s", r.Status, r.Body)
			}
		}(g)
	}
	wg.Wait()
	if codes[202] != 3 || codes[429] != 3 {
		t.Fatalf("answers %v, want 3×202 and 3×429", codes)
	}
	r := c1.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"true"}, "timeout": 600})
	if m := r.JSON(t); r.Status != 429 || !strings.Contains(m["message"].(string), "3") {
		t.Fatalf("quota answer should name limit and usage: %d %s", r.Status, r.Body)
	}

	// The create rate: 2 tokens, refilled at 1 per 100 s, shared by both gateways.
	tr := g1.createTenant("rated", map[string]any{"createRate": 0.01, "createBurst": 2})
	_, rkey := g1.issueKey(tr, "member")
	r1, r2 := g1.asKey(rkey), g2.asKey(rkey)
	var got []int
	for i, g := range []*gateway{r1, r2, r1, r2} {
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
		got = append(got, r.Status)
		if i >= 2 {
			expectError(t, r, 429, "QUOTA::CREATE_RATE")
		}
	}
	if got[0] != 202 || got[1] != 202 {
		t.Fatalf("first two creates: %v", got)
	}
}

// TestOperatorPolicyHotReload: an operator's Rego file that forbids an image takes effect
// without a restart; a broken file is refused and the previous policy keeps working.
func TestOperatorPolicyHotReload(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, startRedis(t), "SANDGATE_POLICY_DIR="+dir)
	g := e.startGateway()
	body := map[string]any{"image": map[string]any{"uri": "sandgate/code-interpreter:0.1.0"}, "entrypoint": []string{"tail", "-f", "/dev/null"}}
	id := g.createSandbox(body)
	g.do("DELETE", "/v1/sandboxes/"+id, nil)

	rule := `package sandgate.admission

deny contains {"code": "OPS::IMAGE_FORBIDDEN", "message": "the code interpreter image is switched off on this platform"} if {
	startswith(input.request.image, "sandgate/code-interpreter:")
}
`
	if err := os.WriteFile(filepath.Join(dir, "forbid.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		r := g.do("POST", "/v1/sandboxes", body)
		if r.Status == 202 {
			var m struct{ ID string }
			json.Unmarshal(r.Body, &m)
			g.do("DELETE", "/v1/sandboxes/"+m.ID, nil)
		}
		return r.Status == 403 && strings.Contains(string(r.Body), "OPS::IMAGE_FORBIDDEN")
	}, "the operator's rule to take effect")

	if err := os.WriteFile(filepath.Join(dir, "broken.rego"), []byte("package sandgate.admission\n\ndeny contains x if {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The gateway says when it has tried the broken file and refused it: no guess of how long that takes.
	waitFor(t, 30*time.Second, func() bool {
		logs := g.proc.Logs()
		return strings.Contains(logs, "policy refused") && strings.Contains(logs, "broken.rego")
	}, "the broken policy file to be refused")
	expectError(t, g.do("POST", "/v1/sandboxes", body), 403, "OPS::IMAGE_FORBIDDEN")
	other := g.createSandbox(map[string]any{})
	g.do("DELETE", "/v1/sandboxes/"+other, nil)
}

// TestCreateWithoutTimeout: a sandbox created with timeout null (or none) never
// expires and cannot be renewed; a gateway with SANDGATE_REQUIRE_TIMEOUT=on refuses such
// a create with a 400 naming the allowed range, except for a tenant whose quota allows
// manual cleanup.
func TestCreateWithoutTimeout(t *testing.T) {
	e := newEnv(t, startRedis(t))
	expires := func(g *gateway, id string) (string, bool) {
		s, ok := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["expiresAt"].(string)
		return s, ok
	}
	remove := func(g *gateway, id string) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d", r.Status)
		}
	}
	t.Run("null never expires", func(t *testing.T) {
		g := e.startGateway()
		for _, body := range []map[string]any{{"timeout": nil}, {}} {
			id := g.createSandbox(body)
			if exp, ok := expires(g, id); ok {
				t.Fatalf("a sandbox created with %v expires at %s", body, exp)
			}
			expectError(t, g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]any{"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}), 409, "SANDBOX::INVALID_EXPIRATION")
			remove(g, id)
		}
	})
	t.Run("a gateway that requires a timeout", func(t *testing.T) {
		g := e.startGateway("SANDGATE_REQUIRE_TIMEOUT=on", "SANDGATE_MAX_TIMEOUT=2h")
		r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}})
		expectError(t, r, 400, "SANDBOX::INVALID_EXPIRATION")
		if msg, _ := r.JSON(t)["message"].(string); !strings.Contains(msg, "7200") {
			t.Errorf("message %q does not name the allowed range", msg)
		}
		tenant := g.createTenant("manual", map[string]any{"allowManualCleanup": true})
		_, key := g.issueKey(tenant, "member")
		m := g.asKey(key)
		id := m.createSandbox(map[string]any{})
		if exp, ok := expires(m, id); ok {
			t.Fatalf("manual cleanup allowed, yet the sandbox expires at %s", exp)
		}
		remove(m, id)
	})
}
