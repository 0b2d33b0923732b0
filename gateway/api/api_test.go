package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/test/coredeps"
	"github.com/sandgate/sandgate/test/testenv"
)

// newTestAPI serves the whole API over a Service on a real redis-server and the
// in-process runtime (real agents on loopback addresses): the HTTP layer and the proxy
// tested without Docker or Caddy.
func newTestAPI(t *testing.T) *httptest.Server {
	t.Helper()
	srv, _ := startTestAPI(t, nil)
	return srv
}

// startTestAPI is newTestAPI with the HTTP layer's logger (nil: warnings to stderr), and
// the redis-server, for a test that takes it away.
func startTestAPI(t testing.TB, apiLog *slog.Logger) (*httptest.Server, *testenv.Redis) {
	t.Helper()
	d := coredeps.Start(t)
	svc := gateway.New(gateway.Config{}, d.Store, d.Runtime, d.Policy, d.Log)
	svc.SetAdminKey("admin-key")
	svc.Start(context.Background())
	t.Cleanup(svc.Stop)
	if apiLog == nil {
		apiLog = d.Log
	}
	srv := httptest.NewServer(New(svc, Options{Logger: apiLog}))
	t.Cleanup(srv.Close)
	return srv, d.Redis
}

func call(t *testing.T, method, url string, body any, headers map[string]string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		js, _ := json.Marshal(body)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAPIAgainstInProcessSandboxes: create over HTTP, get the agent's endpoint, run a
// command through the proxy with the access header; without it the proxy refuses;
// bad input is a 4xx with a code; delete.
func TestAPIAgainstInProcessSandboxes(t *testing.T) {
	srv := newTestAPI(t)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	status, body := call(t, "POST", srv.URL+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "sandgate/base:test"}, "entrypoint": []string{"sleep", "600"}, "timeout": 600,
	}, admin)
	if status != http.StatusAccepted && status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); err != nil || created.ID == "" {
		t.Fatalf("create answer %s", body)
	}
	status, body = call(t, "GET", srv.URL+"/v1/sandboxes/"+created.ID+"/endpoints/44772", nil, admin)
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(body, &ep); status != 200 || err != nil || len(ep.Headers) == 0 {
		t.Fatalf("endpoint: %d %s", status, body)
	}
	_, path, _ := strings.Cut(ep.Endpoint, "/")
	agent := srv.URL + "/" + path
	status, body = call(t, "POST", agent+"/command", map[string]string{"command": "echo hello-from-inprocess"}, ep.Headers)
	if status != 200 || !strings.Contains(string(body), "hello-from-inprocess") {
		t.Fatalf("command through the proxy: %d %s", status, body)
	}
	if status, body = call(t, "POST", agent+"/command", map[string]string{"command": "echo x"}, nil); status != http.StatusUnauthorized {
		t.Fatalf("command without credentials: %d %s", status, body)
	}
	status, body = call(t, "POST", srv.URL+"/v1/sandboxes", map[string]any{"entrypoint": []string{"sleep", "1"}}, admin)
	var e struct{ Code, Message string }
	if json.Unmarshal(body, &e); status != 400 || e.Code == "" {
		t.Fatalf("create without image: %d %s", status, body)
	}
	if status, body = call(t, "DELETE", srv.URL+"/v1/sandboxes/"+created.ID, nil, admin); status >= 300 {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, _ = call(t, "GET", srv.URL+"/v1/sandboxes/"+created.ID, nil, admin); status != 404 {
		t.Fatalf("get after delete: %d", status)
	}
}
