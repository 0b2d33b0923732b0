package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBadInput sends each kind of bad request and checks the status, the stable code and
// that no container is left behind.
func TestBadInput(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	img := map[string]any{"uri": baseImage}
	tail := []string{"tail", "-f", "/dev/null"}
	tests := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"malformed JSON", `{"image": {"uri": `, 400, "SANDBOX::INVALID_PARAMETER"},
		{"empty body", ``, 400, "SANDBOX::INVALID_PARAMETER"},
		{"field of the wrong type", map[string]any{"image": img, "entrypoint": "tail -f /dev/null"}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"timeout of the wrong type", map[string]any{"image": img, "entrypoint": tail, "timeout": "soon"}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"missing image", map[string]any{"entrypoint": tail}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"missing entrypoint", map[string]any{"image": img}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"image not on this host", map[string]any{"image": map[string]any{"uri": "sandgate/does-not-exist:1"}, "entrypoint": tail}, 400, "SANDBOX::IMAGE_NOT_FOUND"},
		{"entrypoint that exits at once", map[string]any{"image": img, "entrypoint": []string{"sh", "-c", "echo bye; exit 7"}}, 422, "SANDBOX::START_FAILED"},
		{"entrypoint that does not exist", map[string]any{"image": img, "entrypoint": []string{"/no/such/binary"}}, 422, "SANDBOX::START_FAILED"},
		{"bad metadata key", map[string]any{"image": img, "entrypoint": tail, "metadata": map[string]string{"bad key!": "x"}}, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{"bad metadata value", map[string]any{"image": img, "entrypoint": tail, "metadata": map[string]string{"k": strings.Repeat("v", 64)}}, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{"reserved metadata key", map[string]any{"image": img, "entrypoint": tail, "metadata": map[string]string{"sandgate.io/pool": "x"}}, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{"timeout below the minimum", map[string]any{"image": img, "entrypoint": tail, "timeout": 0}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"bad cpu", map[string]any{"image": img, "entrypoint": tail, "resourceLimits": map[string]string{"cpu": "lots"}}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"bad memory", map[string]any{"image": img, "entrypoint": tail, "resourceLimits": map[string]string{"memory": "12 parsecs"}}, 400, "SANDBOX::INVALID_PARAMETER"},
		// Each of these once answered 500 or was accepted.
		{"invalid image reference", map[string]any{"image": map[string]any{"uri": "Not A/Valid::Image"}, "entrypoint": tail}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"image reference with a NUL", map[string]any{"image": map[string]any{"uri": "sandgate/base\x00:1"}, "entrypoint": tail}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"NUL in an env value", map[string]any{"image": img, "entrypoint": tail, "env": map[string]string{"A": "x\x00y"}}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"NUL in the entrypoint", map[string]any{"image": img, "entrypoint": []string{"tail", "-f", "/dev/null\x00"}}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"cpu above the host's", map[string]any{"image": img, "entrypoint": tail, "resourceLimits": map[string]string{"cpu": "1000"}}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"timeout that overflows a duration", map[string]any{"image": img, "entrypoint": tail, "timeout": int64(18446747674)}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"negative timeout", map[string]any{"image": img, "entrypoint": tail, "timeout": -5}, 400, "SANDBOX::INVALID_PARAMETER"},
		{"5000 metadata keys", map[string]any{"image": img, "entrypoint": tail, "metadata": manyLabels(5000)}, 400, "SANDBOX::INVALID_METADATA_LABEL"},
		{"credentialProxy enabled without a networkPolicy", map[string]any{"image": img, "entrypoint": tail, "credentialProxy": map[string]any{"enabled": true}}, 400, "SANDBOX::CREDENTIAL_PROXY_REQUIRES_NETWORK_POLICY"},
		{"credentialProxy not an object", map[string]any{"image": img, "entrypoint": tail, "credentialProxy": "yes"}, 400, "SANDBOX::INVALID_PARAMETER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := g.do("POST", "/v1/sandboxes", tt.body)
			expectError(t, r, tt.status, tt.code)
			if r.Header.Get("X-Request-ID") == "" {
				t.Errorf("error without X-Request-ID")
			}
		})
	}
	if left := e.containers(); len(left) != 0 {
		t.Fatalf("bad requests left containers behind: %v", left)
	}
	if r := g.do("GET", "/v1/sandboxes", nil); len(r.JSON(t)["items"].([]any)) != 0 {
		t.Fatalf("bad requests left records behind: %s", r.Body)
	}

	t.Run("unknown sandbox id", func(t *testing.T) {
		for _, p := range []string{"/v1/sandboxes/7d4e8c1a-0000-4000-8000-000000000000", "/v1/sandboxes/not-a-uuid", "/v1/sandboxes/7d4e8c1a-0000-4000-8000-000000000000/endpoints/44772"} {
			expectError(t, g.do("GET", p, nil), 404, "SANDBOX::NOT_FOUND")
		}
		expectError(t, g.do("GET", "/sandboxes/7d4e8c1a-0000-4000-8000-000000000000/proxy/44772/ping", nil), 404, "SANDBOX::NOT_FOUND")
	})
	t.Run("keys", func(t *testing.T) {
		expectError(t, g.do("GET", "/v1/sandboxes", nil, "OPEN-SANDBOX-API-KEY", ""), 401, "MISSING_API_KEY")
		expectError(t, g.do("GET", "/v1/sandboxes", nil, "OPEN-SANDBOX-API-KEY", "wrong"), 401, "INVALID_API_KEY")
		for _, hdr := range [][2]string{{"X-API-Key", g.APIKey}, {"Authorization", "Bearer " + g.APIKey}} {
			if r := g.do("GET", "/v1/sandboxes", nil, "OPEN-SANDBOX-API-KEY", "", hdr[0], hdr[1]); r.Status != 200 {
				t.Errorf("key in %s: status %d", hdr[0], r.Status)
			}
		}
	})
	t.Run("request id echoed", func(t *testing.T) {
		r := g.do("GET", "/v1/sandboxes", nil, "X-Request-ID", "trace-123")
		if r.Header.Get("X-Request-ID") != "trace-123" {
			t.Fatalf("X-Request-ID = %q", r.Header.Get("X-Request-ID"))
		}
	})
	t.Run("unknown route and method", func(t *testing.T) {
		expectError(t, g.do("GET", "/v1/nothing-here", nil), 404, "ROUTE_NOT_FOUND")
		expectError(t, g.do("PUT", "/v1/sandboxes", nil), 405, "METHOD_NOT_ALLOWED")
	})
	t.Run("openapi and health", func(t *testing.T) {
		if r := g.do("GET", "/v1/openapi.json", nil, "OPEN-SANDBOX-API-KEY", ""); r.Status != 200 || r.JSON(t)["openapi"] != "3.1.0" {
			t.Fatalf("openapi: %d", r.Status)
		}
		if r := g.do("GET", "/health", nil, "OPEN-SANDBOX-API-KEY", ""); r.Status != 200 || r.JSON(t)["status"] != "healthy" {
			t.Fatalf("health: %d %s", r.Status, r.Body)
		}
	})
	t.Run("metadata patch beyond the bound", func(t *testing.T) {
		id := g.createSandbox(map[string]any{"metadata": map[string]string{"team": "a"}})
		patch := map[string]any{}
		for k, v := range manyLabels(64) {
			patch[k] = v
		}
		expectError(t, g.do("PATCH", "/v1/sandboxes/"+id+"/metadata", patch), 400, "SANDBOX::INVALID_METADATA_LABEL")
		if md := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(t)["metadata"].(map[string]any); len(md) != 1 || md["team"] != "a" {
			t.Fatalf("a refused patch changed the metadata: %v", md)
		}
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d", r.Status)
		}
	})
}

// TestRedisOutage: with Redis gone the API answers 503 with a clear code, and recovers by
// itself when Redis is back on the same address.
func TestRedisOutage(t *testing.T) {
	redis := startRedis(t)
	e := newEnv(t, redis)
	g := e.startGateway()
	if r := g.do("GET", "/v1/sandboxes", nil); r.Status != 200 {
		t.Fatalf("list: %d", r.Status)
	}
	redis.Stop()
	expectError(t, g.do("GET", "/v1/sandboxes", nil), http.StatusServiceUnavailable, "STORE::UNAVAILABLE")
	expectError(t, g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}), http.StatusServiceUnavailable, "STORE::UNAVAILABLE")
	if left := e.containers(); len(left) != 0 {
		t.Fatalf("create during the outage left containers: %v", left)
	}
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return g.do("GET", "/v1/sandboxes", nil).Status == 200 }, "the gateway to recover")
	id := g.createSandbox(map[string]any{})
	if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
		t.Fatalf("delete after recovery: %d", r.Status)
	}
}

// TestDockerUnreachable: a gateway pointed at a socket with no engine exits with a message
// naming that socket.
func TestDockerUnreachable(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	cmd := exec.Command(filepath.Join(binDir, "sandgate"), "run")
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "SANDGATE_LISTEN=127.0.0.1:0", "SANDGATE_ADMIN=off", "SANDGATE_API_KEY=k",
		"SANDGATE_DOCKER_HOST="+sock, "SANDGATE_AGENT_BINARY="+filepath.Join(binDir, "sandbox-agent"))
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("sandgate kept running without a Docker engine:\n%s", out)
	}
	if err == nil {
		t.Fatalf("sandgate exited 0 without a Docker engine:\n%s", out)
	}
	if !strings.Contains(string(out), sock) {
		t.Fatalf("the error does not name the socket %s:\n%s", sock, tail(string(out), 2000))
	}
}

// manyLabels returns n distinct valid metadata labels.
func manyLabels(n int) map[string]string {
	md := make(map[string]string, n)
	for i := 0; i < n; i++ {
		md[fmt.Sprintf("k%d", i)] = "v"
	}
	return md
}

// TestCredentialProxyRefused: credentialProxy {"enabled": true} is never silently
// ignored. Without a networkPolicy (the vault lives in the egress enforcer) it is refused
// with its own code wherever a sandbox is described (a create, a pool's template, a
// batch's template); a claim cannot turn it on for a pool whose template lacks it; a
// gateway with egress enforcement off refuses it even with a policy. {"enabled": false}
// and absent are fine. (That it works with a networkPolicy: TestCredentialVault and
// TestCredentialVaultPoolsAndBatches.)
func TestCredentialProxyRefused(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	on := map[string]any{"enabled": true}
	tmpl := func(cp any) map[string]any {
		m := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}
		if cp != nil {
			m["credentialProxy"] = cp
		}
		return m
	}
	capacity := map[string]int{"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 1}
	const code = "SANDBOX::CREDENTIAL_PROXY_REQUIRES_NETWORK_POLICY"
	t.Run("create", func(t *testing.T) {
		expectError(t, g.do("POST", "/v1/sandboxes", tmpl(on)), 400, code)
	})
	t.Run("pool template", func(t *testing.T) {
		expectError(t, g.do("POST", "/v1/pools", map[string]any{"name": "vault", "template": tmpl(on), "capacitySpec": capacity}), 400, code)
		expectError(t, g.do("GET", "/v1/pools/vault", nil), 404, "POOL::NOT_FOUND")
	})
	t.Run("batch template", func(t *testing.T) {
		expectError(t, g.do("POST", "/v1/batches", map[string]any{"count": 1, "template": tmpl(on)}), 400, code)
	})
	t.Run("pool claim", func(t *testing.T) {
		if r := g.do("POST", "/v1/pools", map[string]any{"name": "plain", "template": tmpl(nil), "capacitySpec": capacity}); r.Status != 201 {
			t.Fatalf("create pool: %d %s", r.Status, r.Body)
		}
		claim := map[string]any{"extensions": map[string]string{"poolRef": "plain"}, "credentialProxy": on}
		expectError(t, g.do("POST", "/v1/sandboxes", claim), 400, "SANDBOX::CREDENTIAL_PROXY_NOT_IN_POOL")
	})
	t.Run("egress enforcement off", func(t *testing.T) {
		off := newEnv(t, startRedis(t)).startGateway("SANDGATE_EGRESS=off")
		req := tmpl(on)
		req["networkPolicy"] = map[string]any{"defaultAction": "deny"}
		expectError(t, off.do("POST", "/v1/sandboxes", req), 400, "SANDBOX::CREDENTIAL_PROXY_UNSUPPORTED")
	})
	if left := e.containers(); len(left) != 0 {
		t.Fatalf("refused creates left containers: %v", left)
	}
	t.Run("disabled or absent is fine", func(t *testing.T) {
		for _, cp := range []any{map[string]any{"enabled": false}, nil} {
			id := g.createSandbox(tmpl(cp))
			if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
				t.Fatalf("delete: %d", r.Status)
			}
		}
	})
}

// TestMissingKeyNamesWhereToGetOne: OpenSandbox runs with api_key = "" for local
// development and its users send no key; sandgate always wants one, and its 401 says
// where it is (what `make run` prints and keeps in .sandgate/api-key).
func TestMissingKeyNamesWhereToGetOne(t *testing.T) {
	g := newEnv(t, startRedis(t)).startGateway()
	for _, path := range []string{"/v1/sandboxes", "/sandboxes", "/v1/pools"} {
		r := g.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "")
		expectError(t, r, 401, "MISSING_API_KEY")
		for _, hint := range []string{"make run", ".sandgate/api-key", "OPEN-SANDBOX-API-KEY"} {
			if !strings.Contains(r.JSON(t)["message"].(string), hint) {
				t.Errorf("GET %s without a key: the answer does not mention %q: %s", path, hint, r.Body)
			}
		}
	}
}
