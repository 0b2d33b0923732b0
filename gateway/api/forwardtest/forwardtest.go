// Package forwardtest holds the forwarding rules every forwarder of the gateway keeps,
// as one table run against each of them: gateway/api's lean forward and its httputil
// forward (api.NewForward's two paths), and Caddy's reverse_proxy as caddy/modules
// configures it. A rule sends a request through a forwarder to a loopback upstream the
// rule starts, and checks what the upstream saw and what the client got:
//
//   - hop-by-hop headers (RFC 9110 7.6.1: Connection, Keep-Alive, Proxy-*, TE but
//     "trailers", Trailer, Transfer-Encoding, Upgrade, and every header the Connection
//     header names) go neither up nor down;
//   - X-Forwarded-For, -Host and -Proto are the gateway's, never the client's;
//   - an answer of unknown length, or an event stream, reaches the client write by write;
//   - 1xx answers (103 Early Hints) are passed on before the final one;
//   - trailers are passed on, announced or not;
//   - an upgrade (101) is relayed, and the connection carries bytes both ways.
//
// It is a test helper: nothing in the binary imports it.
package forwardtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// Forwarder is a forwarder under test.
type Forwarder struct {
	Name string
	// Start starts a front on loopback that forwards every request to upstream
	// ("ip:port") and returns its base URL ("http://ip:port"); it stops it in
	// t.Cleanup.
	Start func(t *testing.T, upstream string) string
	// Takes reports whether the forwarder is the one the gateway uses for r; a rule
	// whose request it does not take is skipped for it. Nil takes every request.
	Takes func(r *http.Request) bool
}

// Serve starts a front on loopback that serves every request with forward, for
// Forwarder.Start.
func Serve(t *testing.T, upstream string, forward func(w http.ResponseWriter, r *http.Request, upstream string)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forward(w, r, upstream) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rule is one forwarding rule: the upstream it starts, and the request and checks.
type rule struct {
	name string
	// request is what the client sends (its URL is the front's base; the rule adds
	// the path).
	request func(front string) *http.Request
	// upstream answers it; seen receives each request the upstream got.
	upstream func(seen chan<- *http.Request) http.HandlerFunc
	// check sends req through the front and checks the outcome.
	check func(t *testing.T, req *http.Request, seen <-chan *http.Request)
}

// streamWait is how long an upstream of a streaming rule waits for the client to have
// read its first write before it writes the rest anyway.
const streamWait = 3 * time.Second

var rules = []rule{
	{
		name: "request hop-by-hop headers are dropped",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/hop", nil)
			r.Header.Set("Connection", "X-Hop, keep-alive")
			r.Header.Set("X-Hop", "1")
			r.Header.Set("Keep-Alive", "300")
			r.Header.Set("Proxy-Authorization", "Basic eDp5")
			r.Header.Set("Te", "trailers, deflate")
			r.Header.Set("X-End-To-End", "kept")
			return r
		},
		upstream: recordRequest,
		check: func(t *testing.T, req *http.Request, seen <-chan *http.Request) {
			res := send(t, req)
			drain(t, res)
			got := <-seen
			for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Upgrade"} {
				if v, ok := got.Header[h]; ok {
					t.Errorf("the upstream got hop-by-hop header %s: %q", h, v)
				}
			}
			if te := got.Header.Values("Te"); len(te) > 1 || (len(te) == 1 && te[0] != "trailers") {
				t.Errorf("TE upstream = %q, want only \"trailers\" or none", te)
			}
			if got.Header.Get("X-End-To-End") != "kept" {
				t.Errorf("an end-to-end header was dropped: %v", got.Header)
			}
		},
	},
	{
		name: "answer hop-by-hop headers are dropped",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/hop", nil)
			return r
		},
		upstream: func(chan<- *http.Request) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "X-Upstream-Hop")
				w.Header().Set("X-Upstream-Hop", "1")
				w.Header().Set("Keep-Alive", "timeout=5")
				w.Header().Set("Proxy-Authenticate", "Basic")
				w.Header().Set("X-Answer", "kept")
				_, _ = io.WriteString(w, "ok")
			}
		},
		check: func(t *testing.T, req *http.Request, _ <-chan *http.Request) {
			res := send(t, req)
			drain(t, res)
			for _, h := range []string{"X-Upstream-Hop", "Keep-Alive", "Proxy-Authenticate"} {
				if v, ok := res.Header[h]; ok {
					t.Errorf("the client got hop-by-hop header %s: %q", h, v)
				}
			}
			if res.Header.Get("X-Answer") != "kept" {
				t.Errorf("an end-to-end header was dropped: %v", res.Header)
			}
		},
	},
	{
		name: "forwarding headers are the gateway's",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/fwd", nil)
			r.Header.Set("X-Forwarded-For", "192.0.2.66")
			r.Header.Set("X-Forwarded-Host", "evil.example")
			r.Header.Set("X-Forwarded-Proto", "https")
			r.Header.Set("Forwarded", "for=192.0.2.66;host=evil.example;proto=https")
			return r
		},
		upstream: recordRequest,
		check: func(t *testing.T, req *http.Request, seen <-chan *http.Request) {
			res := send(t, req)
			drain(t, res)
			got := <-seen
			if v := got.Header.Values("X-Forwarded-For"); len(v) != 1 || v[0] != "127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q, want the client's address alone", v)
			}
			if v := got.Header.Values("X-Forwarded-Host"); len(v) != 1 || v[0] != req.URL.Host {
				t.Errorf("X-Forwarded-Host = %q, want %q", v, req.URL.Host)
			}
			if v := got.Header.Values("X-Forwarded-Proto"); len(v) != 1 || v[0] != "http" {
				t.Errorf("X-Forwarded-Proto = %q, want http", v)
			}
			if v, ok := got.Header["Forwarded"]; ok {
				t.Errorf("the client's Forwarded reached the upstream: %q", v)
			}
		},
	},
	{
		name: "an answer of unknown length is flushed at each write",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/stream", nil)
			return r
		},
		upstream: streamingUpstream("text/plain", false),
		check:    checkStreamed,
	},
	{
		name: "an event stream is flushed at each write",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/events", nil)
			return r
		},
		upstream: streamingUpstream("text/event-stream", true),
		check:    checkStreamed,
	},
	{
		name: "1xx answers are passed on",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/hints", nil)
			return r
		},
		upstream: func(chan<- *http.Request) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</style.css>; rel=preload; as=style")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
				_, _ = io.WriteString(w, "ok")
			}
		},
		check: func(t *testing.T, req *http.Request, _ <-chan *http.Request) {
			var codes []int
			var link string
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				codes = append(codes, code)
				link = h.Get("Link")
				return nil
			}}
			res := send(t, req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
			drain(t, res)
			if len(codes) != 1 || codes[0] != http.StatusEarlyHints || link != "</style.css>; rel=preload; as=style" {
				t.Errorf("1xx answers = %v (Link %q), want one 103 with the upstream's Link", codes, link)
			}
			if res.StatusCode != http.StatusOK {
				t.Errorf("status = %d, want 200", res.StatusCode)
			}
		},
	},
	{
		name: "announced trailers are passed on",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/trailer", nil)
			return r
		},
		upstream: func(chan<- *http.Request) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-Sum")
				_, _ = io.WriteString(w, "body")
				w.Header().Set("X-Sum", "42")
			}
		},
		check: func(t *testing.T, req *http.Request, _ <-chan *http.Request) {
			res := send(t, req)
			if body := drain(t, res); body != "body" {
				t.Errorf("body = %q", body)
			}
			if got := res.Trailer.Get("X-Sum"); got != "42" {
				t.Errorf("trailer X-Sum = %q (trailers %v), want 42", got, res.Trailer)
			}
		},
	},
	{
		name: "unannounced trailers are passed on",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/late", nil)
			return r
		},
		upstream: func(chan<- *http.Request) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "body")
				http.NewResponseController(w).Flush() // chunked: a trailer can follow
				w.Header().Set(http.TrailerPrefix+"X-Late", "7")
			}
		},
		check: func(t *testing.T, req *http.Request, _ <-chan *http.Request) {
			res := send(t, req)
			drain(t, res)
			if got := res.Trailer.Get("X-Late"); got != "7" {
				t.Errorf("trailer X-Late = %q (trailers %v), want 7", got, res.Trailer)
			}
		},
	},
	{
		name: "an upgrade is relayed both ways",
		request: func(front string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, front+"/upgrade", nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "echo")
			return r
		},
		upstream: func(seen chan<- *http.Request) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				seen <- r
				if r.Header.Get("Upgrade") != "echo" || !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
					http.Error(w, "no upgrade asked", http.StatusBadRequest)
					return
				}
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer conn.Close()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
				_ = brw.Flush()
				_ = conn.SetDeadline(time.Now().Add(streamWait))
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = brw.WriteString("echo " + line)
				_ = brw.Flush()
			}
		},
		check: func(t *testing.T, req *http.Request, seen <-chan *http.Request) {
			conn, err := net.DialTimeout("tcp", req.URL.Host, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * streamWait))
			if err := req.Write(conn); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatalf("upgrade answer: %v", err)
			}
			if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Upgrade") != "echo" {
				t.Fatalf("upgrade answer = %d, Upgrade %q; want 101 echo", res.StatusCode, res.Header.Get("Upgrade"))
			}
			<-seen
			if _, err := io.WriteString(conn, "ping\n"); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "echo ping\n" {
				t.Errorf("over the upgraded connection: %q, %v; want \"echo ping\"", line, err)
			}
		},
	},
}

// Run runs every rule against every forwarder, each in a subtest named rule/forwarder.
func Run(t *testing.T, forwarders ...Forwarder) {
	for _, rl := range rules {
		t.Run(rl.name, func(t *testing.T) {
			for _, fw := range forwarders {
				t.Run(fw.Name, func(t *testing.T) {
					seen := make(chan *http.Request, 4)
					upstream := httptest.NewServer(rl.upstream(seen))
					t.Cleanup(upstream.Close)
					front := fw.Start(t, strings.TrimPrefix(upstream.URL, "http://"))
					req := rl.request(front)
					if fw.Takes != nil && !fw.Takes(req) {
						t.Skipf("%s does not take this request", fw.Name)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 4*streamWait)
					t.Cleanup(cancel)
					rl.check(t, req.WithContext(ctx), seen)
				})
			}
		})
	}
}

// recordRequest is an upstream that hands each request it gets to seen and answers ok.
func recordRequest(seen chan<- *http.Request) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seen <- r
		_, _ = io.WriteString(w, "ok")
	}
}

// streamingUpstream writes "first", flushes, waits until the client has read it (or
// streamWait passes), then writes "second"; withLength announces the whole length.
func streamingUpstream(contentType string, withLength bool) func(chan<- *http.Request) http.HandlerFunc {
	return func(seen chan<- *http.Request) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			if withLength {
				w.Header().Set("Content-Length", fmt.Sprint(len("first")+len("second")))
			}
			_, _ = io.WriteString(w, "first")
			http.NewResponseController(w).Flush()
			select {
			case <-readFirst(r):
			case <-time.After(streamWait):
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "second")
		}
	}
}

// readFirst is closed when the client of r's stream has read its first write; the
// client names the channel in the X-Stream header.
func readFirst(r *http.Request) <-chan struct{} {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	if ch, ok := streams[r.Header.Get("X-Stream")]; ok {
		return ch
	}
	return closed // read already, or no stream of checkStreamed
}

var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// checkStreamed sends a request to a streamingUpstream and wants "first" before the
// upstream writes "second".
func checkStreamed(t *testing.T, req *http.Request, _ <-chan *http.Request) {
	id, done := newStream()
	defer done()
	req.Header.Set("X-Stream", id)
	start := time.Now()
	res := send(t, req)
	defer res.Body.Close()
	first := make([]byte, len("first"))
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if waited := time.Since(start); waited >= streamWait {
		t.Errorf("the first write came after %v: held back until the upstream wrote more", waited)
	}
	done()
	rest, _ := io.ReadAll(res.Body)
	if string(first)+string(rest) != "firstsecond" {
		t.Errorf("body = %q", string(first)+string(rest))
	}
}

// send sends req with a client of its own (no connection shared between subtests).
func send(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return res
}

// drain reads res's body to its end (trailers come after it) and closes it.
func drain(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("body: %v", err)
	}
	return string(b)
}

// streams are the open streams of checkStreamed, by the id it sends in X-Stream: each
// channel is closed once the client has read the first write.
var (
	streamsMu sync.Mutex
	streams   = map[string]chan struct{}{}
	streamSeq int
)

// newStream registers a stream; done closes its channel (at most once) and forgets it.
func newStream() (id string, done func()) {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	streamSeq++
	id = fmt.Sprint(streamSeq)
	ch := make(chan struct{})
	streams[id] = ch
	var once sync.Once
	return id, func() {
		once.Do(func() {
			streamsMu.Lock()
			delete(streams, id)
			streamsMu.Unlock()
			close(ch)
		})
	}
}
