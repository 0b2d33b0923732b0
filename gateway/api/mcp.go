package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandgate "github.com/sandgate/sandgate/client"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/mcpserver"
)

// mcpMaxRequestBytes admits a write_file of mcpserver.MaxWriteBytes in base64 with its
// JSON-RPC envelope.
const mcpMaxRequestBytes = mcpserver.MaxWriteBytes*4/3 + 1<<20

// mcpHandler serves /mcp: sandgate's MCP tools over streamable HTTP.
//
// Each request is authenticated here with the caller's API key, then served by an MCP
// server built for that request (stateless mode: no session lives on a gateway, so any
// replica answers any request) whose tools call this gateway's own HTTP API in process
// with the same key. A tool therefore goes through exactly the routes a client would
// call — authentication, the Rego access decision of each route (a viewer's
// create_sandbox is denied by the rule that denies its POST /v1/sandboxes), quotas,
// audit events — with no second implementation of any of it; the HTTP round trip stays
// inside the process.
type mcpHandler struct {
	h       *Handler
	schemas *mcp.SchemaCache
	once    sync.Once
	serve   http.Handler
}

func (m *mcpHandler) init() {
	m.schemas = mcp.NewSchemaCache()
	m.serve = mcp.NewStreamableHTTPHandler(m.server, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: mcpMaxRequestBytes,
		Logger:              m.h.log,
		// The SDK's DNS-rebinding guard refuses non-loopback Host headers on a loopback
		// listener (every gateway behind a local reverse proxy). It guards ambient
		// credentials; /mcp takes only an API key in a header, which a rebound page
		// cannot send.
		DisableLocalhostProtection: true,
	})
}

type mcpCallerKey struct{}

// server builds the MCP server of one authenticated request.
func (m *mcpHandler) server(r *http.Request) *mcp.Server {
	caller, _ := r.Context().Value(mcpCallerKey{}).(gateway.Caller)
	hc := &http.Client{Transport: inProcess{h: m.h, remoteAddr: r.RemoteAddr}}
	c, err := sandgate.New("http://"+r.Host, apiKeyFrom(r), sandgate.WithHTTPClient(hc), sandgate.WithUserAgent("sandgate-mcp"))
	if err != nil {
		// r.Host was accepted by the server; a URL that does not parse has no host.
		c, _ = sandgate.New("http://localhost", apiKeyFrom(r), sandgate.WithHTTPClient(hc), sandgate.WithUserAgent("sandgate-mcp"))
	}
	return mcpserver.New(c, mcpserver.Options{
		Version:     gateway.Version,
		SchemaCache: m.schemas,
		OnCall: func(ctx context.Context, tool, sandboxID string, err error, took time.Duration) {
			call := gateway.ToolCall{Tool: tool, SandboxID: sandboxID, Duration: took}
			if err != nil {
				call.Code = "MCP::TOOL_FAILED"
				var apiErr *sandgate.Error
				if errors.As(err, &apiErr) {
					call.Code = apiErr.Code
				}
			}
			m.h.svc.RecordToolCall(caller, call)
		},
	})
}

// serveMCP authenticates the request (API key only: the route is for programs) and
// hands it to the MCP handler.
func (h *Handler) serveMCP(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	key := apiKeyFrom(r)
	if key == "" {
		h.writeError(w, r, gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeMissingAPIKey, "the MCP endpoint needs an API key (Authorization: Bearer <key>)"))
		return
	}
	caller, err := h.svc.Authenticate(r.Context(), key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.mcp.once.Do(h.mcp.init)
	jw := &mcpJSONErrors{ResponseWriter: w}
	h.mcp.serve.ServeHTTP(jw, r.WithContext(context.WithValue(r.Context(), mcpCallerKey{}, caller)))
	jw.finish()
}

// mcpJSONErrors gives the MCP handler's own refusals (a body that is not JSON-RPC, a
// wrong Content-Type or Accept, a method other than POST) the gateway's error shape,
// {code, message}, instead of the plain text the handler writes. Everything else, and
// every streamed answer, passes through untouched.
type mcpJSONErrors struct {
	http.ResponseWriter
	status int
	text   []byte
	held   bool
}

// mcpErrorCodes names the code of each status the MCP handler refuses a request with.
var mcpErrorCodes = map[int]string{
	http.StatusBadRequest:            "MCP::INVALID_REQUEST",
	http.StatusMethodNotAllowed:      gateway.CodeMethodNotAllowed,
	http.StatusNotAcceptable:         "MCP::NOT_ACCEPTABLE",
	http.StatusRequestEntityTooLarge: "MCP::REQUEST_TOO_LARGE",
	http.StatusUnsupportedMediaType:  "MCP::UNSUPPORTED_MEDIA_TYPE",
}

func (m *mcpJSONErrors) WriteHeader(status int) {
	ct := m.Header().Get("Content-Type")
	if status >= 400 && (ct == "" || strings.HasPrefix(ct, "text/plain")) {
		m.status, m.held = status, true
		return
	}
	m.ResponseWriter.WriteHeader(status)
}

func (m *mcpJSONErrors) Write(b []byte) (int, error) {
	if m.held {
		if len(m.text) < 4096 {
			m.text = append(m.text, b...)
		}
		return len(b), nil
	}
	return m.ResponseWriter.Write(b)
}

func (m *mcpJSONErrors) Flush() {
	if f, ok := m.ResponseWriter.(http.Flusher); ok && !m.held {
		f.Flush()
	}
}

func (m *mcpJSONErrors) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// finish writes a held refusal as {code, message}.
func (m *mcpJSONErrors) finish() {
	if !m.held {
		return
	}
	code, ok := mcpErrorCodes[m.status]
	if !ok {
		code = "MCP::INVALID_REQUEST"
		if m.status >= 500 {
			code = gateway.CodeInternal
		}
	}
	msg := strings.TrimSpace(string(m.text))
	if msg == "" {
		msg = http.StatusText(m.status)
	}
	writeJSON(m.ResponseWriter, m.status, errorBody{Code: code, Message: msg})
}

// inProcess is an http.RoundTripper that serves requests with the gateway's own handler,
// streaming the answer through a pipe (command output arrives as it is written).
type inProcess struct {
	h          http.Handler
	remoteAddr string
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	sreq := req.Clone(req.Context())
	sreq.RequestURI = req.URL.RequestURI()
	sreq.Host = req.URL.Host
	sreq.RemoteAddr = t.remoteAddr
	switch {
	case sreq.Body == nil || sreq.Body == http.NoBody:
		sreq.Body, sreq.ContentLength = http.NoBody, 0
	case sreq.ContentLength == 0:
		// A client request's 0 with a body means "unknown"; a server request's means
		// "empty" (the proxy would drop a streamed upload).
		sreq.ContentLength = -1
	}
	pr, pw := io.Pipe()
	rw := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				// ErrAbortHandler too: the answer was cut, the reader must see an error.
				rw.ensureHeader(http.StatusBadGateway)
				pw.CloseWithError(errors.New("gateway handler aborted the answer"))
				return
			}
			rw.ensureHeader(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(rw, sreq)
	}()
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: http.StatusText(rw.status), StatusCode: rw.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.snapshot, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the http.ResponseWriter of an in-process request.
type pipeResponse struct {
	header   http.Header
	snapshot http.Header
	status   int
	body     *io.PipeWriter
	once     sync.Once
	ready    chan struct{}
}

func (p *pipeResponse) Header() http.Header { return p.header }

func (p *pipeResponse) ensureHeader(status int) {
	p.once.Do(func() {
		p.status = status
		p.snapshot = p.header.Clone()
		close(p.ready)
	})
}

func (p *pipeResponse) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		return // informational answers have no place in a RoundTrip result
	}
	p.ensureHeader(status)
}

func (p *pipeResponse) Write(b []byte) (int, error) {
	p.ensureHeader(http.StatusOK)
	return p.body.Write(b)
}

// Flush is a no-op: the pipe hands every write to the reader as it is made.
func (p *pipeResponse) Flush() { p.ensureHeader(http.StatusOK) }

var _ http.Flusher = (*pipeResponse)(nil)
