package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/test/testenv"
)

const previewPort = 8000

// startPreviewServer uploads testdata/preview_server.py into a sandbox and runs it.
func startPreviewServer(t testing.TB, g *gateway, id string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "preview_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	a := g.agent(id)
	uploadFile(t, a, "/opt/preview_server.py", src)
	body, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("python3 /opt/preview_server.py %d", previewPort), "background": true})
	resp := a.request("POST", "/command", bytes.NewReader(body), "application/json")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, 20*time.Second, func() bool {
		r := g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", id, previewPort), nil)
		return r.Status == 200
	}, "the preview server to answer")
}

func (g *gateway) endpoint(id string, port int, query string) (endpoint string, headers map[string]string, link string) {
	g.t.Helper()
	r := g.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d%s", id, port, query), nil)
	if r.Status != 200 {
		g.t.Fatalf("endpoint: %d %s", r.Status, r.Body)
	}
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
		URL      string            `json:"url"`
	}
	json.Unmarshal(r.Body, &ep)
	return ep.Endpoint, ep.Headers, ep.URL
}

// raw sends a request to the gateway's address with the given Host and headers, without
// the API key and without following redirects.
func (g *gateway) raw(method, host, path string, body io.Reader, headers map[string]string) *http.Response {
	g.t.Helper()
	req, err := http.NewRequest(method, "http://"+g.Addr+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 5 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func wsEcho(t testing.TB, gatewayAddr, u string, header http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Always dial the gateway on loopback, whatever host the URL names (no DNS look-ups).
	dialer := &net.Dialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, gatewayAddr)
	}}}
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: header, HTTPClient: hc})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("websocket %s: %v (status %d)", u, err, status)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func TestPreview(t *testing.T) {
	redis := startRedis(t)
	// The renew subtest and the link expiry move the gateway's clock instead of sleeping.
	e := newEnv(t, redis, "SANDGATE_PREVIEW_DOMAIN=preview.localhost", "SANDGATE_RENEW_COOLDOWN=30s", "SANDGATE_TEST_CLOCK=on")
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	other := g.createSandbox(map[string]any{})
	startPreviewServer(t, g, id)
	_, token, _ := func() (string, map[string]string, string) { return g.endpoint(id, previewPort, "") }()
	access := token["X-Sandgate-Access-Token"]
	hostMode := fmt.Sprintf("%s-%d.preview.localhost", id, previewPort)
	pathMode := fmt.Sprintf("/sandboxes/%s/proxy/%d", id, previewPort)

	t.Run("endpoint uses host mode for app ports and path mode for the agent", func(t *testing.T) {
		ep, hdr, _ := g.endpoint(id, previewPort, "")
		if !strings.HasPrefix(ep, hostMode+":") || hdr["X-Sandgate-Access-Token"] == "" {
			t.Fatalf("endpoint %q headers %v", ep, hdr)
		}
		ep, hdr, _ = g.endpoint(id, 44772, "")
		if !strings.Contains(ep, "/sandboxes/"+id+"/proxy/44772") || hdr["X-EXECD-ACCESS-TOKEN"] == "" {
			t.Fatalf("agent endpoint %q headers %v", ep, hdr)
		}
	})

	t.Run("a server that answers before it has read the body gets all of it", func(t *testing.T) {
		// The body's second half is sent only once the answer has begun: a gateway that
		// stops forwarding a body when the answer starts leaves both sides waiting.
		first, second := testenv.Halves()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		status, got, err := testenv.PostAfterAnswer(ctx, "http://"+g.Addr+pathMode+"/duplex", http.Header{"X-Sandgate-Access-Token": {access}}, first, second)
		if want := append(append([]byte{}, first...), second...); status != 200 || !bytes.Equal(got, want) {
			t.Fatalf("echo: status %d, %d of %d bytes (%v)", status, len(got), len(want), err)
		}
	})

	t.Run("path and host mode, credentials stripped, forwarded headers set", func(t *testing.T) {
		for name, req := range map[string]struct{ host, path string }{
			"path": {"", pathMode + "/headers?x=1"},
			"host": {hostMode, "/headers?x=1"},
		} {
			t.Run(name, func(t *testing.T) {
				resp := g.raw("GET", req.host, req.path, nil, map[string]string{"X-Sandgate-Access-Token": access, "Cookie": "app=1"})
				body := readAll(t, resp)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				var got struct {
					Path    string            `json:"path"`
					Headers map[string]string `json:"headers"`
				}
				json.Unmarshal([]byte(body), &got)
				if got.Path != "/headers?x=1" {
					t.Errorf("upstream path = %q", got.Path)
				}
				if got.Headers["X-Forwarded-For"] == "" || got.Headers["X-Forwarded-Proto"] == "" {
					t.Errorf("X-Forwarded-* missing: %v", got.Headers)
				}
				for k, v := range got.Headers {
					if strings.Contains(v, access) || strings.Contains(v, g.APIKey) {
						t.Errorf("credential reached the sandbox in %s", k)
					}
				}
				if got.Headers["Cookie"] != "app=1" {
					t.Errorf("the app's own cookie was lost: %q", got.Headers["Cookie"])
				}
			})
		}
	})

	t.Run("HTTP/2 from the client", func(t *testing.T) {
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		c := &http.Client{Transport: &http.Transport{Protocols: &protos}}
		req, _ := http.NewRequest("GET", "http://"+g.Addr+pathMode+"/headers", nil)
		req.Header.Set("X-Sandgate-Access-Token", access)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("h2c: %s %d %s", resp.Proto, resp.StatusCode, body)
		}
	})

	t.Run("SSE events arrive one by one", func(t *testing.T) {
		resp := g.raw("GET", "", pathMode+"/sse", nil, map[string]string{"X-Sandgate-Access-Token": access})
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var arrivals []time.Time
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				arrivals = append(arrivals, time.Now())
			}
		}
		if len(arrivals) != 3 {
			t.Fatalf("%d events, want 3", len(arrivals))
		}
		if gap := arrivals[2].Sub(arrivals[0]); gap < 700*time.Millisecond {
			t.Fatalf("events arrived together (%s between first and last): the proxy buffers", gap)
		}
	})

	t.Run("WebSocket echo in both modes", func(t *testing.T) {
		h := http.Header{"X-Sandgate-Access-Token": {access}}
		wsEcho(t, g.Addr, "ws://"+g.Addr+pathMode+"/ws", h)
		h.Set("Host", hostMode)
		dialHost := "ws://" + hostMode + ":" + strings.Split(g.Addr, ":")[1] + "/ws"
		wsEcho(t, g.Addr, dialHost, h)
	})

	t.Run("200 MiB upload byte-exact", func(t *testing.T) {
		pr, pw := io.Pipe()
		sum := sha256.New()
		go func() {
			buf := make([]byte, 1<<20)
			for i := 0; i < 200; i++ {
				rand.Read(buf)
				sum.Write(buf)
				if _, err := pw.Write(buf); err != nil {
					return
				}
			}
			pw.Close()
		}()
		resp := g.raw("POST", "", pathMode+"/upload", pr, map[string]string{"X-Sandgate-Access-Token": access})
		var got struct {
			SHA256 string `json:"sha256"`
			Bytes  int64  `json:"bytes"`
		}
		body := readAll(t, resp)
		json.Unmarshal([]byte(body), &got)
		if got.Bytes != 200<<20 || got.SHA256 != hex.EncodeToString(sum.Sum(nil)) {
			t.Fatalf("upload: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("signed link: cookie, WebSocket, expiry", func(t *testing.T) {
		_, _, link := g.endpoint(id, previewPort, fmt.Sprintf("?expires=%d", time.Now().Add(time.Minute).Unix()))
		u, err := url.Parse(link)
		if err != nil || u.Query().Get("sandgate_token") == "" {
			t.Fatalf("link %q", link)
		}
		resp := g.raw("GET", u.Host, u.RequestURI(), nil, nil)
		readAll(t, resp)
		if resp.StatusCode != http.StatusFound || len(resp.Cookies()) != 1 {
			t.Fatalf("link: status %d cookies %v", resp.StatusCode, resp.Cookies())
		}
		c := resp.Cookies()[0]
		if !c.HttpOnly || strings.Contains(resp.Header.Get("Location"), "sandgate_token") {
			t.Fatalf("cookie %+v location %q", c, resp.Header.Get("Location"))
		}
		cookie := map[string]string{"Cookie": c.Name + "=" + c.Value}
		if resp := g.raw("GET", u.Host, "/headers", nil, cookie); resp.StatusCode != 200 {
			t.Fatalf("cookie: %d %s", resp.StatusCode, readAll(t, resp))
		}
		// A browser sends the preview's own Origin; from any other the cookie is refused
		// (TestPreviewHostMode).
		wsEcho(t, g.Addr, "ws://"+u.Host+"/ws", http.Header{"Cookie": {cookie["Cookie"]}, "Origin": {"http://" + u.Host}})
		// The cookie is bound to this sandbox and port.
		if resp := g.raw("GET", fmt.Sprintf("%s-%d.preview.localhost", other, previewPort), "/", nil, cookie); resp.StatusCode != 401 {
			t.Fatalf("cookie on another sandbox: %d", resp.StatusCode)
		}
		tampered := strings.Replace(u.RequestURI(), "sandgate_token=", "sandgate_token=x", 1)
		if resp := g.raw("GET", u.Host, tampered, nil, nil); resp.StatusCode != 401 {
			t.Fatalf("tampered link: %d", resp.StatusCode)
		}
		_, _, short := g.endpoint(id, previewPort, fmt.Sprintf("?expires=%d", time.Now().Add(30*time.Second).Unix()))
		su, _ := url.Parse(short)
		resp = g.raw("GET", su.Host, su.RequestURI(), nil, nil)
		if body := readAll(t, resp); resp.StatusCode != http.StatusFound {
			t.Fatalf("a link 30 s from its expiry: %d %s", resp.StatusCode, body)
		}
		g.advanceClock(31 * time.Second) // the gateway's clock passes the link's expiry
		resp = g.raw("GET", su.Host, su.RequestURI(), nil, nil)
		if body := readAll(t, resp); resp.StatusCode != 401 || !strings.Contains(body, "ACCESS::LINK_EXPIRED") {
			t.Fatalf("expired link: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		_, otherHdr, _ := g.endpoint(other, previewPort, "")
		for name, c := range map[string]struct {
			host, path string
			hdr        map[string]string
			status     int
		}{
			"no credential":            {"", pathMode + "/", nil, 401},
			"another sandbox's token":  {"", pathMode + "/", otherHdr, 403},
			"token on another host":    {fmt.Sprintf("%s-%d.preview.localhost", other, previewPort), "/", map[string]string{"X-Sandgate-Access-Token": access}, 403},
			"not a sandbox id in host": {fmt.Sprintf("127.0.0.1-%d.preview.localhost", previewPort), "/", map[string]string{"X-Sandgate-Access-Token": access}, 404},
			"unknown sandbox":          {"", "/sandboxes/7d4e8c1a-0000-4000-8000-000000000000/proxy/8000/", map[string]string{"X-Sandgate-Access-Token": access}, 404},
			"bad port":                 {"", "/sandboxes/" + id + "/proxy/99999/", map[string]string{"X-Sandgate-Access-Token": access}, 400},
			"gateway's own port":       {"", "/sandboxes/" + id + "/proxy/" + strings.Split(g.Addr, ":")[1] + "/v1/sandboxes", map[string]string{"X-Sandgate-Access-Token": access}, 502},
			"traversal to the API":     {"", pathMode + "/..%2F..%2F..%2Fv1%2Fsandboxes", map[string]string{"X-Sandgate-Access-Token": access}, 404},
		} {
			t.Run(name, func(t *testing.T) {
				resp := g.raw("GET", c.host, c.path, nil, c.hdr)
				body := readAll(t, resp)
				if resp.StatusCode != c.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
				}
				if strings.Contains(body, `"items"`) {
					t.Fatalf("reached the gateway's own API: %s", body)
				}
			})
		}
	})

	t.Run("access events", func(t *testing.T) {
		waitFor(t, 5*time.Second, func() bool {
			out, _ := exec.Command("redis-cli", "-p", fmt.Sprint(redis.Port), "XRANGE", e.Prefix+"events:default", "-", "+").Output()
			return strings.Contains(string(out), `"type":"preview.accessed"`) && strings.Contains(string(out), `"credential":"cookie"`) &&
				strings.Contains(string(out), `"status":200`) && strings.Contains(string(out), `"path":"/headers"`) &&
				strings.Contains(string(out), `"type":"file.written"`) && strings.Contains(string(out), `preview_server.py 8000`)
		}, "preview.accessed, file.written and command.started events in the tenant's stream")
	})

	t.Run("renew on access extends and respects the cooldown", func(t *testing.T) {
		rid := g.createSandbox(map[string]any{"timeout": 120, "extensions": map[string]string{"access.renew.extend.seconds": "600"}})
		startPreviewServer(t, g, rid)
		expiry := func() time.Time {
			t, _ := time.Parse(time.RFC3339Nano, g.do("GET", "/v1/sandboxes/"+rid, nil).JSON(g.t)["expiresAt"].(string))
			return t
		}
		refused := func() float64 {
			_, text := scrape(t, "http://"+g.Addr+"/metrics", g.APIKey)
			n, _ := seriesValue(text, "sandgate_renew_on_access_total", "outcome=cooldown")
			return n
		}
		// Starting the server was already an access: wait for that renewal, then move the
		// gateway's clock past its cooldown (30 s).
		waitFor(t, 5*time.Second, func() bool { return time.Until(expiry()) > 500*time.Second }, "renew-on-access to move the expiry")
		g.advanceClock(31 * time.Second)
		before := expiry()
		_, hdr, _ := g.endpoint(rid, previewPort, "")
		readAll(t, g.raw("GET", "", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", rid, previewPort), nil, hdr))
		waitFor(t, 5*time.Second, func() bool { return expiry().After(before) }, "an access after the cooldown to renew")
		first := expiry()
		// Within the cooldown (past the 1 s activity throttle): the access's decision is
		// taken, refused by the cooldown, and the expiry stays.
		g.advanceClock(1100 * time.Millisecond)
		n := refused()
		readAll(t, g.raw("GET", "", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", rid, previewPort), nil, hdr))
		waitFor(t, 5*time.Second, func() bool { return refused() > n }, "the access within the cooldown to be refused its renewal")
		if !expiry().Equal(first) {
			t.Fatalf("expiry moved within the cooldown")
		}
		g.advanceClock(30 * time.Second)
		readAll(t, g.raw("GET", "", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", rid, previewPort), nil, hdr))
		waitFor(t, 5*time.Second, func() bool { return expiry().After(first) }, "a renewal after the cooldown")
	})

	t.Run("public sandbox needs no credential", func(t *testing.T) {
		pid := g.createSandbox(map[string]any{"extensions": map[string]string{"access.public": "true"}})
		startPreviewServer(t, g, pid)
		if resp := g.raw("GET", "", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", pid, previewPort), nil, nil); resp.StatusCode != 200 {
			t.Fatalf("public: %d %s", resp.StatusCode, readAll(t, resp))
		}
	})

	t.Run("a browser opens a signed link and its page's WebSocket echoes", func(t *testing.T) {
		chromium, err := exec.LookPath("chromium")
		if err != nil {
			t.Fatalf("chromium is not installed (make deps installs it): %v", err)
		}
		// Ten minutes: the gateway's clock is about a minute and a half ahead by now.
		_, _, link := g.endpoint(id, previewPort, fmt.Sprintf("?expires=%d", time.Now().Add(10*time.Minute).Unix()))
		text, shot := browse(t, chromium, link, "#out", "echo:")
		os.MkdirAll("artifacts", 0o755)
		os.WriteFile(filepath.Join("artifacts", "preview-signed-link.png"), shot, 0o644)
		if text != "echo:ping" {
			t.Fatalf("the page's WebSocket did not echo: %q", text)
		}
	})

	t.Run("deleting a sandbox makes its routes 404 within a second", func(t *testing.T) {
		if r := g.do("DELETE", "/v1/sandboxes/"+id, nil); r.Status != 204 {
			t.Fatalf("delete: %d", r.Status)
		}
		start := time.Now()
		waitFor(t, time.Second, func() bool {
			resp := g.raw("GET", hostMode, "/headers", nil, map[string]string{"X-Sandgate-Access-Token": access})
			readAll(t, resp)
			return resp.StatusCode == 404
		}, "the route to go")
		_ = start
	})
}

// browse opens url in headless Chromium (Debian's package), waits until the element sel
// holds text starting with want (or 30 s pass), and returns its text and a screenshot.
func browse(t testing.TB, chromium, url, sel, want string) (string, []byte) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()
	_ = chromedp.Do(ctx, chromedp.Navigate(url))
	// Wait for the page's script to write its answer (or give up after 30 s).
	var text string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`((document.querySelector(%q)||{}).textContent||"")`, sel)))
		if err == nil {
			text = got
			if strings.HasPrefix(text, want) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	return text, shot
}
