package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

const testToken = "test-token-123"

// testAgent is a real agent API served on loopback.
type testAgent struct {
	t      testing.TB
	srv    *httptest.Server
	api    *agent.Server
	client *http.Client
}

func newTestAgent(t testing.TB, cfg agent.Config) *testAgent {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	api, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	agent.WaitShellProbe(api)
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		api.Close()
	})
	return &testAgent{t: t, srv: srv, api: api, client: srv.Client()}
}

// with returns the agent bound to a subtest's t, so that helpers fail the subtest.
func (a *testAgent) with(t testing.TB) *testAgent {
	c := *a
	c.t = t
	return &c
}

func (a *testAgent) url(path string) string { return a.srv.URL + path }

func (a *testAgent) request(method, path string, body io.Reader, hdr http.Header) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url(path), body)
	if err != nil {
		a.t.Fatalf("new request: %v", err)
	}
	req.Header.Set(agent.TokenHeader, testToken)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// do sends a JSON body (nil for none) and returns status and body.
func (a *testAgent) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	resp := a.request(method, path, rd, http.Header{"Content-Type": {"application/json"}})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mustJSON sends a request, requires want status and decodes the body into out.
func (a *testAgent) mustJSON(method, path string, body any, want int, out any) {
	a.t.Helper()
	status, b := a.do(method, path, body)
	if status != want {
		a.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
}

// wantError checks an error response's status and code.
func (a *testAgent) wantError(method, path string, body any, status int, code string) {
	a.t.Helper()
	got, b := a.do(method, path, body)
	var e struct{ Code, Message string }
	_ = json.Unmarshal(b, &e)
	if got != status || e.Code != code || e.Message == "" {
		a.t.Fatalf("%s %s: got %d %s, want %d with code %s", method, path, got, b, status, code)
	}
}

// eventReader reads execution events from a stream response.
type eventReader struct {
	resp *http.Response
	br   *bufio.Reader
}

func (a *testAgent) openStream(path string, body any) *eventReader {
	a.t.Helper()
	b, _ := json.Marshal(body)
	resp := a.request(http.MethodPost, path, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, msg)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		a.t.Fatalf("POST %s: content type %q", path, ct)
	}
	a.t.Cleanup(func() { resp.Body.Close() })
	return &eventReader{resp: resp, br: bufio.NewReaderSize(resp.Body, 1<<20)}
}

// next returns the next event, or false at the end of the stream.
func (r *eventReader) next(t testing.TB) (agent.Event, bool) {
	t.Helper()
	for {
		line, err := r.br.ReadBytes('\n')
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			line = bytes.TrimPrefix(line, []byte("data:"))
			var ev agent.Event
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				t.Fatalf("bad event %q: %v", line, jerr)
			}
			if ev.Timestamp == 0 {
				t.Fatalf("event without timestamp: %q", line)
			}
			return ev, true
		}
		if err != nil {
			return agent.Event{}, false
		}
	}
}

// all reads the stream to its end.
func (r *eventReader) all(t testing.TB) []agent.Event {
	t.Helper()
	var out []agent.Event
	for {
		ev, ok := r.next(t)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func (a *testAgent) runStream(path string, body any) []agent.Event {
	a.t.Helper()
	return a.openStream(path, body).all(a.t)
}

// texts collects the text of events of one type (pings ignored).
func texts(events []agent.Event, typ string) []string {
	var out []string
	for _, ev := range events {
		if ev.Type == typ {
			out = append(out, ev.Text)
		}
	}
	return out
}

func last(t testing.TB, events []agent.Event) agent.Event {
	t.Helper()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != agent.EventPing {
			return events[i]
		}
	}
	t.Fatalf("no events")
	return agent.Event{}
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
