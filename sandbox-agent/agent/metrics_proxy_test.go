package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

func TestMetrics(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	var m agent.Metrics
	a.mustJSON(http.MethodGet, "/metrics", nil, 200, &m)
	if m.CPUCount <= 0 || m.MemTotalMiB <= 0 || m.MemUsedMiB <= 0 || m.MemUsedMiB > m.MemTotalMiB || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Fatalf("implausible metrics %+v", m)
	}
	if d := time.Since(time.UnixMilli(m.Timestamp)); d < 0 || d > 5*time.Second {
		t.Fatalf("timestamp %d is %v old", m.Timestamp, d)
	}

	resp := a.request(http.MethodGet, "/metrics/watch", nil, nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	start := time.Now()
	var stamps []int64
	for len(stamps) < 3 && sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m agent.Metrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("watch line %q: %v", line, err)
		}
		stamps = append(stamps, m.Timestamp)
	}
	if len(stamps) != 3 {
		t.Fatalf("got %d lines: %v", len(stamps), sc.Err())
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 4*time.Second {
		t.Fatalf("3 lines took %v, want about 2 s", took)
	}
}

// startBackend serves h on a loopback port and returns the port.
func startBackend(t *testing.T, h http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestProxy(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	port := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ws":
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, msg, err := c.Read(r.Context())
				if err != nil {
					return
				}
				_ = c.Write(r.Context(), typ, append([]byte("echo:"), msg...))
			}
		case r.URL.Path == "/stream":
			rc := http.NewResponseController(w)
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "tick %d\n", i)
				_ = rc.Flush()
				time.Sleep(150 * time.Millisecond)
			}
		default:
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Backend", "yes")
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprintf(w, "%s %s?%s token=%q body=%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get(agent.TokenHeader), body)
		}
	}))
	base := fmt.Sprintf("/proxy/%d", port)
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		want   string
	}{
		{"get with query", http.MethodGet, base + "/hello/world?x=1&y=2", "", `GET /hello/world?x=1&y=2 token="" body=`},
		{"root", http.MethodGet, base, "", `GET /? token="" body=`},
		{"post body", http.MethodPost, base + "/submit", "payload", `POST /submit? token="" body=payload`},
		{"escaped path kept", http.MethodGet, base + "/a%2Fb/c%20d", "", `GET /a%2Fb/c%20d? token="" body=`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := a.with(t)
			resp := a.request(tt.method, tt.path, strings.NewReader(tt.body), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Backend") != "yes" || string(b) != tt.want {
				t.Fatalf("got %d %q, want 418 %q", resp.StatusCode, b, tt.want)
			}
		})
	}
	t.Run("streams", func(t *testing.T) {
		a := a.with(t)
		resp := a.request(http.MethodGet, base+"/stream", nil, nil)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		start := time.Now()
		line, err := br.ReadString('\n')
		if err != nil || line != "tick 0\n" {
			t.Fatalf("first line %q %v", line, err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("first line took %v: the proxy buffers", took)
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != "tick 1\ntick 2\n" {
			t.Fatalf("rest %q", rest)
		}
	})
	t.Run("websocket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u := "ws" + strings.TrimPrefix(a.srv.URL, "http") + base + "/ws"
		c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{agent.TokenHeader: {testToken}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		for _, msg := range []string{"one", "two"} {
			if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := c.Read(ctx)
			if err != nil || string(got) != "echo:"+msg {
				t.Fatalf("got %q %v", got, err)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		a := a.with(t)
		// A port with nothing listening: start and stop a listener.
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		a.wantError(http.MethodGet, fmt.Sprintf("/proxy/%d/x", dead), nil, http.StatusBadGateway, agent.CodeBadGateway)
		a.wantError(http.MethodGet, "/proxy/notaport/x", nil, 400, agent.CodeInvalidRequest)
		a.wantError(http.MethodGet, "/proxy/70000/x", nil, 400, agent.CodeInvalidRequest)
	})
}
