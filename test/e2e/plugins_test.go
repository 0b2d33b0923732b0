package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// examplePlugin reads a plugin built by `make plugins` (plugins/examples/build.sh).
func examplePlugin(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "plugins", "examples", name, name+".wasm"))
	if err != nil {
		t.Fatalf("example plugin %s is not built (run `make plugins`): %v", name, err)
	}
	return b
}

// misbehavingPlugin builds testdata/plugins/misbehave, whose fault (loop, oom, trap,
// badjson) its settings pick, so that the gateway's own events trigger it.
func misbehavingPlugin(t testing.TB) []byte {
	return buildPlugin(t, "./test/e2e/testdata/plugins/misbehave")
}

// buildPlugin compiles the plugin package pkg (a path from the repository's root) for
// wasip1 and answers the module.
func buildPlugin(t testing.TB, pkg string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg)+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin %s: %v\n%s", pkg, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putPlugin uploads a plugin the documented way: multipart parts "module" and "config".
// A nil module leaves the part out.
func (g *gateway) putPlugin(name string, module []byte, config string) response {
	g.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if module != nil {
		w, _ := mw.CreateFormFile("module", name+".wasm")
		w.Write(module)
	}
	w, _ := mw.CreateFormField("config")
	io.WriteString(w, config)
	mw.Close()
	return g.do("PUT", "/v1/plugins/"+name, body.Bytes(), "Content-Type", mw.FormDataContentType())
}

// pluginStatus is the part of GET /v1/plugins/{name} the tests read.
type pluginStatus struct {
	Name      string   `json:"name"`
	Version   string   `json:"version"`
	Hooks     []string `json:"hooks"`
	Loaded    bool     `json:"loaded"`
	LoadError string   `json:"loadError"`
	Stats     *struct {
		Invocations uint64  `json:"invocations"`
		Errors      uint64  `json:"errors"`
		Timeouts    uint64  `json:"timeouts"`
		Drops       uint64  `json:"drops"`
		Queued      int     `json:"queued"`
		P50Ms       float64 `json:"p50Ms"`
		P99Ms       float64 `json:"p99Ms"`
		LastError   string  `json:"lastError"`
	} `json:"stats"`
}

func (g *gateway) plugin(name string) pluginStatus {
	g.t.Helper()
	r := g.do("GET", "/v1/plugins/"+name, nil)
	if r.Status != 200 {
		g.t.Fatalf("get plugin %s: %d %s", name, r.Status, r.Body)
	}
	var st pluginStatus
	if err := json.Unmarshal(r.Body, &st); err != nil {
		g.t.Fatal(err)
	}
	return st
}

func (g *gateway) mustPutPlugin(name string, module []byte, config string) pluginStatus {
	g.t.Helper()
	r := g.putPlugin(name, module, config)
	if r.Status != 200 {
		g.t.Fatalf("put plugin %s: %d %s", name, r.Status, r.Body)
	}
	var st pluginStatus
	json.Unmarshal(r.Body, &st)
	return st
}

// auditRecord is one entry of /v1/audit; Record holds the audit-jsonl plugin's fields.
type auditRecord struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Record struct {
		Ev     string          `json:"ev"`
		Tenant string          `json:"tenant"`
		Sb     string          `json:"sb"`
		Data   json.RawMessage `json:"data"`
	} `json:"record"`
}

type auditPage struct {
	Items      []auditRecord `json:"items"`
	NextCursor string        `json:"nextCursor"`
}

func (g *gateway) audit(query string) auditPage {
	g.t.Helper()
	r := g.do("GET", "/v1/audit"+query, nil)
	if r.Status != 200 {
		g.t.Fatalf("audit%s: %d %s", query, r.Status, r.Body)
	}
	var p auditPage
	if err := json.Unmarshal(r.Body, &p); err != nil {
		g.t.Fatal(err)
	}
	return p
}

// auditSSE follows GET /v1/audit/stream and collects its records until the test ends.
type auditSSE struct {
	mu      sync.Mutex
	records []auditRecord
	status  int
	ctype   string
	comment bool
}

func (g *gateway) followAudit(t testing.TB, lastEventID string) *auditSSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.Addr+"/v1/audit/stream", nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", g.APIKey)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("audit stream: %v", err)
	}
	s := &auditSSE{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var id string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				s.mu.Lock()
				s.comment = true
				s.mu.Unlock()
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				var rec auditRecord
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &rec) == nil && rec.ID == id {
					s.mu.Lock()
					s.records = append(s.records, rec)
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *auditSSE) snapshot() []auditRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]auditRecord(nil), s.records...)
}

func hasEvent(recs []auditRecord, ev, sandbox string) bool {
	for _, r := range recs {
		if r.Record.Ev == ev && r.Record.Sb == sandbox {
			return true
		}
	}
	return false
}

func (g *gateway) expiresAt(id string) time.Time {
	g.t.Helper()
	s, _ := g.do("GET", "/v1/sandboxes/"+id, nil).JSON(g.t)["expiresAt"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		g.t.Fatalf("expiresAt %q: %v", s, err)
	}
	return at
}

// previewGet fetches path from the sandbox's preview server (an access event, and
// activity that may renew the sandbox) and returns how long the request took.
func (g *gateway) previewGet(id, path string) time.Duration {
	g.t.Helper()
	start := time.Now()
	r := g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d%s", id, previewPort, path), nil)
	took := time.Since(start)
	if r.Status != 200 {
		g.t.Fatalf("preview %s: %d %s", path, r.Status, r.Body)
	}
	return took
}

// TestPluginUploadRefused: garbage, modules without the exports, a wrong ABI, a start
// that never ends, bad configurations and a second TTL plugin are refused with the
// plugin's stable code; nothing of them is stored and the gateway keeps serving.
func TestPluginUploadRefused(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	ttl := examplePlugin(t, "ttl-on-activity")
	g.mustPutPlugin("ttl", ttl, `{"hooks":["decide_ttl"],"settings":{"extendMinutes":15}}`)

	tests := []struct {
		name, plugin string
		module       []byte
		config       string
		status       int
		code         string
	}{
		{"garbage bytes", "junk", []byte("this is not WebAssembly at all"), `{"hooks":["on_event"]}`, 422, "PLUGIN::INVALID_MODULE"},
		{"truncated module", "cut", examplePlugin(t, "noop")[:4096], `{"hooks":["on_event"]}`, 422, "PLUGIN::INVALID_MODULE"},
		{"declared hook not exported", "nohook", examplePlugin(t, "bad-missing-export"), `{"hooks":["on_event"]}`, 422, "PLUGIN::MISSING_EXPORT"},
		{"decide_ttl declared, only on_event exported", "half", examplePlugin(t, "audit-jsonl"), `{"hooks":["decide_ttl"]}`, 422, "PLUGIN::MISSING_EXPORT"},
		{"wrong ABI version", "abi", examplePlugin(t, "bad-abi-version"), `{"hooks":["on_event"]}`, 422, "PLUGIN::ABI_VERSION"},
		{"start never ends", "initloop", examplePlugin(t, "bad-init-loop"), `{"hooks":["on_event"]}`, 422, "PLUGIN::INIT_FAILED"},
		{"settings refused by the plugin", "ttl-neg", ttl, `{"hooks":["decide_ttl"],"settings":{"extendMinutes":-5}}`, 422, "PLUGIN::INIT_FAILED"},
		{"config not JSON", "badjson", ttl, `{"hooks": [`, 400, "PLUGIN::INVALID_CONFIG"},
		{"unknown hook", "boot", ttl, `{"hooks":["on_boot"]}`, 400, "PLUGIN::INVALID_CONFIG"},
		{"unknown config field", "extra", ttl, `{"hooks":["decide_ttl"],"memory":1}`, 400, "PLUGIN::INVALID_CONFIG"},
		{"deadline above the ceiling", "slow", ttl, `{"hooks":["decide_ttl"],"limits":{"timeoutMs":60000}}`, 400, "PLUGIN::INVALID_CONFIG"},
		{"no module part", "empty", nil, `{"hooks":["on_event"]}`, 400, "PLUGIN::INVALID_MODULE"},
		{"second decide_ttl plugin", "ttl-two", examplePlugin(t, "ttl-business-hours"), `{"hooks":["decide_ttl"]}`, 409, "PLUGIN::HOOK_CONFLICT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			expectError(t, g.putPlugin(tt.plugin, tt.module, tt.config), tt.status, tt.code)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("refusal took %s", took)
			}
			expectError(t, g.do("GET", "/v1/plugins/"+tt.plugin, nil), 404, "PLUGIN::NOT_FOUND")
		})
	}
	t.Run("not multipart", func(t *testing.T) {
		expectError(t, g.do("PUT", "/v1/plugins/x", `{"hooks":["on_event"]}`), 415, "SANDBOX::INVALID_PARAMETER")
	})
	t.Run("only the good plugin is stored", func(t *testing.T) {
		var list struct{ Items []pluginStatus }
		json.Unmarshal(g.do("GET", "/v1/plugins", nil).Body, &list)
		if len(list.Items) != 1 || list.Items[0].Name != "ttl" || !list.Items[0].Loaded {
			t.Fatalf("plugins = %+v, want only a loaded ttl", list.Items)
		}
	})
	t.Run("gateway still serves", func(t *testing.T) {
		if r := g.do("GET", "/health", nil); r.Status != 200 {
			t.Fatalf("health: %d", r.Status)
		}
	})
}

// TestPluginLifecycle: upload, list, replace, delete — and a second gateway replica on the
// same Redis loads, replaces and unloads the plugin without being told directly.
func TestPluginLifecycle(t *testing.T) {
	e := newEnv(t, startRedis(t))
	a := e.startGateway()
	b := e.startGateway()
	audit := examplePlugin(t, "audit-jsonl")

	first := a.mustPutPlugin("audit", audit, `{"hooks":["on_event"],"settings":{"types":["sandbox.created"]}}`)
	if !first.Loaded || first.Version == "" || len(first.Hooks) != 1 {
		t.Fatalf("after upload: %+v", first)
	}
	waitFor(t, 10*time.Second, func() bool {
		st := b.plugin("audit")
		return st.Loaded && st.Version == first.Version
	}, "the other replica to load the plugin")

	second := a.mustPutPlugin("audit", audit, `{"hooks":["on_event"],"settings":{}}`)
	if second.Version == first.Version {
		t.Fatalf("new settings kept version %s", second.Version)
	}
	waitFor(t, 10*time.Second, func() bool {
		st := b.plugin("audit")
		return st.Loaded && st.Version == second.Version
	}, "the other replica to load the new version")

	var list struct{ Items []pluginStatus }
	json.Unmarshal(b.do("GET", "/v1/plugins", nil).Body, &list)
	if len(list.Items) != 1 || list.Items[0].Name != "audit" || list.Items[0].Stats == nil {
		t.Fatalf("list = %+v", list.Items)
	}

	if r := a.do("DELETE", "/v1/plugins/audit", nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	expectError(t, a.do("GET", "/v1/plugins/audit", nil), 404, "PLUGIN::NOT_FOUND")
	expectError(t, b.do("GET", "/v1/plugins/audit", nil), 404, "PLUGIN::NOT_FOUND")
	expectError(t, a.do("DELETE", "/v1/plugins/audit", nil), 404, "PLUGIN::NOT_FOUND")
	// The replica unloaded it too: a plugin of that name with decide_ttl would conflict
	// with nothing, and a re-upload there starts from a fresh load.
	if st := b.mustPutPlugin("audit", audit, `{"hooks":["on_event"]}`); !st.Loaded {
		t.Fatalf("re-upload on the replica: %+v", st)
	}
}

// TestPluginAuditStream: the audit-jsonl plugin sees the tenant's events and its records
// appear in /v1/audit (paged by cursor, both orders) and live on the SSE stream, which
// resumes after Last-Event-ID.
func TestPluginAuditStream(t *testing.T) {
	e := newEnv(t, startRedis(t))
	g := e.startGateway()
	g.mustPutPlugin("audit", examplePlugin(t, "audit-jsonl"), `{"hooks":["on_event"],"settings":{"types":["sandbox.created","sandbox.deleted"]}}`)

	live := g.followAudit(t, "")
	if live.status != 200 || !strings.HasPrefix(live.ctype, "text/event-stream") {
		t.Fatalf("stream: status %d, content type %q", live.status, live.ctype)
	}
	id := g.createSandbox(map[string]any{"timeout": 300})
	if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}

	t.Run("records in /v1/audit", func(t *testing.T) {
		waitFor(t, 10*time.Second, func() bool {
			p := g.audit("")
			return hasEvent(p.Items, "sandbox.created", id) && hasEvent(p.Items, "sandbox.deleted", id)
		}, "the plugin's audit records of create and delete")
		for _, r := range g.audit("").Items {
			if r.Source != "plugin" || r.Record.Tenant != "default" {
				t.Errorf("record %+v: want source plugin, tenant default", r)
			}
		}
	})
	t.Run("cursor pagination", func(t *testing.T) {
		all := g.audit("").Items
		if len(all) < 2 {
			t.Fatalf("want at least 2 records, got %d", len(all))
		}
		p1 := g.audit("?limit=1")
		if len(p1.Items) != 1 || p1.NextCursor == "" || p1.Items[0].ID != all[0].ID {
			t.Fatalf("first page = %+v", p1)
		}
		p2 := g.audit("?limit=1&cursor=" + p1.NextCursor)
		if len(p2.Items) != 1 || p2.Items[0].ID != all[1].ID {
			t.Fatalf("second page = %+v, want %s", p2, all[1].ID)
		}
		newest := g.audit("?order=newest&limit=1")
		if newest.Items[0].ID != all[len(all)-1].ID {
			t.Fatalf("newest first = %s, want %s", newest.Items[0].ID, all[len(all)-1].ID)
		}
		if end := g.audit("?cursor=" + all[len(all)-1].ID); len(end.Items) != 0 || end.NextCursor != "" {
			t.Fatalf("after the last record: %+v", end)
		}
		expectError(t, g.do("GET", "/v1/audit?cursor=banana", nil), 400, "SANDBOX::INVALID_PARAMETER")
		expectError(t, g.do("GET", "/v1/audit?limit=0", nil), 400, "SANDBOX::INVALID_PARAMETER")
	})
	t.Run("live stream", func(t *testing.T) {
		waitFor(t, 10*time.Second, func() bool {
			recs := live.snapshot()
			return hasEvent(recs, "sandbox.created", id) && hasEvent(recs, "sandbox.deleted", id)
		}, "the SSE stream to deliver both records")
		all := g.audit("").Items
		got := live.snapshot()
		if len(got) != len(all) || got[0].ID != all[0].ID {
			t.Fatalf("stream delivered %d records starting %s; /v1/audit has %d starting %s", len(got), got[0].ID, len(all), all[0].ID)
		}
	})
	t.Run("resume after Last-Event-ID", func(t *testing.T) {
		all := g.audit("").Items
		resumed := g.followAudit(t, all[0].ID)
		waitFor(t, 10*time.Second, func() bool { return len(resumed.snapshot()) == len(all)-1 }, "the resumed stream to replay the rest")
		if got := resumed.snapshot(); got[0].ID != all[1].ID {
			t.Fatalf("resumed at %s, want %s", got[0].ID, all[1].ID)
		}
	})
}

// TestPluginTTLOnActivity: a decide_ttl plugin moves expiresAt on preview access; a
// looping one is cut off at its deadline, the built-in rule applies instead and requests
// do not wait for it.
func TestPluginTTLOnActivity(t *testing.T) {
	e := newEnv(t, startRedis(t), "SANDGATE_RENEW_COOLDOWN=1s", "SANDGATE_TEST_CLOCK=on")
	g := e.startGateway()
	g.mustPutPlugin("ttl", misbehavingPlugin(t), `{"hooks":["decide_ttl"],"limits":{"timeoutMs":50},"settings":{"mode":"loop"}}`)

	id := g.createSandbox(map[string]any{"timeout": 120, "extensions": map[string]string{"access.renew.extend.seconds": "600"}})
	startPreviewServer(t, g, id)

	t.Run("a looping plugin falls back to the built-in rule", func(t *testing.T) {
		var slowest time.Duration
		for i := 0; i < 5; i++ {
			slowest = max(slowest, g.previewGet(id, "/headers"))
			g.advanceClock(1100 * time.Millisecond) // past the renew cooldown: every access decides
		}
		waitFor(t, 10*time.Second, func() bool { return time.Until(g.expiresAt(id)) > 500*time.Second }, "the built-in renewal")
		if left := time.Until(g.expiresAt(id)); left > 700*time.Second {
			t.Fatalf("expiry %s ahead: the built-in rule gives 600s", left)
		}
		st := g.plugin("ttl")
		if st.Stats == nil || st.Stats.Timeouts == 0 || !strings.Contains(st.Stats.LastError, "PLUGIN::TIMEOUT") {
			t.Fatalf("plugin status shows no timeout: %+v", st.Stats)
		}
		if st.Stats.P99Ms > 50*4 {
			t.Errorf("a call of the looping plugin took %.1f ms; the deadline is 50 ms", st.Stats.P99Ms)
		}
		if slowest > time.Second {
			t.Errorf("slowest preview request took %s while the plugin looped", slowest)
		}
		t.Logf("looping plugin: %d timeouts, p99 %.1f ms; slowest preview request %s", st.Stats.Timeouts, st.Stats.P99Ms, slowest)
	})
	t.Run("ttl-on-activity extends by its own rule", func(t *testing.T) {
		g.mustPutPlugin("ttl", examplePlugin(t, "ttl-on-activity"), `{"hooks":["decide_ttl"],"settings":{"extendMinutes":30}}`)
		before := g.plugin("ttl").Stats.Invocations
		g.advanceClock(1100 * time.Millisecond) // past the renew cooldown
		waitFor(t, 15*time.Second, func() bool {
			g.previewGet(id, "/headers")
			return time.Until(g.expiresAt(id)) > 25*time.Minute
		}, "the plugin's 30-minute extension")
		if left := time.Until(g.expiresAt(id)); left > 31*time.Minute {
			t.Fatalf("expiry %s ahead, want about 30m", left)
		}
		if st := g.plugin("ttl"); st.Stats.Invocations <= before {
			t.Fatalf("invocations %d, were %d", st.Stats.Invocations, before)
		}
	})

	t.Run("ttl plugin decides an explicit renew", func(t *testing.T) {
		g.mustPutPlugin("ttl", examplePlugin(t, "ttl-on-activity"), `{"hooks":["decide_ttl"],"settings":{"extendMinutes":30,"maxMinutesAhead":60}}`)
		r := g.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": time.Now().Add(5 * time.Hour).UTC().Format(time.RFC3339)})
		if r.Status != 200 {
			t.Fatalf("renew: %d %s", r.Status, r.Body)
		}
		got, _ := time.Parse(time.RFC3339Nano, r.JSON(t)["expiresAt"].(string))
		if left := time.Until(got); left > 61*time.Minute || left < 55*time.Minute {
			t.Fatalf("renew for +5h came back %s ahead; the plugin caps it at 60m", left)
		}
	})
}

// TestPluginFaults: on_event plugins that loop, exhaust their memory or trap, and a
// decide_ttl plugin that answers malformed JSON, all attached at once beside a healthy
// audit plugin: requests are not slowed, each fault is visible in its plugin's status,
// the healthy plugin keeps working and the gateway keeps serving.
func TestPluginFaults(t *testing.T) {
	e := newEnv(t, startRedis(t), "SANDGATE_RENEW_COOLDOWN=1s")
	g := e.startGateway()
	bad := misbehavingPlugin(t)
	// The longest deadline there is: were requests waiting for this plugin, each would
	// take at least 5 s.
	g.mustPutPlugin("ev-loop", bad, `{"hooks":["on_event"],"limits":{"timeoutMs":5000},"settings":{"mode":"loop"}}`)
	// A deadline long enough to reach the memory limit even on a busy machine.
	g.mustPutPlugin("ev-oom", bad, `{"hooks":["on_event"],"limits":{"memoryMiB":32,"timeoutMs":2000},"settings":{"mode":"oom"}}`)
	g.mustPutPlugin("ev-trap", bad, `{"hooks":["on_event"],"settings":{"mode":"trap"}}`)
	g.mustPutPlugin("ttl-badjson", bad, `{"hooks":["decide_ttl"],"settings":{"mode":"badjson"}}`)
	// A generous deadline: the faulty plugins burn the CPU this one shares.
	g.mustPutPlugin("audit", examplePlugin(t, "audit-jsonl"), `{"hooks":["on_event"],"limits":{"timeoutMs":2000},"settings":{"types":["preview.accessed"]}}`)

	id := g.createSandbox(map[string]any{"timeout": 120, "extensions": map[string]string{"access.renew.extend.seconds": "600"}})
	startPreviewServer(t, g, id)
	var took []time.Duration
	for i := 0; i < 20; i++ {
		took = append(took, g.previewGet(id, fmt.Sprintf("/headers?i=%d", i)))
	}
	var total time.Duration
	for _, d := range took {
		total += d
	}
	slices.Sort(took)
	// Waiting for the loop, the 20 requests would take 100 s at least, and each one more
	// than 5 s. The bounds leave room for a loaded machine: the faulty plugins burn the
	// CPU the requests share.
	if slowest := took[len(took)-1]; total >= 50*time.Second || slowest >= 10*time.Second {
		t.Errorf("20 preview requests took %s, the slowest %s: they waited for the looping plugin", total, slowest)
	}
	// The loop still has events of those requests to go through: they were answered
	// without waiting for it.
	if st := g.plugin("ev-loop"); st.Stats == nil || st.Stats.Queued == 0 {
		t.Errorf("the looping plugin has no backlog: %+v", st.Stats)
	} else {
		t.Logf("20 preview requests with faulty plugins attached: median %s, slowest %s; the looping plugin still has %d events queued",
			took[len(took)/2], took[len(took)-1], st.Stats.Queued)
	}

	for _, tt := range []struct{ plugin, code string }{
		{"ev-loop", "PLUGIN::TIMEOUT"},
		{"ev-oom", "PLUGIN::MEMORY_LIMIT"},
		{"ev-trap", "PLUGIN::TRAP"},
		{"ttl-badjson", "PLUGIN::BAD_OUTPUT"},
	} {
		t.Run(tt.plugin, func(t *testing.T) {
			waitFor(t, 30*time.Second, func() bool {
				st := g.plugin(tt.plugin)
				return st.Stats != nil && st.Stats.Errors > 0 && strings.Contains(st.Stats.LastError, tt.code)
			}, tt.plugin+"'s status to show "+tt.code)
			st := g.plugin(tt.plugin)
			if !st.Loaded {
				t.Errorf("a faulty call unloaded the plugin: %+v", st)
			}
			t.Logf("%s: %d calls, %d errors, %d timeouts, %d drops; last error %q", tt.plugin, st.Stats.Invocations, st.Stats.Errors, st.Stats.Timeouts, st.Stats.Drops, st.Stats.LastError)
		})
	}
	t.Run("every call of the loop is cut off", func(t *testing.T) {
		// A call's duration counts the wait for a free instance and, after a discarded
		// instance, starting a fresh one (at most 2 s) besides the call itself (the
		// deadline): ABI.md, "Limits and failures".
		st := g.plugin("ev-loop")
		if st.Stats.Timeouts == 0 || st.Stats.Timeouts != st.Stats.Invocations || st.Stats.P99Ms > 5000+2000+500 {
			t.Fatalf("loop: %d calls, %d timeouts, p99 %.1f ms (deadline 5 s)", st.Stats.Invocations, st.Stats.Timeouts, st.Stats.P99Ms)
		}
		t.Logf("loop: %d calls, all cut off; p50 %.1f ms, p99 %.1f ms", st.Stats.Invocations, st.Stats.P50Ms, st.Stats.P99Ms)
	})
	t.Run("bad TTL output falls back to the built-in rule", func(t *testing.T) {
		waitFor(t, 10*time.Second, func() bool { return time.Until(g.expiresAt(id)) > 500*time.Second }, "the built-in renewal")
	})
	t.Run("the healthy neighbour keeps working", func(t *testing.T) {
		waitFor(t, 10*time.Second, func() bool {
			n := 0
			for _, r := range g.audit("?limit=1000").Items {
				if r.Record.Ev == "preview.accessed" && r.Record.Sb == id {
					n++
				}
			}
			return n >= 20
		}, "audit records of the 20 preview requests")
		st := g.plugin("audit")
		t.Logf("audit plugin: %d calls, %d errors, p50 %.2f ms", st.Stats.Invocations, st.Stats.Errors, st.Stats.P50Ms)
	})
	t.Run("the gateway keeps serving", func(t *testing.T) {
		if r := g.do("GET", "/health", nil); r.Status != 200 {
			t.Fatalf("health: %d", r.Status)
		}
		if r := g.do("GET", "/v1/sandboxes/"+id, nil); r.Status != 200 {
			t.Fatalf("get sandbox: %d %s", r.Status, r.Body)
		}
	})
}

// TestPluginTenantIsolation: tenant A's plugin never sees tenant B's events, each
// tenant's audit stream holds only its own records, and plugin management follows the
// roles (members read, tenant admins write).
func TestPluginTenantIsolation(t *testing.T) {
	e := newEnv(t, startRedis(t))
	admin := e.startGateway()
	ta := admin.newPluginTenant("plugins-a")
	tb := admin.newPluginTenant("plugins-b")
	a, aMember, b := admin.withTenantKey(ta, "tenant-admin"), admin.withTenantKey(ta, "member"), admin.withTenantKey(tb, "tenant-admin")

	audit := examplePlugin(t, "audit-jsonl")
	a.mustPutPlugin("audit", audit, `{"hooks":["on_event"]}`)
	b.mustPutPlugin("audit", audit, `{"hooks":["on_event"]}`)
	aLive := a.followAudit(t, "")

	idB := b.createSandbox(map[string]any{"timeout": 300})
	startPreviewServer(t, b, idB)
	idA := a.createSandbox(map[string]any{"timeout": 300})

	waitFor(t, 15*time.Second, func() bool {
		return hasEvent(b.audit("?limit=1000").Items, "sandbox.created", idB) && hasEvent(b.audit("?limit=1000").Items, "preview.accessed", idB) &&
			hasEvent(a.audit("?limit=1000").Items, "sandbox.created", idA)
	}, "both tenants' plugins to record their own sandboxes")
	// A barrier instead of a wait: one marker event in each tenant, B's first, then A's,
	// through the same ordered queue as B's preview traffic (agent calls and accesses
	// are written by one writer; each plugin has one worker taking its events in order).
	// Once A's plugin recorded A's marker it has taken every event published before it,
	// B's among them, had any reached it; B's marker does the same for A's events at B.
	markB, markA := "marker-"+randomHex(6), "marker-"+randomHex(6)
	runMarker(t, b, idB, markB)
	runMarker(t, a, idA, markA)
	waitFor(t, 15*time.Second, func() bool {
		return hasMarker(b.audit("?limit=1000").Items, markB) && hasMarker(a.audit("?limit=1000").Items, markA) && hasMarker(aLive.snapshot(), markA)
	}, "each tenant's plugin (and A's live stream) to record its tenant's marker")

	for _, c := range []struct {
		name          string
		g             *gateway
		tenant, other string
	}{{"tenant A", a, ta, idB}, {"tenant B", b, tb, idA}} {
		t.Run(c.name+" sees only its own events", func(t *testing.T) {
			for _, r := range c.g.audit("?limit=1000").Items {
				if r.Record.Tenant != c.tenant || r.Record.Sb == c.other {
					t.Fatalf("record of another tenant: %+v", r)
				}
			}
		})
	}
	t.Run("tenant A's live stream carries only A's records", func(t *testing.T) {
		waitFor(t, 10*time.Second, func() bool { return hasEvent(aLive.snapshot(), "sandbox.created", idA) }, "A's record on A's stream")
		for _, r := range aLive.snapshot() {
			if r.Record.Tenant != ta || r.Record.Sb == idB {
				t.Fatalf("record of another tenant on A's stream: %+v", r)
			}
		}
	})
	t.Run("plugins are per tenant", func(t *testing.T) {
		if r := a.do("DELETE", "/v1/plugins/audit", nil); r.Status != 204 {
			t.Fatalf("A deletes its plugin: %d %s", r.Status, r.Body)
		}
		if st := b.plugin("audit"); !st.Loaded {
			t.Fatalf("B's plugin went with A's: %+v", st)
		}
	})
	t.Run("members read plugins, tenant admins write them", func(t *testing.T) {
		if r := aMember.do("GET", "/v1/plugins", nil); r.Status != 200 {
			t.Fatalf("member lists plugins: %d %s", r.Status, r.Body)
		}
		if r := aMember.putPlugin("audit", audit, `{"hooks":["on_event"]}`); r.Status != 403 {
			t.Fatalf("member uploads a plugin: %d %s", r.Status, r.Body)
		}
		if r := aMember.do("GET", "/v1/audit", nil); r.Status != 200 {
			t.Fatalf("member reads the audit stream: %d %s", r.Status, r.Body)
		}
	})
}

// runMarker starts a command that names marker in the sandbox: a command.started event
// of the sandbox's tenant, queued like the preview traffic before it.
func runMarker(t testing.TB, g *gateway, id, marker string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": "true " + marker, "background": true})
	resp := g.agent(id).request("POST", "/command", bytes.NewReader(body), "application/json")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("marker command: %d", resp.StatusCode)
	}
}

// hasMarker reports whether a command.started record names marker.
func hasMarker(recs []auditRecord, marker string) bool {
	for _, r := range recs {
		if r.Record.Ev == "command.started" && strings.Contains(string(r.Record.Data), marker) {
			return true
		}
	}
	return false
}

// newPluginTenant creates a tenant through /v1/tenants and returns its id.
func (g *gateway) newPluginTenant(name string) string {
	g.t.Helper()
	r := g.do("POST", "/v1/tenants", map[string]any{"name": name})
	if r.Status != 201 {
		g.t.Fatalf("create tenant %s: %d %s", name, r.Status, r.Body)
	}
	return r.JSON(g.t)["id"].(string)
}

// withTenantKey issues a key of role in tenant and returns a client that sends it.
func (g *gateway) withTenantKey(tenant, role string) *gateway {
	g.t.Helper()
	r := g.do("POST", "/v1/tenants/"+tenant+"/keys", map[string]string{"role": role})
	if r.Status != 201 {
		g.t.Fatalf("issue %s key: %d %s", role, r.Status, r.Body)
	}
	c := *g
	c.APIKey = r.JSON(g.t)["key"].(string)
	return &c
}
