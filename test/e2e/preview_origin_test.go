package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/test/testenv"
)

// Host-mode previews. The link exchange redirects only on its own
// host, a WebSocket opened with a preview cookie must come from the preview's own page,
// and behind a TLS proxy (SANDGATE_PUBLIC_URL=https://…) every cookie is Secure.

// exchange opens a signed link of port of sandbox id on g (host mode when the gateway
// has a preview domain) at path and returns the answer, not following it.
func exchange(t *testing.T, g *gateway, id string, port int, path string) (host string, resp *http.Response) {
	t.Helper()
	_, _, link := g.endpoint(id, port, fmt.Sprintf("?expires=%d", time.Now().Add(5*time.Minute).Unix()))
	u, err := url.Parse(link)
	if err != nil || u.Query().Get("sandgate_token") == "" {
		t.Fatalf("link %q", link)
	}
	resp = g.raw("GET", u.Host, path+"?sandgate_token="+url.QueryEscape(u.Query().Get("sandgate_token")), nil, nil)
	readAll(t, resp)
	return u.Host, resp
}

func TestPreviewHostMode(t *testing.T) {
	const domain = "sandgate-previews.test"
	e := newEnv(t, startRedis(t), "SANDGATE_PREVIEW_DOMAIN="+domain)
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})
	startPreviewServer(t, g, id)

	t.Run("the link exchange never redirects to another host", func(t *testing.T) {
		for path, want := range map[string]string{
			"//evil.example/":      "/evil.example/",
			"///evil.example/x":    "/evil.example/x",
			"/%2F%2Fevil.example/": "/%2F%2Fevil.example/",
			"/app/page":            "/app/page",
		} {
			_, resp := exchange(t, g, id, previewPort, path)
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusFound || loc != want {
				t.Errorf("link at %q: %d Location %q, want 302 %q", path, resp.StatusCode, loc, want)
			}
			if u, err := url.Parse(loc); err != nil || u.Host != "" || strings.HasPrefix(loc, "//") {
				t.Errorf("link at %q redirects off the preview's host: %q", path, loc)
			}
		}
	})

	t.Run("a WebSocket with the preview cookie needs the preview's own Origin", func(t *testing.T) {
		host, resp := exchange(t, g, id, previewPort, "/")
		if len(resp.Cookies()) != 1 {
			t.Fatalf("exchange set cookies %v", resp.Cookies())
		}
		cookie := resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value
		for name, origin := range map[string]string{
			"another site":                    "http://evil.example",
			"another preview":                 fmt.Sprintf("http://%s-8001.%s", id, domain),
			"the console's origin":            "http://" + g.Addr,
			"an opaque origin":                "null",
			"no Origin (no browser omits it)": "",
		} {
			t.Run(name, func(t *testing.T) {
				h := http.Header{"Cookie": {cookie}}
				if origin != "" {
					h.Set("Origin", origin)
				}
				if status := wsStatus(t, g.Addr, "ws://"+host+"/ws", h); status != http.StatusForbidden {
					t.Fatalf("WebSocket with Origin %q: status %d, want 403", origin, status)
				}
			})
		}
		wsEcho(t, g.Addr, "ws://"+host+"/ws", http.Header{"Cookie": {cookie}, "Origin": {"http://" + host}})
		// A credential in a header is no browser's: no Origin needed.
		_, hdr, _ := g.endpoint(id, previewPort, "")
		wsEcho(t, g.Addr, "ws://"+host+"/ws", http.Header{"X-Sandgate-Access-Token": {hdr["X-Sandgate-Access-Token"]}})
	})

	t.Run("path mode: a preview cookie's WebSocket needs the gateway's Origin", func(t *testing.T) {
		_, _, link := g.endpoint(id, previewPort, fmt.Sprintf("?expires=%d", time.Now().Add(5*time.Minute).Unix()))
		u, _ := url.Parse(link)
		prefix := fmt.Sprintf("/sandboxes/%s/proxy/%d/", id, previewPort)
		resp := g.raw("GET", "", prefix+"?sandgate_token="+url.QueryEscape(u.Query().Get("sandgate_token")), nil, nil)
		readAll(t, resp)
		if len(resp.Cookies()) != 1 || resp.Cookies()[0].Path != prefix {
			t.Fatalf("path-mode exchange: %d cookies %v", resp.StatusCode, resp.Cookies())
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") {
			t.Fatalf("path-mode answer CSP %q", csp)
		}
		cookie := resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value
		if status := wsStatus(t, g.Addr, "ws://"+g.Addr+prefix+"ws", http.Header{"Cookie": {cookie}, "Origin": {"http://evil.example"}}); status != http.StatusForbidden {
			t.Fatalf("path-mode WebSocket from another site: status %d, want 403", status)
		}
		wsEcho(t, g.Addr, "ws://"+g.Addr+prefix+"ws", http.Header{"Cookie": {cookie}, "Origin": {"http://" + g.Addr}})

		// The exchange redirects to the token-in-path form, which the opaque-origin page
		// (Origin "null", no cookies) keeps in its relative URLs.
		loc := resp.Header.Get("Location")
		if !strings.HasPrefix(loc, prefix+"_sandgate/") || strings.Contains(loc, "sandgate_token") {
			t.Fatalf("path-mode exchange redirects to %q", loc)
		}
		if r := g.raw("GET", "", loc+"headers", nil, map[string]string{"Origin": "null"}); r.StatusCode != 200 || !strings.Contains(readAll(t, r), `"path": "/headers"`) {
			t.Fatalf("token path: %d", r.StatusCode)
		}
		wsEcho(t, g.Addr, "ws://"+g.Addr+loc+"ws", http.Header{"Origin": {"null"}})
		// The token is bound to its sandbox and port.
		other := g.createSandbox(map[string]any{})
		tok := strings.TrimPrefix(loc, prefix+"_sandgate/")
		for _, p := range []string{
			fmt.Sprintf("/sandboxes/%s/proxy/%d/_sandgate/%s", other, previewPort, tok),
			fmt.Sprintf("/sandboxes/%s/proxy/%d/_sandgate/%s", id, previewPort+1, tok),
			fmt.Sprintf("/sandboxes/%s/proxy/%d/_sandgate/x%s", id, previewPort, tok),
		} {
			if r := g.raw("GET", "", p, nil, nil); r.StatusCode != 401 {
				t.Errorf("token at %s: %d %s, want 401", p, r.StatusCode, readAll(t, r))
			}
		}
	})
}

// wsStatus dials a WebSocket through the gateway and returns the handshake's status.
func wsStatus(t *testing.T, gatewayAddr, u string, header http.Header) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dialer := &net.Dialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, gatewayAddr)
	}}}
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: header, HTTPClient: hc})
	if err == nil {
		c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("websocket %s: %v", u, err)
	}
	return resp.StatusCode
}

func TestPreviewSecureCookiesBehindTLS(t *testing.T) {
	const public = "https://console.sandgate.test"
	e := newEnv(t, startRedis(t), "SANDGATE_PREVIEW_DOMAIN=sandgate-previews.test", "SANDGATE_PUBLIC_URL="+public)
	g := e.startGateway()
	id := g.createSandbox(map[string]any{})

	r := g.do("POST", "/v1/session", map[string]string{"apiKey": g.APIKey}, "OPEN-SANDBOX-API-KEY", "")
	if r.Status != 200 {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	if sc := r.Header.Get("Set-Cookie"); !strings.Contains(sc, "sandgate_session=") || !strings.Contains(sc, "; Secure") {
		t.Errorf("session cookie behind a TLS proxy is not Secure: %q", sc)
	}
	var session string
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == "sandgate_session" {
			session = c.Value
		}
	}
	_, resp := exchange(t, g, id, previewPort, "/")
	if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, "sandgate_preview=") || !strings.Contains(sc, "; Secure") {
		t.Errorf("preview cookie behind a TLS proxy is not Secure: %q", sc)
	}
	// The public URL is the console's origin: its pages' changes are accepted.
	sess := &console{g: g, cookie: session, csrf: r.JSON(t)["csrfToken"].(string)}
	create := map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600}
	if r := sess.do("POST", "/v1/sandboxes", create, true, "Origin", public); r.Status != 202 {
		t.Fatalf("create from the public origin: %d %s", r.Status, r.Body)
	}
	expectError(t, sess.do("POST", "/v1/sandboxes", create, true, "Origin", "https://evil.example"), 403, "ACCESS::ORIGIN_REFUSED")
}

func TestPreviewDomainOfItsOwn(t *testing.T) {
	e := newEnv(t, nil)
	for name, env := range map[string][]string{
		"below the console":      {"SANDGATE_PUBLIC_URL=https://sandgate.example", "SANDGATE_PREVIEW_DOMAIN=previews.sandgate.example"},
		"one registrable domain": {"SANDGATE_PUBLIC_ADDRESS=console.corp.example:443", "SANDGATE_PREVIEW_DOMAIN=previews.corp.example"},
	} {
		t.Run(name, func(t *testing.T) {
			full := append([]string{"SANDGATE_ADMIN=off", "SANDGATE_API_KEY=" + e.APIKey, "SANDGATE_REDIS_PREFIX=" + e.Prefix,
				"SANDGATE_DOCKER_NETWORK=" + e.Network, "SANDGATE_AGENT_BINARY=" + filepath.Join(binDir, "sandbox-agent")}, env...)
			proc, err := testenv.StartSandgate(filepath.Join(binDir, "sandgate"), t.TempDir(), full)
			if err == nil {
				proc.Stop()
				t.Fatalf("the gateway started with %v", env)
			}
			if !strings.Contains(err.Error(), "registrable domain") {
				t.Fatalf("the refusal does not say why: %v", err)
			}
		})
	}
}
