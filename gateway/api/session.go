package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/access"
	"github.com/sandgate/sandgate/gateway/principal"
)

// sessionCookie names the console's session cookie.
const sessionCookie = "sandgate_session"

// sessionCookiePath scopes the session cookie to the API's routes.
const sessionCookiePath = "/v1"

// csrfHeader carries a session's CSRF token on every change a cookie authenticates.
const csrfHeader = "X-CSRF-Token"

// authenticate finds the caller of an API request: the API key headers first, else the
// console session cookie. The session is honoured only on the API's own routes (/v1/…)
// and only from a page of the gateway's own origin (consoleOrigin); a cookie-authenticated
// request that changes something must also carry the session's CSRF token. The returned
// request is marked with the credential kind for the access policy.
func (h *Handler) authenticate(r *http.Request) (gateway.Caller, *http.Request, error) {
	if key := apiKeyFrom(r); key != "" {
		c, err := h.svc.Authenticate(r.Context(), key)
		return c, r, err
	}
	token := sessionToken(r)
	if token == "" || !strings.HasPrefix(r.URL.Path, "/v1/") {
		c, err := h.svc.Authenticate(r.Context(), "")
		return c, r, err
	}
	c, _, r, err := h.consoleSession(r, token)
	return c, r, err
}

// consoleSession resolves the session of a request that passed the console's checks:
// its origin is the gateway's own (consoleOrigin), and a change carries the CSRF token.
// A WebSocket, to which a browser cannot add the header, stands on the Origin alone.
func (h *Handler) consoleSession(r *http.Request, token string) (gateway.Caller, *access.Session, *http.Request, error) {
	if err := h.consoleOrigin(r, true); err != nil {
		return gateway.Caller{}, nil, r, err
	}
	c, sess, err := h.svc.Access().SessionCaller(r.Context(), token)
	if err != nil {
		return c, nil, r, err
	}
	if !safeMethod(r.Method) && !isWebSocket(r) {
		if err := access.CheckCSRF(sess, r.Header.Get(csrfHeader)); err != nil {
			return c, nil, r, err
		}
	}
	return c, sess, r.WithContext(principal.WithCredential(r.Context(), principal.CredSession)), nil
}

// consoleOrigin admits a cookie-carrying request only from a page of the gateway's own
// origin: an Origin header, when there is one, must name this host (or the configured
// public URL), and Fetch Metadata, when the browser sends it, must say same-origin (or
// "none": the user typed the address). Changes and WebSockets need the Origin header
// itself, which every browser sends on them. A page with an opaque origin (a sandboxed
// preview says "null") or of any other site, previews under the preview domain
// included, is refused. Sign-in, which uses no session, passes strict false: a client
// that is no browser may sign in without an Origin.
func (h *Handler) consoleOrigin(r *http.Request, strict bool) error {
	refuse := func(why string) error {
		return gateway.Errorf(gateway.KindForbidden, gateway.CodeOriginRefused,
			"the console session is honoured only on requests from the console's own origin: %s", why)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return refuse("the browser says this request is " + site)
	}
	if r.Header.Get("Origin") == "" {
		if strict && (!safeMethod(r.Method) || isWebSocket(r)) {
			return refuse("a change or a WebSocket must carry an Origin header")
		}
		return nil
	}
	if !h.sameOrigin(r) {
		return refuse(fmt.Sprintf("Origin %q is not this gateway's", r.Header.Get("Origin")))
	}
	return nil
}

func sessionToken(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin reports whether a browser request's Origin names the host it was sent to,
// or the host of the configured public URL (behind a proxy that rewrites Host): the
// guard against cross-site requests and WebSocket hijacking, which SameSite cookies
// alone do not give on every browser. An opaque origin ("null") never matches.
func (h *Handler) sameOrigin(r *http.Request) bool { return sameOrigin(r, h.publicHost()) }

func sameOrigin(r *http.Request, publicHost string) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	for _, host := range []string{r.Host, publicHost} {
		if host != "" && (strings.EqualFold(u.Host, host) || strings.EqualFold(stripDefaultPort(u), host)) {
			return true
		}
	}
	return false
}

// publicHost is the host[:port] of the configured public URL, or "".
func (h *Handler) publicHost() string {
	if u, err := url.Parse(h.svc.Config().PublicURL); err == nil {
		return u.Host
	}
	return ""
}

// secureCookies reports whether cookies set in answer to r get the Secure attribute:
// when r came over TLS, or when the public URL is https (TLS ends at a proxy in front).
func (h *Handler) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(h.svc.Config().PublicURL), "https://")
}

// stripDefaultPort returns the origin's host without the scheme's default port.
func stripDefaultPort(u *url.URL) string {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return u.Host
	}
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		return host
	}
	return u.Host
}

// isWebSocket reports a WebSocket opening: an HTTP/1.1 upgrade, or an HTTP/2 stream
// opened by extended CONNECT (RFC 8441), which browsers use when the server offers it.
func isWebSocket(r *http.Request) bool {
	if r.Method == http.MethodConnect && r.ProtoMajor >= 2 {
		return strings.EqualFold(r.Header.Get(":protocol"), "websocket")
	}
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// signIn is POST /v1/session: {"apiKey": "..."} → a session and its cookie.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	// A JSON content type cannot come from a plain HTML form of another site, so no page
	// elsewhere can sign a visitor in under a key of its choosing.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		h.writeError(w, r, gateway.Errorf(gateway.KindUnsupportedMedia, gateway.CodeInvalidParameter, "sign in with a JSON body {\"apiKey\": \"...\"} and Content-Type: application/json"))
		return
	}
	if err := h.consoleOrigin(r, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	var req struct {
		APIKey string `json:"apiKey"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	token, sess, caller, err := h.svc.Access().SignIn(r.Context(), strings.TrimSpace(req.APIKey))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	// Path /v1: the cookie does not even travel to path-mode previews outside the API.
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: token, Path: sessionCookiePath, Expires: sess.ExpiresAt, MaxAge: int(time.Until(sess.ExpiresAt).Seconds()),
		HttpOnly: true, Secure: h.secureCookies(r), SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	ctx := principal.WithCredential(r.Context(), principal.CredSession)
	writeJSON(w, http.StatusOK, sessionBody(sess, h.svc.PolicyAdmin().Can(ctx, caller, gateway.ConsoleActions)))
}

func sessionBody(sess *access.Session, can map[string]bool) map[string]any {
	return map[string]any{
		"tenant": sess.Tenant, "role": sess.Role, "keyId": sess.KeyID, "csrfToken": sess.CSRFToken,
		"expiresAt": sess.ExpiresAt.UTC().Format(time.RFC3339), "can": can,
	}
}

// getSession is GET /v1/session: the session of the cookie, or 401.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	token := sessionToken(r)
	if token == "" {
		h.writeError(w, r, gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeSessionInvalid, "not signed in: no console session cookie"))
		return
	}
	caller, sess, _, err := h.consoleSession(r, token)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	ctx := principal.WithCredential(r.Context(), principal.CredSession)
	writeJSON(w, http.StatusOK, sessionBody(sess, h.svc.PolicyAdmin().Can(ctx, caller, gateway.ConsoleActions)))
}

// signOut is DELETE /v1/session: the session ends on every gateway and the cookie is
// cleared. It needs the CSRF token like any other change.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	token := sessionToken(r)
	if token == "" {
		h.writeError(w, r, gateway.Errorf(gateway.KindUnauthenticated, gateway.CodeSessionInvalid, "not signed in: no console session cookie"))
		return
	}
	_, _, _, err := h.consoleSession(r, token)
	if err != nil {
		if e, ok := gateway.AsError(err); ok && e.Code == gateway.CodeSessionInvalid {
			// Already gone: clear the stale cookie all the same.
			h.clearSessionCookie(w, r)
		}
		h.writeError(w, r, err)
		return
	}
	if err := h.svc.Access().SignOut(r.Context(), token); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.clearSessionCookie(w, r)
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	// Path "/" too: sessions opened before the cookie was scoped to /v1 carry that path.
	for _, path := range []string{sessionCookiePath, "/"} {
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: path, MaxAge: -1, HttpOnly: true, Secure: h.secureCookies(r), SameSite: http.SameSiteStrictMode})
	}
}
