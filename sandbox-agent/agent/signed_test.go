package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
)

// signedRequest is a request to a signed the way the gateway signs, with key.
func signedRequest(t *testing.T, a *testAgent, key, method, path string, body io.Reader) (*http.Request, string) {
	t.Helper()
	req, err := http.NewRequest(method, a.url(path), body)
	if err != nil {
		t.Fatal(err)
	}
	return req, agentauth.Sign(req, key, time.Now())
}

// signedHeaders are the signature headers of a GET of path signed with the agent's
// token (for a WebSocket dial, which takes headers, not a request), and its nonce.
func signedHeaders(t *testing.T, a *testAgent, path string) (http.Header, string) {
	t.Helper()
	req, nonce := signedRequest(t, a, testToken, "GET", path, nil)
	h := http.Header{}
	for _, k := range []string{agentauth.Scheme.HeaderTimestamp, agentauth.Scheme.HeaderNonce, agentauth.Scheme.HeaderSignature} {
		h.Set(k, req.Header.Get(k))
	}
	return h, nonce
}

// TestSignedCalls: the agent takes a request signed with its token and signs its
// answer (streams and WebSocket upgrades included); it refuses a replayed request, one
// signed with another key or not signed at all, and passes no signature on to a server
// of the sandbox.
func TestSignedCalls(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	do := func(req *http.Request) *http.Response {
		t.Helper()
		resp, err := a.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	req, nonce := signedRequest(t, a, testToken, "GET", "/ping", nil)
	if resp := do(req); resp.StatusCode != 200 || !agentauth.Answered(resp, testToken, nonce) {
		t.Fatalf("signed /ping: %d, answer signed %t", resp.StatusCode, agentauth.Answered(resp, testToken, nonce))
	}
	replay := req.Clone(context.Background())
	if resp := do(replay); resp.StatusCode != 401 {
		t.Fatalf("replayed /ping: %d, want 401", resp.StatusCode)
	} else if !agentauth.Answered(resp, testToken, nonce) {
		t.Fatal("the refusal of a replay is not signed")
	}
	forged, forgedNonce := signedRequest(t, a, "not-the-token", "GET", "/ping", nil)
	if resp := do(forged); resp.StatusCode != 401 || agentauth.Answered(resp, "not-the-token", forgedNonce) {
		t.Fatalf("request signed with another key: %d", resp.StatusCode)
	}
	bare, _ := http.NewRequest("GET", a.url("/ping"), nil)
	if resp := do(bare); resp.StatusCode != 401 {
		t.Fatalf("unsigned request: %d, want 401", resp.StatusCode)
	}

	t.Run("a streamed command's answer is signed", func(t *testing.T) {
		req, nonce := signedRequest(t, a, testToken, "POST", "/command", strings.NewReader(`{"command":"echo signed"}`))
		req.Header.Set("Content-Type", "application/json")
		resp := do(req)
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !agentauth.Answered(resp, testToken, nonce) || !strings.Contains(string(out), "signed") {
			t.Fatalf("command: %d, signed %t, body %s", resp.StatusCode, agentauth.Answered(resp, testToken, nonce), out)
		}
	})

	t.Run("a WebSocket upgrade is signed", func(t *testing.T) {
		id := createPTY(t, a, map[string]any{"cwd": t.TempDir()})
		h, nonce := signedHeaders(t, a, "/pty/"+id+"/ws")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.srv.URL, "http")+"/pty/"+id+"/ws", &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.CloseNow()
		if resp.StatusCode != http.StatusSwitchingProtocols || !agentauth.Answered(resp, testToken, nonce) {
			t.Fatalf("upgrade: %d, signed %t", resp.StatusCode, agentauth.Answered(resp, testToken, nonce))
		}
	})

	t.Run("a WebSocket upgrade through the port proxy is signed", func(t *testing.T) {
		port := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err == nil {
				c.Close(websocket.StatusNormalClosure, "")
			}
		}))
		path := fmt.Sprintf("/proxy/%d/ws", port)
		h, nonce := signedHeaders(t, a, path)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.srv.URL, "http")+path, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.CloseNow()
		if !agentauth.Answered(resp, testToken, nonce) {
			t.Fatal("the proxied upgrade's 101 is not signed")
		}
	})

	t.Run("no signature reaches a server of the sandbox", func(t *testing.T) {
		seen := make(chan http.Header, 1)
		port := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Clone()
		}))
		req, nonce := signedRequest(t, a, testToken, "GET", fmt.Sprintf("/proxy/%d/x", port), nil)
		if resp := do(req); resp.StatusCode != 200 || !agentauth.Answered(resp, testToken, nonce) {
			t.Fatalf("proxied: %d", resp.StatusCode)
		}
		for k := range <-seen {
			if strings.HasPrefix(strings.ToLower(k), "x-sandgate-agent-") || strings.EqualFold(k, agent.TokenHeader) {
				t.Fatalf("the sandbox's server got %s", k)
			}
		}
	})
}
