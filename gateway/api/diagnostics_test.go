package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDiagnostics: GET /v1/sandboxes/{id}/diagnostics/logs and …/events answer
// OpenSandbox's diagnostics descriptor (diagnostic-api.yml) with the sandbox's output
// and its lifecycle events inline; a missing or unknown scope is a 400, another
// tenant's sandbox a 404, both with {code, message}.
func TestDiagnostics(t *testing.T) {
	srv := newTestAPI(t)
	admin := map[string]string{"OPEN-SANDBOX-API-KEY": "admin-key"}
	status, body := call(t, "POST", srv.URL+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "sandgate/base:test"}, "timeout": 600,
		"entrypoint": []string{"sh", "-c", "echo hello-diagnostics; echo to-stderr >&2; sleep 600"},
	}, admin)
	var created struct{ ID string }
	if json.Unmarshal(body, &created); status != http.StatusAccepted || created.ID == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	// A command through the proxy: an event of the sandbox that is not a lifecycle one.
	status, body = call(t, "GET", srv.URL+"/v1/sandboxes/"+created.ID+"/endpoints/44772", nil, admin)
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(body, &ep); status != 200 || err != nil {
		t.Fatalf("endpoint: %d %s", status, body)
	}
	_, path, _ := strings.Cut(ep.Endpoint, "/")
	if status, body = call(t, "POST", srv.URL+"/"+path+"/command", map[string]string{"command": "echo from a command"}, ep.Headers); status != 200 {
		t.Fatalf("command: %d %s", status, body)
	}
	type descriptor struct {
		SandboxID     string   `json:"sandboxId"`
		Kind          string   `json:"kind"`
		Scope         string   `json:"scope"`
		Delivery      string   `json:"delivery"`
		ContentType   string   `json:"contentType"`
		Content       *string  `json:"content"`
		ContentLength int      `json:"contentLength"`
		Truncated     *bool    `json:"truncated"`
		Warnings      []string `json:"warnings"`
	}
	get := func(t *testing.T, path string, headers map[string]string) (int, descriptor, []byte) {
		t.Helper()
		status, body := call(t, "GET", srv.URL+path, nil, headers)
		var d descriptor
		if status == http.StatusOK {
			if err := json.Unmarshal(body, &d); err != nil {
				t.Fatalf("%s: %v: %s", path, err, body)
			}
		}
		return status, d, body
	}
	base := "/v1/sandboxes/" + created.ID + "/diagnostics/"
	tests := []struct {
		name, path, kind, scope string
		want, notWant           []string
	}{
		{"container logs", base + "logs?scope=container", "logs", "container", []string{"hello-diagnostics", "to-stderr"}, nil},
		{"all logs", base + "logs?scope=all", "logs", "all", []string{"hello-diagnostics"}, nil},
		{"lifecycle events", base + "events?scope=lifecycle", "events", "lifecycle", []string{"sandbox.created image=sandgate/base:test"}, []string{"command.started"}},
		{"runtime events", base + "events?scope=runtime", "events", "runtime", []string{"sandbox.created"}, []string{"command.started"}},
		{"all events", base + "events?scope=all", "events", "all", []string{"sandbox.created", `command.started`, `"echo from a command"`}, nil},
		{"without the /v1 prefix", strings.TrimPrefix(base, "/v1") + "logs?scope=container", "logs", "container", []string{"hello-diagnostics"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d descriptor
			var body []byte
			ok := false
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				var status int
				status, d, body = get(t, tt.path, admin)
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, body)
				}
				ok = d.Content != nil
				for _, w := range tt.want {
					ok = ok && strings.Contains(*d.Content, w)
				}
				if ok {
					break
				}
			}
			if !ok {
				t.Fatalf("content does not hold %q: %s", tt.want, body)
			}
			if d.SandboxID != created.ID || d.Kind != tt.kind || d.Scope != tt.scope || d.Delivery != "inline" ||
				d.ContentType != "text/plain; charset=utf-8" || d.Truncated == nil || d.ContentLength != len(*d.Content) {
				t.Fatalf("descriptor %s", body)
			}
			for _, w := range tt.notWant {
				if strings.Contains(*d.Content, w) {
					t.Fatalf("content holds %q: %s", w, body)
				}
			}
			if tt.scope == "runtime" && len(d.Warnings) == 0 {
				t.Fatalf("runtime events without the warning that they are the gateway's: %s", body)
			}
			if strings.Contains(string(body), "contentUrl") || strings.Contains(string(body), "expiresAt") {
				t.Fatalf("an inline descriptor names a URL: %s", body)
			}
		})
	}

	status, body = call(t, "POST", srv.URL+"/v1/tenants", map[string]any{"name": "other"}, admin)
	var tenant struct{ ID string }
	if json.Unmarshal(body, &tenant); status != http.StatusCreated || tenant.ID == "" {
		t.Fatalf("tenant: %d %s", status, body)
	}
	status, body = call(t, "POST", srv.URL+"/v1/tenants/"+tenant.ID+"/keys", map[string]any{"role": "tenant-admin"}, admin)
	var key struct{ Key string }
	if json.Unmarshal(body, &key); status != http.StatusCreated || key.Key == "" {
		t.Fatalf("key: %d %s", status, body)
	}
	other := map[string]string{"OPEN-SANDBOX-API-KEY": key.Key}
	refusals := []struct {
		name, path string
		headers    map[string]string
		status     int
		code       string
	}{
		{"logs without scope", base + "logs", admin, 400, "SANDBOX::INVALID_PARAMETER"},
		{"events without scope", base + "events", admin, 400, "SANDBOX::INVALID_PARAMETER"},
		{"unknown log scope", base + "logs?scope=network", admin, 400, "SANDBOX::INVALID_PARAMETER"},
		{"unknown event scope", base + "events?scope=container", admin, 400, "SANDBOX::INVALID_PARAMETER"},
		{"another tenant's logs", base + "logs?scope=container", other, 404, "SANDBOX::NOT_FOUND"},
		{"another tenant's events", base + "events?scope=all", other, 404, "SANDBOX::NOT_FOUND"},
		{"an unknown sandbox", "/v1/sandboxes/00000000-0000-4000-8000-000000000000/diagnostics/logs?scope=container", admin, 404, "SANDBOX::NOT_FOUND"},
		{"no key", base + "logs?scope=container", nil, 401, "MISSING_API_KEY"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, "GET", srv.URL+tt.path, nil, tt.headers)
			var e struct{ Code, Message string }
			if json.Unmarshal(body, &e); status != tt.status || e.Code != tt.code || e.Message == "" {
				t.Fatalf("%d %s, want %d %s with a message", status, body, tt.status, tt.code)
			}
			if strings.Contains(string(body), "hello-diagnostics") {
				t.Fatalf("a refusal shows the sandbox's output: %s", body)
			}
		})
	}

	// Within a tenant, the output is the workload's, read as its commands' are
	// (sandbox.proxy, which a viewer lacks); its events are the sandbox's record
	// (sandbox.get, which a viewer has).
	status, body = call(t, "POST", srv.URL+"/v1/sandboxes", map[string]any{
		"image": map[string]string{"uri": "sandgate/base:test"}, "timeout": 600, "entrypoint": []string{"sleep", "600"},
	}, other)
	var own struct{ ID string }
	if json.Unmarshal(body, &own); status != http.StatusAccepted || own.ID == "" {
		t.Fatalf("create as the other tenant: %d %s", status, body)
	}
	status, body = call(t, "POST", srv.URL+"/v1/tenants/"+tenant.ID+"/keys", map[string]any{"role": "viewer"}, admin)
	var viewerKey struct{ Key string }
	if json.Unmarshal(body, &viewerKey); status != http.StatusCreated || viewerKey.Key == "" {
		t.Fatalf("viewer key: %d %s", status, body)
	}
	viewer := map[string]string{"OPEN-SANDBOX-API-KEY": viewerKey.Key}
	ownBase := "/v1/sandboxes/" + own.ID + "/diagnostics/"
	if status, body = call(t, "GET", srv.URL+ownBase+"logs?scope=container", nil, viewer); status != http.StatusForbidden {
		t.Fatalf("a viewer reads the output: %d %s", status, body)
	}
	if status, body = call(t, "GET", srv.URL+ownBase+"events?scope=lifecycle", nil, viewer); status != http.StatusOK {
		t.Fatalf("a viewer's events: %d %s", status, body)
	}
	if status, body = call(t, "GET", srv.URL+ownBase+"logs?scope=container", nil, other); status != http.StatusOK {
		t.Fatalf("the tenant-admin's logs: %d %s", status, body)
	}
	if status, body = call(t, "DELETE", srv.URL+"/v1/sandboxes/"+own.ID, nil, other); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, body = call(t, "DELETE", srv.URL+"/v1/sandboxes/"+created.ID, nil, admin); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
}
