package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestDiagnosticsOnDocker: the diagnostics routes OpenSandbox's CLI reads (`osb
// diagnostics logs|events`) answer a real container's output and the sandbox's
// lifecycle events, and another tenant's key gets a 404.
func TestDiagnosticsOnDocker(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	id := g.createSandbox(map[string]any{
		"timeout":    600,
		"entrypoint": []string{"sh", "-c", "echo diagnostics-stdout; echo diagnostics-stderr >&2; exec tail -f /dev/null"},
	})
	t.Cleanup(func() { g.do("DELETE", "/v1/sandboxes/"+id, nil) })
	content := func(path string) map[string]any {
		t.Helper()
		r := g.do("GET", path, nil)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		return r.JSON(t)
	}
	var logs map[string]any
	waitFor(t, 20*time.Second, func() bool {
		logs = content("/v1/sandboxes/" + id + "/diagnostics/logs?scope=container")
		text, _ := logs["content"].(string)
		return strings.Contains(text, "diagnostics-stdout") && strings.Contains(text, "diagnostics-stderr")
	}, "the container's stdout and stderr in the diagnostic logs")
	if logs["kind"] != "logs" || logs["delivery"] != "inline" || logs["sandboxId"] != id || logs["truncated"] != false {
		t.Fatalf("logs descriptor: %v", logs)
	}
	events := content("/v1/sandboxes/" + id + "/diagnostics/events?scope=lifecycle")
	if text, _ := events["content"].(string); !strings.Contains(text, "sandbox.created") || events["kind"] != "events" {
		t.Fatalf("events descriptor: %v", events)
	}
	expectError(t, g.do("GET", "/v1/sandboxes/"+id+"/diagnostics/logs", nil), 400, "SANDBOX::INVALID_PARAMETER")

	tenant := g.createTenant("diag-other", nil)
	_, key := g.issueKey(tenant, "tenant-admin")
	other := g.asKey(key)
	for _, path := range []string{"/diagnostics/logs?scope=container", "/diagnostics/events?scope=all"} {
		r := other.do("GET", "/v1/sandboxes/"+id+path, nil)
		expectError(t, r, 404, "SANDBOX::NOT_FOUND")
		if strings.Contains(string(r.Body), "diagnostics-stdout") {
			t.Fatalf("another tenant reads the output: %s", r.Body)
		}
	}
}
