package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/gateway"
)

// forwardVia serves every request to upstream with fwd (the rewriting done by proxyAs
// is not part of it: the request goes as it came).
func forwardVia(t *testing.T, fwd Forward, upstream string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fwd(w, r, upstream) }))
	t.Cleanup(srv.Close)
	return srv
}

// TestLeanForwardSendsWhatHTTPUtilSends: for GET and HEAD requests with hop-by-hop
// headers, the client's own forwarding headers, TE and queries, the upstream receives
// the same request head through leanForward as through httputil, and the client the
// same answer head (hop-by-hop headers of the answer dropped, trailers passed on).
func TestLeanForwardSendsWhatHTTPUtilSends(t *testing.T) {
	type seen struct {
		Method, URI, Host string
		Header            http.Header
	}
	got := make(chan seen, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header}
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "dropped")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Answer", "kept")
		if r.URL.Query().Has("trailer") {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			return
		}
		if r.URL.Query().Has("chunked") {
			io.WriteString(w, "one")
			w.(http.Flusher).Flush()
			io.WriteString(w, "two")
			return
		}
		io.WriteString(w, "small")
	}))
	t.Cleanup(upstream.Close)
	addr := strings.TrimPrefix(upstream.URL, "http://")
	noErr := func(w http.ResponseWriter, r *http.Request, err error) {
		t.Errorf("forward: %v", err)
		w.WriteHeader(502)
	}
	lean := newLeanForward(noErr)
	viaLean := forwardVia(t, func(w http.ResponseWriter, r *http.Request, up string) {
		if !lean.handles(r) {
			t.Errorf("%s %s: not taken by the lean forward", r.Method, r.URL)
		}
		lean.serve(w, r, up)
	}, addr)
	viaHTTPUtil := forwardVia(t, httputilForward(noErr), addr)
	for _, tt := range []struct {
		name, method, query string
		header              map[string]string
	}{
		{"plain", "GET", "", nil},
		{"head", "HEAD", "", nil},
		{"query", "GET", "?a=1&b=%20x", nil},
		{"hop-by-hop", "GET", "", map[string]string{"Connection": "X-Hop, keep-alive", "X-Hop": "1", "Keep-Alive": "300", "Proxy-Authorization": "Basic x", "Upgrade-Insecure-Requests": "1"}},
		{"client's forwarding headers", "GET", "", map[string]string{"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "evil", "X-Forwarded-Proto": "https", "Forwarded": "for=6.6.6.6"}},
		{"te trailers", "GET", "", map[string]string{"TE": "gzip, trailers"}},
		{"te trailers with a parameter", "GET", "", map[string]string{"TE": "trailers;q=1"}},
		{"te other", "GET", "", map[string]string{"TE": "gzip"}},
		{"user agent and more", "GET", "", map[string]string{"User-Agent": "ua/1", "Accept": "*/*", "Cookie": "a=b", "X-Multi": "one"}},
		{"trailer", "GET", "?trailer=1", nil},
		{"chunked", "GET", "?chunked=1", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			type answer struct {
				Up                seen
				Status            int
				Header, Trailer   http.Header
				Body              string
				ContentLength     int64
				TransferEncodings []string
			}
			do := func(base string) answer {
				req, _ := http.NewRequest(tt.method, base+"/p/a%2Fb"+tt.query, nil)
				for k, v := range tt.header {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultTransport.(*http.Transport).Clone().RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				resp.Header.Del("Date")
				up := <-got
				up.Host = strings.TrimPrefix(up.Host, strings.TrimPrefix(base, "http://")) // each proxy's own address
				up.Header.Set("X-Forwarded-Host", strings.TrimPrefix(up.Header.Get("X-Forwarded-Host"), strings.TrimPrefix(base, "http://")))
				return answer{up, resp.StatusCode, resp.Header, resp.Trailer, string(body), resp.ContentLength, resp.TransferEncoding}
			}
			want, have := do(viaHTTPUtil.URL), do(viaLean.URL)
			if diff := cmp.Diff(want, have); diff != "" {
				t.Errorf("lean forward differs from httputil (-httputil +lean):\n%s", diff)
			}
		})
	}
}

// TestLeanForwardRetriesAClosedIdleConnection: the upstream closes the idle keep-alive
// connection between two requests; the second request still gets its answer.
func TestLeanForwardRetriesAClosedIdleConnection(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(upstream.Close)
	lean := newLeanForward(func(w http.ResponseWriter, r *http.Request, err error) {
		t.Errorf("forward: %v", err)
		w.WriteHeader(502)
	})
	via := forwardVia(t, lean.serve, strings.TrimPrefix(upstream.URL, "http://"))
	for i := 0; i < 3; i++ {
		resp, err := http.Get(via.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		upstream.CloseClientConnections()
		time.Sleep(10 * time.Millisecond) // the close reaches the gateway's side
	}
}

// TestLeanForwardStreams: an event stream's events reach the client as they are sent,
// and a client that goes away breaks the upstream request off.
func TestLeanForwardStreams(t *testing.T) {
	gone := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the gateway closed its connection
		close(gone)
	}))
	t.Cleanup(upstream.Close)
	lean := newLeanForward(func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(502) })
	via := forwardVia(t, lean.serve, strings.TrimPrefix(upstream.URL, "http://"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(via.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(conn, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: 1\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	conn.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not broken off when the client went away")
	}
}

// TestLeanForwardUnreachable: a port nothing listens on is the forward's error.
func TestLeanForwardUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	var failed error
	lean := newLeanForward(func(w http.ResponseWriter, r *http.Request, err error) { failed = err; w.WriteHeader(502) })
	rec := httptest.NewRecorder()
	lean.serve(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/", nil), addr)
	if rec.Code != 502 || failed == nil {
		t.Fatalf("status %d, error %v", rec.Code, failed)
	}
}

// TestLeanForwardTakes: which requests the lean forward takes; a body, an upgrade or an
// upstream secret leaves the request to httputil.
func TestLeanForwardTakes(t *testing.T) {
	lean := newLeanForward(nil)
	wrapped := httptest.NewRequest("GET", "/x", nil)
	wrapped.Body = io.NopCloser(strings.NewReader("")) // Caddy wraps even an empty body
	upgrade := httptest.NewRequest("GET", "/ws", nil)
	upgrade.Header.Set("Upgrade", "websocket")
	chunked := httptest.NewRequest("GET", "/x", nil)
	chunked.ContentLength, chunked.TransferEncoding = -1, []string{"chunked"}
	for _, tt := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"get", httptest.NewRequest("GET", "/x?a=1", nil), true},
		{"head", httptest.NewRequest("HEAD", "/x", nil), true},
		{"empty body wrapped", wrapped, true},
		{"post", httptest.NewRequest("POST", "/x", nil), false},
		{"get with a body", httptest.NewRequest("GET", "/x", strings.NewReader("b")), false},
		{"get chunked", chunked, false},
		{"upgrade", upgrade, false},
		{"agent secret", withUpstreamSecret(httptest.NewRequest("GET", "/ping", nil), "X-Secret", "s"), false},
		{"semicolon query", httptest.NewRequest("GET", "/x?a=1;b=2", nil), false},
		{"bad escape", httptest.NewRequest("GET", "/x?a=%zz", nil), false},
	} {
		if got := lean.handles(tt.r); got != tt.want {
			t.Errorf("%s: handles %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestLeanForwardFlushesEventStreams: an answer of unknown length or of type
// text/event-stream (however written) is flushed at every write; others are not.
func TestLeanForwardFlushesEventStreams(t *testing.T) {
	for _, tt := range []struct {
		contentType string
		length      int64
		want        bool
	}{
		{"text/event-stream", 10, true},
		{"text/event-stream; charset=utf-8", 10, true},
		{"Text/Event-Stream", 10, true},
		{" text/event-stream", 10, true},
		{"application/json", -1, true},
		{"application/json", 10, false},
		{"text/html; charset=utf-8", 10, false},
		{"text/", 10, false},
		{"tex", 10, false},
		{"", 10, false},
	} {
		res := &http.Response{ContentLength: tt.length, Header: http.Header{}}
		if tt.contentType != "" {
			res.Header.Set("Content-Type", tt.contentType)
		}
		if got := flushesAtOnce(res); got != tt.want {
			t.Errorf("%q, length %d: flushesAtOnce %v, want %v", tt.contentType, tt.length, got, tt.want)
		}
	}
}

// TestStripCredentialsFromQueryAndCookies: the link token leaves the query however its
// name is spelled (escapes included), a query without one is sent as written, and the
// gateway's cookies and headers never reach the sandbox.
func TestStripCredentialsFromQueryAndCookies(t *testing.T) {
	for _, tt := range []struct{ query, want string }{
		{"", ""},
		{"a=1", "a=1"},
		{"a=%20b&c=d", "a=%20b&c=d"}, // no token: not re-encoded
		{"a=1&" + linkQueryParam + "=tok", "a=1"},
		{"a=1&sandgate%5Ftoken=tok", "a=1"},
		{"%73andgate_token=tok", ""},
	} {
		r := httptest.NewRequest("GET", "/x?"+tt.query, nil)
		r.Header.Set("Cookie", cookieName+"=c1; theirs=2; "+sessionCookie+"=s")
		r.Header.Set(gateway.HeaderAccessToken, "sga1.k.mac")
		r.Header.Set("X-API-Key", "key")
		stripCredentials(r, false)
		if r.URL.RawQuery != tt.want {
			t.Errorf("query %q: sent %q, want %q", tt.query, r.URL.RawQuery, tt.want)
		}
		if got := r.Header.Values("Cookie"); len(got) != 1 || got[0] != "theirs=2" {
			t.Errorf("query %q: cookies sent %q", tt.query, got)
		}
		for _, h := range []string{gateway.HeaderAccessToken, "X-API-Key"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("%s sent: %q", h, v)
			}
		}
	}
}
