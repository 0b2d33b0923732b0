package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/plugins"
	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// Forward sends a request, already rewritten for the sandbox (path, headers), to
// upstream ("ip:port", always the address the runtime reported for the sandbox) and
// streams the answer back. In the binary it is Caddy's reverse_proxy; NewForward gives a
// plain net/http one for tests and embedding.
type Forward func(w http.ResponseWriter, r *http.Request, upstream string)

// Names under which a browser carries preview credentials.
const (
	linkQueryParam = gateway.LinkQueryParam
	cookieName     = "sandgate_preview"
)

// credentialHeaders are ours; none of them reaches a sandbox except as set below.
// Canonical, as tokenHeaders: a name looked up as written would be canonicalized (a new
// string) on every request.
var credentialHeaders = canonicalHeaders(
	"OPEN-SANDBOX-API-KEY", "X-API-Key", gateway.HeaderAgentToken, gateway.HeaderEgressToken, gateway.HeaderAccessToken, csrfHeader,
)

// tokenHeaders carry a sandbox token or, from the SDKs' server-proxy mode, an API key.
var tokenHeaders = canonicalHeaders(gateway.HeaderAgentToken, gateway.HeaderEgressToken, gateway.HeaderAccessToken)

func canonicalHeaders(names ...string) []string {
	for i, n := range names {
		names[i] = http.CanonicalHeaderKey(n)
	}
	return names
}

type upstreamKey struct{}

// NewForward returns a Forward: X-Forwarded-* set, keep-alive connections to sandboxes
// (64 idle per address), WebSocket upgrades. Streams (bodies of unknown length, SSE)
// are flushed at every write; a response of known length goes out in full writes,
// headers and body together. GET and HEAD without a body go through leanForward, in the
// handler's goroutine; every other request through net/http/httputil. The binary uses
// it for every request but agent calls and upgrades (caddy/modules/handler.go): it
// costs far less per request than Caddy's reverse_proxy.
func NewForward(onError func(w http.ResponseWriter, r *http.Request, err error)) Forward {
	lean, general := newLeanForward(onError), httputilForward(onError)
	return func(w http.ResponseWriter, r *http.Request, upstream string) {
		if lean.handles(r) {
			lean.serve(w, r, upstream)
			return
		}
		general(w, r, upstream)
	}
}

// httputilForward is NewForward's path for the requests leanForward does not take.
func httputilForward(onError func(w http.ResponseWriter, r *http.Request, err error)) Forward {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Context().Value(upstreamKey{}).(string)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: SecretHeaderTransport{Next: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true,
		}},
		BufferPool:   forwardBuffers,
		ErrorHandler: onError,
	}
	return func(w http.ResponseWriter, r *http.Request, upstream string) {
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, upstream)))
	}
}

// upstreamKeyOpened carries, in a forwarded request, the gateway.Upstream it was opened
// as: what to ask when its sandbox does not answer (gateway.Upstream.Failed).
type upstreamKeyOpened struct{}

func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	h.WriteUpstreamError(w, r, err)
}

// WriteUpstreamError answers a request whose sandbox port could not be reached.
func (h *Handler) WriteUpstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		return
	}
	if up, ok := r.Context().Value(upstreamKeyOpened{}).(*gateway.Upstream); ok {
		// A sandbox that died is marked Failed here (gateway.Upstream.Failed).
		if e := up.Failed(r.Context(), err); e != nil {
			h.writeError(w, r, e)
			return
		}
	}
	h.writeError(w, r, gateway.Errorf(gateway.KindUpstream, gateway.CodeUpstreamError,
		"the sandbox port did not answer: nothing is listening there, or it closed the connection"))
}

// serveProxyPath serves path mode: /sandboxes/{id}/proxy/{port}/… (also under /v1). Its
// answers come from the API's own origin, so what a browser renders of them is confined
// to an opaque origin (see confineToOpaqueOrigin).
func (h *Handler) serveProxyPath(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	h.servePathMode(w, r, r.PathValue("id"), r.PathValue("port"))
}

// servePathMode is serveProxyPath for sandbox id's port portStr (the path's wildcards).
func (h *Handler) servePathMode(w http.ResponseWriter, r *http.Request, id, portStr string) {
	prefix, rest, err := splitProxyPath(r.URL.EscapedPath(), id, portStr)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if tok, after, ok := cutPathToken(rest); ok && portStr != strconv.Itoa(agentproto.AgentPort) && portStr != strconv.Itoa(agentproto.EgressPort) {
		r = r.WithContext(context.WithValue(r.Context(), pathTokenKey{}, tok))
		prefix, rest = prefix+pathTokenSegment+tok, after
	}
	cookiePath := prefix + "/"
	h.proxy(confineToOpaqueOrigin(w, cookiePath), r, id, portStr, cookiePath, rest)
}

// pathTokenSegment introduces a preview token in a path-mode URL:
// /sandboxes/{id}/proxy/{port}/_sandgate/{token}/…. A path-mode page is an opaque origin
// whose requests carry no cookies, so the signed-link exchange redirects there instead:
// the page's relative URLs (scripts, fetches, WebSockets) keep the token, which is bound
// to the sandbox, port and expiry like the cookie, and is no ambient credential another
// page could make a browser send. Not for the agent and enforcer ports.
const pathTokenSegment = "/_sandgate/"

type pathTokenKey struct{}

// cutPathToken splits "/_sandgate/{token}/rest" into token and "/rest".
func cutPathToken(rest string) (token, after string, ok bool) {
	if !strings.HasPrefix(rest, pathTokenSegment) {
		return "", rest, false
	}
	tail := rest[len(pathTokenSegment):]
	token, after, _ = strings.Cut(tail, "/")
	if token == "" {
		return "", rest, false
	}
	return token, "/" + after, true
}

// previewHost parses host mode: {id}-{port}.<preview domain>[:port].
func (h *Handler) previewHost(host string) (id, port string, ok bool) {
	domain := h.svc.Config().PreviewDomain
	if domain == "" {
		return "", "", false
	}
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	label, rest, found := strings.Cut(strings.ToLower(host), ".")
	if !found || rest != strings.ToLower(domain) {
		return "", "", false
	}
	dash := strings.LastIndexByte(label, '-')
	if dash < 0 {
		return "", "", false
	}
	return label[:dash], label[dash+1:], true
}

// proxy authorizes a request for port of sandbox id and forwards it. cookiePath scopes
// the preview cookie; rest is the escaped path to send upstream.
func (h *Handler) proxy(w http.ResponseWriter, r *http.Request, id, portStr, cookiePath, rest string) {
	h.proxyAs(w, r, id, portStr, cookiePath, rest, nil)
}

// proxyAs is proxy with the credential already established (the console's session
// route, the E2B door) when preset is not nil, else found in the request. The core's
// OpenUpstream decides whether and where the request goes; this parses it, answers
// what the gateway answers itself (a signed link's exchange, the enforcer's APIs) and
// forwards the rest.
func (h *Handler) proxyAs(w http.ResponseWriter, r *http.Request, id, portStr, cookiePath, rest string, preset *access.ProxyAccess) {
	port, err := gateway.ParsePort(portStr)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	req := gateway.UpstreamRequest{Sandbox: id, Port: port, Method: r.Method, Path: rest}
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		req.Bearer = strings.TrimPrefix(a, "Bearer ")
	}
	if preset != nil {
		req.Credential = access.Credential{Form: access.PresentedEstablished, Established: preset}
	} else {
		req.Credential = h.presentedCredential(r)
	}
	up, err := h.svc.OpenUpstream(r.Context(), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if up.LinkCookie != "" {
		h.exchangeLink(w, r, port, cookiePath, up.LinkCookie, up.LinkExpires)
		return
	}
	if up.Egress != gateway.EgressForward {
		defer up.Release(gateway.UpstreamAnswer{})
		h.answerEgress(w, r, up)
		return
	}
	// A shallow copy with a URL of its own: the credentials are stripped from the
	// incoming request's header map itself (nothing after reads them; Caddy logs its own
	// copy), which spares a deep clone of the request per call. The copy, its URL and
	// the answer's recorder are one allocation (forwarded).
	fw := &forwarded{req: *r, url: *r.URL}
	out := &fw.req
	out.URL = &fw.url
	if rest == "" {
		rest = "/"
	}
	if dec, err := url.PathUnescape(rest); err == nil {
		out.URL.Path, out.URL.RawPath = dec, rest
		if dec == rest {
			out.URL.RawPath = ""
		}
	}
	stripCredentials(out, up.DropAuthorization)
	// The enforcer's token is never sent (answerEgress signs /policy requests
	// instead): a workload holding port 18080 while its enforcer restarts would read it.
	// The agent's token travels beside the request, not in it: only the transport adds
	// it, so no log of the request can show it.
	if port == agentproto.AgentPort {
		out = withUpstreamSecret(out, gateway.HeaderAgentToken, up.AgentToken)
		if r.Method == http.MethodPost {
			h.noteAgentCall(out, up.Sandbox)
		}
	}
	rec := &fw.rec
	rec.ResponseWriter = w
	out = out.WithContext(context.WithValue(out.Context(), upstreamKeyOpened{}, up))
	// Deferred: a stream the sandbox breaks off aborts the answer (NewForward panics
	// with http.ErrAbortHandler, so the client sees it incomplete), and is recorded too.
	defer func() {
		up.Release(gateway.UpstreamAnswer{Path: out.URL.Path, Status: rec.statusCode(), Bytes: rec.bytes})
	}()
	if out.ContentLength != 0 {
		// The sandbox may answer before it has read the whole body (a server that
		// streams while it reads, or one that answered from the body's first part
		// while the transport still sends the rest): net/http's server would then
		// discard and close the rest of the body, cutting off the request and with it
		// the answer. A proxy's request body and answer flow side by side.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	h.forward(rec, out, up.Address)
}

// presentedCredential finds the strongest credential a request carries (the order of
// access.Presented), unchecked.
func (h *Handler) presentedCredential(r *http.Request) access.Credential {
	if key := apiKeyFrom(r); key != "" {
		return access.Credential{Form: access.PresentedAPIKey, Value: key}
	}
	for _, hdr := range tokenHeaders {
		if v := r.Header.Get(hdr); v != "" {
			return access.Credential{Form: access.PresentedToken, Value: v}
		}
	}
	if tok, _ := r.Context().Value(pathTokenKey{}).(string); tok != "" {
		return access.Credential{Form: access.PresentedPathToken, Value: tok}
	}
	if tok := r.URL.Query().Get(linkQueryParam); tok != "" {
		return access.Credential{Form: access.PresentedLink, Value: tok}
	}
	if _, ok := r.Header["Cookie"]; !ok {
		return access.Credential{}
	}
	cookies := r.CookiesNamed(cookieName)
	if len(cookies) == 0 {
		return access.Credential{}
	}
	values := make([]string, len(cookies))
	for i, c := range cookies {
		values[i] = c.Value
	}
	return access.Credential{Form: access.PresentedCookies, Cookies: values, CookieOrigin: h.previewCookieOrigin(r)}
}

// maxNotedBody bounds how much of a command request is read to name it in the audit event.
const maxNotedBody = 64 << 10

// readNotedBody reads up to maxNotedBody bytes of r's body, for the audit to name the
// call, and puts them back. A body read to its end (a command's, always) is sent on from
// memory with its length known: the transport then writes the head and the body at
// once, and never reads the client's body again after the sandbox may have answered.
func readNotedBody(r *http.Request) []byte {
	head, err := io.ReadAll(io.LimitReader(r.Body, maxNotedBody+1))
	if err == nil && len(head) <= maxNotedBody {
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(head)), int64(len(head)), nil
		return head
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	return head[:min(len(head), maxNotedBody)]
}

// noteAgentCall emits command.started for commands and code cells and file.written for
// uploads. It reads at most maxNotedBody bytes of the body and puts them back.
func (h *Handler) noteAgentCall(r *http.Request, sb *gateway.SandboxRecord) {
	p := r.URL.Path
	switch {
	case p == "/command" || p == "/code" || (strings.HasPrefix(p, "/session/") && strings.HasSuffix(p, "/run")):
		head := readNotedBody(r)
		var body struct {
			Command    string `json:"command"`
			Code       string `json:"code"`
			Background bool   `json:"background"`
		}
		_ = json.Unmarshal(head, &body)
		text := body.Command
		if text == "" {
			text = body.Code
		}
		if len(text) > 1024 {
			text = text[:1024] + "…"
		}
		h.svc.Events().RecordAgentCall(sb, plugins.EventCommandStarted, map[string]any{"endpoint": p, "command": text, "background": body.Background})
	case p == "/files/upload":
		h.svc.Events().RecordAgentCall(sb, plugins.EventFileWritten, map[string]any{"endpoint": p, "bytes": r.ContentLength})
	default:
		h.e2bNoteAgentCall(r, sb, p) // the agent's envd and code-interpreter mounts
	}
}

// exchangeLink trades a signed link for an HttpOnly cookie scoped to the preview (its
// host in host mode, its path prefix in path mode) and redirects to the same URL without
// the token, so that page assets and WebSockets carry the cookie. In path mode, whose
// pages are opaque origins that send no cookies, it redirects to the token-in-path form
// (pathTokenSegment) instead.
func (h *Handler) exchangeLink(w http.ResponseWriter, r *http.Request, port int, cookiePath, value string, exp time.Time) {
	confined, pathMode := w.(*confinedWriter)
	if pathMode {
		w = confined.ResponseWriter // the cookie is the gateway's own, not an upstream's
	}
	target := localRedirectPath(r.URL.EscapedPath())
	if pathMode && port != agentproto.AgentPort && port != agentproto.EgressPort {
		// The page will be an opaque origin that sends no cookie: the token goes into
		// the path instead (pathTokenSegment).
		base := strings.TrimSuffix(confined.prefix, "/")
		target = localRedirectPath(base + pathTokenSegment + value + "/" + strings.TrimPrefix(strings.TrimPrefix(r.URL.EscapedPath(), base), "/"))
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: cookiePath, Expires: exp, HttpOnly: true,
		Secure: h.secureCookies(r), SameSite: http.SameSiteLaxMode,
	})
	q := r.URL.Query()
	q.Del(linkQueryParam)
	if enc := q.Encode(); enc != "" {
		target += "?" + enc
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusFound)
}

// localRedirectPath makes an escaped request path safe as a Location on this host: a
// path that begins with "//" or "/\" would name another host to a browser (an open
// redirect), so such leading slashes collapse to one.
func localRedirectPath(p string) string {
	trimmed := strings.TrimLeft(p, "/\\")
	if !strings.HasPrefix(p, "/") || len(p)-len(trimmed) > 1 {
		return "/" + trimmed
	}
	return p
}

// stripCredentials removes sandgate's credentials from a request bound for a sandbox.
// The Authorization header goes too when dropAuthorization (it holds an API key of the
// gateway's: gateway.Upstream.DropAuthorization).
func stripCredentials(r *http.Request, dropAuthorization bool) {
	for _, hdr := range credentialHeaders {
		delete(r.Header, hdr) // canonical: Del without its canonicalization
	}
	if dropAuthorization {
		r.Header.Del("Authorization")
	}
	// A query that can hold no link token (without its name, and without escapes that
	// could spell it) is not parsed: most requests have none.
	if raw := r.URL.RawQuery; strings.Contains(raw, linkQueryParam) || strings.Contains(raw, "%") {
		if q := r.URL.Query(); q.Has(linkQueryParam) {
			q.Del(linkQueryParam)
			r.URL.RawQuery = q.Encode()
		}
	}
	if cookies := r.Cookies(); len(cookies) > 0 {
		r.Header.Del("Cookie")
		for _, c := range cookies {
			if c.Name != cookieName && c.Name != sessionCookie {
				r.AddCookie(c)
			}
		}
	}
}

// forwarded is what proxyAs makes for a request it forwards: the request as sent, its
// URL, and the recorder of the answer.
type forwarded struct {
	req http.Request
	url url.URL
	rec recorder
}

// recorder notes status and size of a proxied answer; it passes flushes and hijacks on.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) statusCode() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
