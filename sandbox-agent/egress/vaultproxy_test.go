package egress

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestVaultProxyRefusesWithoutDialing: the proxy's own refusals, which come before any
// upstream connection (so the destination below is never dialled): a request that two
// bindings match (the API refuses to create such a pair; this is the second line), and
// a Host header that is not the TLS server name.
func TestVaultProxyRefusesWithoutDialing(t *testing.T) {
	enf := &enforcer{vaultPort: DefaultVaultPort, pins: map[netip.Addr]*pinned{}}
	two := &vaultState{Revision: 1, Credentials: []storedCredential{{Name: "tok", Value: "s3cret", Revision: 1}}}
	for _, name := range []string{"first", "second"} {
		b, err := normalizeBinding(bearer(name, "api.test", "/v1/*"))
		if err != nil {
			t.Fatal(err)
		}
		two.Bindings = append(two.Bindings, storedBinding{Binding: b, Revision: 1})
	}
	enf.vault.Store(two)
	p := &vaultProxy{enf: enf, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dst := netip.MustParseAddrPort("127.0.0.1:443") // loopback; never dialled on these paths
	for _, tt := range []struct {
		name, host string
		status     int
		code       string
	}{
		{"two bindings match", "api.test", http.StatusForbidden, CodeVaultAmbiguous},
		{"Host is not the server name", "other.test", http.StatusMisdirectedRequest, CodeVaultHostMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "https://"+tt.host+"/v1/models", nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			p.forward(rec, req, "https", "api.test", dst)
			var e apiError
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != tt.status || e.Code != tt.code {
				t.Fatalf("answer %d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
		})
	}
}

// TestVaultPathTraversalNotInjected: a binding limited to /api/* must not put its
// credential on a request that an upstream which normalises paths (as nginx does) serves
// from outside /api/. The upstream is a plain-HTTP server this test starts on loopback;
// it records the Authorization header of every request it gets. A request under /api/
// carries the real token; each traversal is refused with 400 VAULT::AMBIGUOUS_PATH and
// never reaches the upstream; an ambiguous path on a method no binding names passes
// through untouched.
func TestVaultPathTraversalNotInjected(t *testing.T) {
	const secret = "s3cret-upstream-token"
	var mu sync.Mutex
	seen := map[string]string{} // request URI -> Authorization
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RequestURI] = r.Header.Get("Authorization")
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(upstream.Close)
	dst := netip.MustParseAddrPort(upstream.Listener.Addr().String())

	enf := &enforcer{vaultPort: DefaultVaultPort, pins: map[netip.Addr]*pinned{
		dst.Addr(): {expires: time.Now().Add(time.Hour), names: map[string]bool{"api.test": true}},
	}}
	b := bearer("api", "api.test", "/api/*")
	b.Match.Schemes = []string{"http"}
	b.Match.Ports = []int{int(dst.Port())}
	b.Match.Methods = []string{"GET", "POST"}
	v, verr := newVault(VaultCreate{Credentials: []Credential{{Name: "tok", Source: CredentialSource{Value: secret}}}, Bindings: []Binding{b}})
	if verr != nil {
		t.Fatal(verr)
	}
	enf.vault.Store(v)
	p := &vaultProxy{enf: enf, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dialer: &net.Dialer{Timeout: 5 * time.Second}}
	p.client = &http.Transport{DialContext: p.dialPlain}
	t.Cleanup(p.client.CloseIdleConnections)

	send := func(method, target string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(method, target, nil)
		req.Host = "api.test"
		req.Header.Set("Authorization", "Bearer fake-token-in-sandbox")
		rec := httptest.NewRecorder()
		p.forward(rec, req, "http", "", dst)
		return rec
	}
	upstreamSaw := func(uri string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		auth, ok := seen[uri]
		return auth, ok
	}

	if rec := send("GET", "/api/models"); rec.Code != http.StatusOK {
		t.Fatalf("GET /api/models: %d %s", rec.Code, rec.Body)
	}
	if auth, _ := upstreamSaw("/api/models"); auth != "Bearer "+secret {
		t.Fatalf("a request under /api/ did not carry the credential (got %q): the test's setup is wrong", auth)
	}

	for _, target := range []string{
		"/api/../debug/echo",
		"/api/%2e%2e/debug/echo",
		"/api/%2E%2e/debug/echo",
		"/api/.%2e/debug/echo",
		"/api/x/../../debug/echo",
		"/api/./../debug/echo",
		"/api/..;/debug/echo",
		"/api/..%2fdebug/echo",
		"/api%2f..%2fdebug/echo",
		"/api/..%5cdebug/echo",
		`/api/..\debug/echo`,
		"/api/%252e%252e/debug/echo",
		"/api/%2e",
	} {
		t.Run(target, func(t *testing.T) {
			rec := send("GET", target)
			var e apiError
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusBadRequest || e.Code != CodeVaultAmbiguousPath {
				t.Errorf("answer %d %s, want 400 %s", rec.Code, rec.Body, CodeVaultAmbiguousPath)
			}
			mu.Lock()
			defer mu.Unlock()
			for uri, auth := range seen {
				if uri != "/api/models" {
					t.Errorf("the upstream got %s (with the credential: %v)", uri, strings.Contains(auth, secret))
				}
				delete(seen, uri)
			}
		})
	}

	// A method no binding names gets no credential whatever its path: it passes
	// through untouched, dot segments and all.
	if rec := send("DELETE", "/api/../debug/echo"); rec.Code != http.StatusOK {
		t.Fatalf("DELETE /api/../debug/echo: %d %s, want it passed through", rec.Code, rec.Body)
	}
	if auth, ok := upstreamSaw("/api/../debug/echo"); !ok || auth != "Bearer fake-token-in-sandbox" {
		t.Fatalf("DELETE /api/../debug/echo reached the upstream %v with Authorization %q, want the workload's own", ok, auth)
	}
}

func TestAmbiguousPath(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/api/models", false},
		{"/api/v1.2/file.json", false},
		{"/api/...", false},
		{"/api/.well-known/x", false},
		{"/", false},
		{"/api/..", true},
		{"/api/.", true},
		{"/api/%2E%2E/x", true},
		{"/api/a%2Fb", true},
		{"/api/a%5Cb", true},
		{"/api/a%252fb", true},
		{"/api/..;jsessionid=1/x", true},
	} {
		u, err := url.ParseRequestURI(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := ambiguousPath(u.EscapedPath(), u.Path); got != tt.want {
			t.Errorf("ambiguousPath(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestVaultPlainHTTPKeepsConnectionsPerAddress: over plain HTTP nothing but the
// address ties a connection to a host, so the proxy's upstream connections are kept per
// address the workload connected to. A request under a bound Host that no binding
// matches may go to any intercepted address (nothing is injected); the next, matching
// request to the host's own address must not ride the connection the first one left
// open to that other address. Both upstreams are plain-HTTP servers this test starts
// on loopback, on one port of two addresses.
func TestVaultPlainHTTPKeepsConnectionsPerAddress(t *testing.T) {
	const secret = "s3cret-upstream-token"
	type seenReq struct{ server, auth string }
	var mu sync.Mutex
	var seen []seenReq
	serve := func(name string, ln net.Listener) {
		srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, seenReq{name, r.Header.Get("Authorization")})
			mu.Unlock()
			_, _ = io.WriteString(w, name)
		})}}
		srv.Start()
		t.Cleanup(srv.Close)
	}
	good, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := good.Addr().(*net.TCPAddr).Port
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2:%d: %v", port, err)
	}
	serve("good", good)
	serve("other", other)
	goodDst := netip.MustParseAddrPort(good.Addr().String())
	otherDst := netip.MustParseAddrPort(other.Addr().String())

	enf := &enforcer{vaultPort: DefaultVaultPort, pins: map[netip.Addr]*pinned{
		goodDst.Addr():  {expires: time.Now().Add(time.Hour), names: map[string]bool{"api.test": true}},
		otherDst.Addr(): {expires: time.Now().Add(time.Hour), names: map[string]bool{"other.test": true}},
	}}
	b := bearer("api", "api.test", "/api/*")
	b.Match.Schemes = []string{"http"}
	b.Match.Ports = []int{port}
	v, verr := newVault(VaultCreate{Credentials: []Credential{{Name: "tok", Source: CredentialSource{Value: secret}}}, Bindings: []Binding{b}})
	if verr != nil {
		t.Fatal(verr)
	}
	enf.vault.Store(v)
	p := &vaultProxy{enf: enf, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dialer: &net.Dialer{Timeout: 5 * time.Second}}
	p.client = &http.Transport{DialContext: p.dialPlain, MaxIdleConnsPerHost: 8}
	t.Cleanup(p.client.CloseIdleConnections)

	send := func(target string, dst netip.AddrPort) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", target, nil)
		req.Host = "api.test"
		req.Header.Set("Authorization", "Bearer fake-token-in-sandbox")
		rec := httptest.NewRecorder()
		p.forward(rec, req, "http", "", dst)
		return rec
	}
	if rec := send("/other", otherDst); rec.Code != 200 || rec.Body.String() != "other" {
		t.Fatalf("unbound path to the other address: %d %s", rec.Code, rec.Body)
	}
	if rec := send("/api/x", goodDst); rec.Code != 200 || rec.Body.String() != "good" {
		t.Fatalf("bound path to the host's address answered %d %q, want the host's own server", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s.server != "good" && strings.Contains(s.auth, secret) {
			t.Fatalf("the %s server got the credential", s.server)
		}
	}
}
