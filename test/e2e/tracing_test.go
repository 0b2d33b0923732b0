package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver (the collector's otlphttp
// protocol, protobuf bodies) on a loopback port.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPReceiver(t testing.TB) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// find returns the received spans that pass keep.
func (rc *otlpReceiver) find(keep func(*tracepb.Span) bool) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// TestTracesOfACreate: with OTEL_EXPORTER_OTLP_ENDPOINT set, one create is one trace —
// the request's span (with the request id) and, under it, the create's stages and the
// gateway's calls to the agent — and a proxied request carries its trace into the
// sandbox in traceparent.
func TestTracesOfACreate(t *testing.T) {
	rc := startOTLPReceiver(t)
	e := newEnv(t, nil)
	g := e.startGateway("OTEL_EXPORTER_OTLP_ENDPOINT=" + rc.srv.URL)
	reqID := "trace-" + randomHex(6)
	r := g.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": baseImage}, "entrypoint": []string{"tail", "-f", "/dev/null"}}, "X-Request-ID", reqID)
	if r.Status != 202 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)

	var root *tracepb.Span
	waitFor(t, 30*time.Second, func() bool {
		roots := rc.find(func(s *tracepb.Span) bool { return spanAttr(s, "sandgate.request_id") == reqID })
		if len(roots) == 1 {
			root = roots[0]
		}
		return root != nil
	}, "the create's request span")
	if root.Name != "POST /v1/sandboxes" || root.Kind != tracepb.Span_SPAN_KIND_SERVER || len(root.ParentSpanId) != 0 {
		t.Fatalf("request span: name %q kind %v parent %x", root.Name, root.Kind, root.ParentSpanId)
	}
	want := []string{"sandgate.create.admission", "sandgate.create.store", "sandgate.create.runtime_create", "sandgate.create.agent_ready", "GET /ping"}
	var names map[string]bool
	waitFor(t, 30*time.Second, func() bool {
		names = map[string]bool{}
		for _, s := range rc.find(func(s *tracepb.Span) bool { return string(s.TraceId) == string(root.TraceId) }) {
			names[s.Name] = true
			if s.Name != root.Name && len(s.ParentSpanId) == 0 {
				t.Fatalf("span %s of the create's trace has no parent", s.Name)
			}
		}
		for _, n := range want {
			if !names[n] {
				return false
			}
		}
		return true
	}, "every span of the create in its trace")
	t.Logf("spans of one create: %v", names)

	// The agent's own steps (the spawn of a command, a file upload) come back as
	// Server-Timing and join the trace of the proxied request.
	if out := stdoutOf(g.agent(id).run("echo traced")); out != "traced" {
		t.Fatalf("command output %q", out)
	}
	uploadFile(t, g.agent(id), "/tmp/traced.txt", []byte("hello"))
	for _, step := range []string{"sandbox-agent.spawn", "sandbox-agent.file-upload"} {
		waitFor(t, 30*time.Second, func() bool {
			for _, s := range rc.find(func(s *tracepb.Span) bool { return s.Name == step }) {
				parents := rc.find(func(p *tracepb.Span) bool {
					return string(p.SpanId) == string(s.ParentSpanId) && p.Kind == tracepb.Span_SPAN_KIND_SERVER && strings.HasPrefix(p.Name, "POST /sandboxes/{id}/proxy/{port}")
				})
				if len(parents) == 1 {
					return true
				}
			}
			return false
		}, "a "+step+" span under the proxied request's span")
	}

	startPreviewServer(t, g, id)
	proxied := g.do("GET", fmt.Sprintf("/sandboxes/%s/proxy/%d/headers", id, previewPort), nil, "X-Request-ID", reqID+"-proxy")
	if proxied.Status != 200 {
		t.Fatalf("proxied: %d %s", proxied.Status, proxied.Body)
	}
	var proxyRoot *tracepb.Span
	waitFor(t, 30*time.Second, func() bool {
		if s := rc.find(func(s *tracepb.Span) bool { return spanAttr(s, "sandgate.request_id") == reqID+"-proxy" }); len(s) == 1 {
			proxyRoot = s[0]
		}
		return proxyRoot != nil
	}, "the proxied request's span")
	traceID := hex.EncodeToString(proxyRoot.TraceId)
	if !strings.Contains(strings.ToLower(string(proxied.Body)), "00-"+traceID+"-") {
		t.Fatalf("the sandbox saw no traceparent of trace %s; its request headers: %s", traceID, proxied.Body)
	}
}
