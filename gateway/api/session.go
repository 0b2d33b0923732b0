package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway"
)

// sessionCookie names the console's session cookie.
const sessionCookie = "sandgate_session"

// csrfHeader carries a session's CSRF token on every change a cookie authenticates.
const csrfHeader = "X-CSRF-Token"

// authenticate finds the caller of an API request: the API key headers first, else the
// console session cookie. A cookie-authenticated request that changes something must
// carry the session's CSRF token. The returned request is marked with the credential
// kind for the access policy.
func (h *Handler) authenticate(r *http.Request) (gateway.Caller, *http.Request, error) {
	if key := apiKeyFrom(r); key != "" {
		c, err := h.svc.Authenticate(r.Context(), key)
		return c, r, err
	}
	token := sessionToken(r)
	if token == "" {
		c, err := h.svc.Authenticate(r.Context(), "")
		return c, r, err
	}
	c, sess, err := h.svc.SessionCaller(r.Context(), token)
	if err != nil {
		return c, r, err
	}
	if !safeMethod(r.Method) {
		if err := gateway.CheckCSRF(sess, r.Header.Get(csrfHeader)); err != nil {
			return c, r, err
		}
	}
	return c, r.WithContext(gateway.WithCredential(r.Context(), gateway.CredSession)), nil
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

// sameOrigin reports whether a browser request's Origin names the host it was sent to:
// the guard against cross-site WebSocket hijacking, which SameSite cookies alone do not
// give on every browser.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host) || strings.EqualFold(stripDefaultPort(u), r.Host)
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
		writeError(w, r, gateway.Errorf(http.StatusUnsupportedMediaType, gateway.CodeInvalidParameter, "sign in with a JSON body {\"apiKey\": \"...\"} and Content-Type: application/json"))
		return
	}
	var req struct {
		APIKey string `json:"apiKey"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	token, sess, caller, err := h.svc.SignIn(r.Context(), strings.TrimSpace(req.APIKey))
	if err != nil {
		writeError(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: token, Path: "/", Expires: sess.ExpiresAt, MaxAge: int(time.Until(sess.ExpiresAt).Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	ctx := gateway.WithCredential(r.Context(), gateway.CredSession)
	writeJSON(w, http.StatusOK, sessionBody(sess, h.svc.Can(ctx, caller, gateway.ConsoleActions)))
}

func sessionBody(sess *gateway.Session, can map[string]bool) map[string]any {
	return map[string]any{
		"tenant": sess.Tenant, "role": sess.Role, "keyId": sess.KeyID, "csrfToken": sess.CSRFToken,
		"expiresAt": sess.ExpiresAt.UTC().Format(time.RFC3339), "can": can,
	}
}

// getSession is GET /v1/session: the session of the cookie, or 401.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	token := sessionToken(r)
	if token == "" {
		writeError(w, r, gateway.Errorf(http.StatusUnauthorized, gateway.CodeSessionInvalid, "not signed in: no console session cookie"))
		return
	}
	caller, sess, err := h.svc.SessionCaller(r.Context(), token)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	ctx := gateway.WithCredential(r.Context(), gateway.CredSession)
	writeJSON(w, http.StatusOK, sessionBody(sess, h.svc.Can(ctx, caller, gateway.ConsoleActions)))
}

// signOut is DELETE /v1/session: the session ends on every gateway and the cookie is
// cleared. It needs the CSRF token like any other change.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request, _ gateway.Caller) {
	token := sessionToken(r)
	if token == "" {
		writeError(w, r, gateway.Errorf(http.StatusUnauthorized, gateway.CodeSessionInvalid, "not signed in: no console session cookie"))
		return
	}
	_, sess, err := h.svc.SessionCaller(r.Context(), token)
	if err == nil {
		err = gateway.CheckCSRF(sess, r.Header.Get(csrfHeader))
	}
	if err != nil {
		if e, ok := gateway.AsError(err); ok && e.Code == gateway.CodeSessionInvalid {
			// Already gone: clear the stale cookie all the same.
			clearSessionCookie(w, r)
		}
		writeError(w, r, err)
		return
	}
	if err := h.svc.SignOut(r.Context(), token); err != nil {
		writeError(w, r, err)
		return
	}
	clearSessionCookie(w, r)
	w.WriteHeader(http.StatusNoContent)
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}
