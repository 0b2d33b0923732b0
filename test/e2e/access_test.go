package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPublicAccessKeepsPlatformPorts: extensions["access.public"] opens a sandbox's
// workload ports to anyone, never its agent (44772, commands as root) or its egress
// enforcer (18080, the egress policy); and creating a public sandbox is a tenant-admin's
// decision (Rego action sandbox.publish), not a member's.
func TestPublicAccessKeepsPlatformPorts(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	tenant := admin.createTenant("publishers", nil)
	_, memberKey := admin.issueKey(tenant, "member")
	_, tadminKey := admin.issueKey(tenant, "tenant-admin")
	member, tadmin := admin.asKey(memberKey), admin.asKey(tadminKey)
	public := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"},
		"extensions": map[string]string{"access.public": "true"}}

	t.Run("a member may not create a public sandbox", func(t *testing.T) {
		expectError(t, member.do("POST", "/v1/sandboxes", public), 403, "POLICY::DENIED")
		if left := e.containers(); len(left) != 0 {
			t.Fatalf("the refused create left containers: %v", left)
		}
	})

	id := tadmin.createSandbox(public)
	startPreviewServer(t, tadmin, id)

	t.Run("the workload port answers anyone", func(t *testing.T) {
		resp := admin.raw("GET", "", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", id, previewPort), nil, nil)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("public workload port: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("the agent and the enforcer answer no one without a credential", func(t *testing.T) {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/sandboxes/%s/proxy/44772/ping", ""},
			{"POST", "/sandboxes/%s/proxy/44772/command", `{"command": "id"}`},
			{"GET", "/v1/sandboxes/%s/proxy/44772/files/info?path=/etc/hostname", ""},
			{"GET", "/sandboxes/%s/proxy/18080/policy", ""},
			{"PATCH", "/sandboxes/%s/proxy/18080/policy", `[{"action": "allow", "target": "*"}]`},
			{"PUT", "/sandboxes/%s/proxy/18080/policy", `{"defaultAction": "allow"}`},
		} {
			var body *strings.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			} else {
				body = strings.NewReader("")
			}
			resp := admin.raw(c.method, "", fmt.Sprintf(c.path, id), body, map[string]string{"Content-Type": "application/json"})
			if text := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(text, "MISSING_API_KEY") {
				t.Errorf("anonymous %s %s: %d %s, want 401 MISSING_API_KEY", c.method, c.path, resp.StatusCode, text)
			}
		}
		// Nothing changed: the policy is still the platform's default.
		resp := tadmin.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/18080/policy", id), nil)
		if strings.Contains(string(resp.Body), `"defaultAction":"allow"`) {
			t.Fatalf("an anonymous caller changed the egress policy: %s", resp.Body)
		}
	})
	t.Run("the owner still reaches the agent with its key", func(t *testing.T) {
		if r := tadmin.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/44772/ping", id), nil); r.Status != 200 {
			t.Fatalf("owner ping: %d %s", r.Status, r.Body)
		}
	})
}

// TestProxyPortsAreCanonical: a port is written one way only. "018080" once reached the
// enforcer while skipping the Rego egress check written for "18080"; every other
// spelling (sign, spaces, leading zeros) and escaped id or fixed segments are a 400, in
// path mode, host mode and the endpoints route.
func TestProxyPortsAreCanonical(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway("SANDGATE_PREVIEW_DOMAIN=preview.test")
	id := g.createSandbox(map[string]any{})
	before := string(g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/18080/policy", id), nil).Body)

	t.Run("path mode", func(t *testing.T) {
		escID := "%" + fmt.Sprintf("%02x", id[0]) + id[1:]
		for _, c := range []struct{ method, path string }{
			{"PATCH", "/sandboxes/" + id + "/proxy/018080/policy"},
			{"PUT", "/v1/sandboxes/" + id + "/proxy/0018080/policy"},
			{"GET", "/sandboxes/" + id + "/proxy/+44772/ping"},
			{"GET", "/sandboxes/" + id + "/proxy/%2044772/ping"},
			{"GET", "/sandboxes/" + id + "/proxy/44772%20/ping"},
			{"GET", "/sandboxes/" + id + "/proxy/044772/ping"},
			{"GET", "/sandboxes/" + id + "/proxy/4477%32/ping"},
			{"GET", "/sandboxes/" + escID + "/proxy/44772/ping"},
			{"GET", "/v1/sandboxes/" + escID + "/proxy/44772/ping"},
			{"GET", "/sandboxes/" + id + "/%70roxy/44772/ping"},
		} {
			r := g.do(c.method, c.path, `[{"action": "allow", "target": "*"}]`)
			if r.Status != 400 || !strings.Contains(string(r.Body), "SANDBOX::INVALID_PARAMETER") {
				t.Errorf("%s %s: %d %s, want 400 SANDBOX::INVALID_PARAMETER", c.method, c.path, r.Status, r.Body)
			}
		}
		if after := string(g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/18080/policy", id), nil).Body); after != before {
			t.Fatalf("a non-canonical port changed the egress policy:\nbefore %s\nafter  %s", before, after)
		}
		if r := g.do("GET", "/sandboxes/"+id+"/proxy/44772/ping", nil); r.Status != 200 {
			t.Fatalf("the canonical path: %d %s", r.Status, r.Body)
		}
	})
	t.Run("endpoints route", func(t *testing.T) {
		for _, p := range []string{"044772", "+44772", "%2044772", "18080%20", "0"} {
			expectError(t, g.do("GET", "/v1/sandboxes/"+id+"/endpoints/"+p, nil), 400, "SANDBOX::INVALID_PARAMETER")
		}
	})
	t.Run("host mode", func(t *testing.T) {
		for _, port := range []string{"08000", "+8000", "008000"} {
			resp := g.raw("GET", id+"-"+port+".preview.test", "/", nil, map[string]string{"OPEN-SANDBOX-API-KEY": g.APIKey})
			if text := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(text, "SANDBOX::INVALID_PARAMETER") {
				t.Errorf("host %s-%s: %d %s, want 400", id, port, resp.StatusCode, text)
			}
		}
	})
}

// TestAccessHeaderRotationAndRevocation: the per-sandbox access header an endpoint hands
// out (what the SDKs fetch once and send on every call) dies when the sandbox's access is
// rotated and when the key that fetched it is revoked, while values fetched by other
// live keys keep working.
func TestAccessHeaderRotationAndRevocation(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	tenant := admin.createTenant("rotators", nil)
	k1ID, k1 := admin.issueKey(tenant, "member")
	_, k2 := admin.issueKey(tenant, "member")
	_, kv := admin.issueKey(tenant, "viewer")
	g1, g2, viewer := admin.asKey(k1), admin.asKey(k2), admin.asKey(kv)
	id := g1.createSandbox(map[string]any{})

	ping := func(a *agent) (int, string) {
		resp := a.request("GET", "/ping", nil, "")
		return resp.StatusCode, readAll(t, resp)
	}
	a1, a2 := g1.agent(id), g2.agent(id)
	for name, a := range map[string]*agent{"k1's": a1, "k2's": a2} {
		if st, body := ping(a); st != 200 {
			t.Fatalf("%s access header: %d %s", name, st, body)
		}
	}

	t.Run("a viewer may not rotate", func(t *testing.T) {
		expectError(t, viewer.do("POST", "/v1/sandboxes/"+id+"/access/rotate", nil), 403, "POLICY::DENIED")
		if st, body := ping(a2); st != 200 {
			t.Fatalf("a refused rotation changed the access: %d %s", st, body)
		}
	})
	t.Run("another tenant's key gets 404", func(t *testing.T) {
		other := admin.createTenant("others", nil)
		_, ko := admin.issueKey(other, "tenant-admin")
		expectError(t, admin.asKey(ko).do("POST", "/v1/sandboxes/"+id+"/access/rotate", nil), 404, "SANDBOX::NOT_FOUND")
	})
	t.Run("revoking the key kills the values it fetched", func(t *testing.T) {
		if r := admin.do("DELETE", "/v1/tenants/"+tenant+"/keys/"+k1ID, nil); r.Status != 204 {
			t.Fatalf("revoke: %d %s", r.Status, r.Body)
		}
		if st, body := ping(a1); st != 403 || !strings.Contains(body, "ACCESS::TOKEN_REVOKED") {
			t.Fatalf("the revoked key's access header: %d %s, want 403 ACCESS::TOKEN_REVOKED", st, body)
		}
		if st, body := ping(a2); st != 200 {
			t.Fatalf("a live key's access header after another key's revocation: %d %s", st, body)
		}
	})
	t.Run("rotation kills every value at once", func(t *testing.T) {
		if r := g2.do("POST", "/v1/sandboxes/"+id+"/access/rotate", nil); r.Status != 204 {
			t.Fatalf("rotate: %d %s", r.Status, r.Body)
		}
		if st, body := ping(a2); st != 403 {
			t.Fatalf("the access header after rotation: %d %s, want 403", st, body)
		}
		fresh := g2.agent(id)
		if st, body := ping(fresh); st != 200 {
			t.Fatalf("a header fetched after rotation: %d %s", st, body)
		}
		if fresh.headers["X-EXECD-ACCESS-TOKEN"] == a2.headers["X-EXECD-ACCESS-TOKEN"] {
			t.Fatal("rotation handed out the same header value")
		}
	})
	t.Run("a forged value is refused", func(t *testing.T) {
		forged := &agent{t: t, base: a2.base, client: a2.client, headers: map[string]string{"X-EXECD-ACCESS-TOKEN": "sga1." + k1ID + ".AAAA"}}
		if st, body := ping(forged); st != 403 {
			t.Fatalf("forged value: %d %s", st, body)
		}
	})
}

// TestAccessHeaderKeyReadOnce: a proxied request with an access header does not read
// its key's hash from Redis each time (it is kept per gateway and dropped on
// revocation), and a revocation on one gateway still kills the values on another one
// that has the key's hash in memory.
func TestAccessHeaderKeyReadOnce(t *testing.T) {
	rs := startRedis(t)
	e := newEnv(t, rs)
	admin := e.startGateway()
	other := e.startGateway()
	tenant := admin.createTenant("readonce", nil)
	keyID, key := admin.issueKey(tenant, "member")
	g := admin.asKey(key)
	id := g.createSandbox(map[string]any{})
	a := g.agent(id)
	onOther := &agent{t: t, base: strings.Replace(a.base, admin.Addr, other.Addr, 1), client: a.client, headers: a.headers}
	ping := func(a *agent) (int, string) {
		resp := a.request("GET", "/ping", nil, "")
		return resp.StatusCode, readAll(t, resp)
	}
	hgets := func() int {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(rs.Port), "INFO", "commandstats").Output()
		if err != nil {
			t.Fatalf("redis-cli INFO: %v", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hget:calls="); ok {
				n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
				return n
			}
		}
		return 0
	}
	for _, ag := range []*agent{a, onOther} {
		if st, body := ping(ag); st != 200 {
			t.Fatalf("access header: %d %s", st, body)
		}
	}
	const calls = 50
	before := hgets()
	for i := 0; i < calls; i++ {
		if st, body := ping(a); st != 200 {
			t.Fatalf("access header, call %d: %d %s", i, st, body)
		}
	}
	// Each call read the key's hash before; now at most about one read a second (and
	// the gateway's own background reads, which use other commands).
	if n := hgets() - before; n >= calls/2 {
		t.Fatalf("%d proxied calls made %d HGETs: the key's hash is read per request", calls, n)
	}
	if r := admin.do("DELETE", "/v1/tenants/"+tenant+"/keys/"+keyID, nil); r.Status != 204 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if st, body := ping(a); st != 403 || !strings.Contains(body, "ACCESS::TOKEN_REVOKED") {
		t.Fatalf("the revoked key's header on the revoking gateway: %d %s, want 403 ACCESS::TOKEN_REVOKED", st, body)
	}
	waitFor(t, 30*time.Second, func() bool {
		st, body := ping(onOther)
		return st == 403 && strings.Contains(body, "ACCESS::TOKEN_REVOKED")
	}, "the revoked key's header refused on the other gateway")
}
