package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// AuthHeader is OpenSandbox's header for the egress API token. The enforcer does not
// accept the token in it (see egressauth: the gateway signs each request instead, so
// that nothing it sends to port 18080 is worth capturing); SDKs send it to the gateway,
// which checks it there.
const AuthHeader = agentproto.HeaderEgressToken

// EnforcementMode is what GET /policy reports: DNS filtering plus nftables.
const EnforcementMode = "dns+nft"

// maxBodyBytes bounds request and hook bodies.
const maxBodyBytes = 1 << 20

// Stable error codes of the egress API.
const (
	CodeUnauthorized     = "EGRESS::UNAUTHORIZED"
	CodeInvalidPolicy    = "EGRESS::INVALID_POLICY"
	CodeMethodNotAllowed = "EGRESS::METHOD_NOT_ALLOWED"
	CodeNotFound         = "EGRESS::NOT_FOUND"
	CodePolicyDenied     = "EGRESS::POLICY_DENIED"
	CodeHookUnavailable  = "EGRESS::POLICY_HOOK_UNAVAILABLE"
	CodeApplyFailed      = "EGRESS::APPLY_FAILED"
	CodeNotReady         = "EGRESS::NOT_READY"
)

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// policyResponse is the body of GET /policy and of every successful change.
type policyResponse struct {
	Status          string   `json:"status"`
	Mode            string   `json:"mode"`
	EnforcementMode string   `json:"enforcementMode"`
	Policy          Policy   `json:"policy"`
	PlatformDeny    []string `json:"platformDeny,omitempty"`
}

// api serves the /policy and /healthz endpoints on port 18080.
type api struct {
	enf      *enforcer
	hook     *policyHook
	verifier *egressauth.Verifier // nil: the API is open (no token configured)
	token    string               // the HMAC key of verifier
	state    *stateFile           // nil: the policy is not kept across restarts
	maxRules int
	ready    *atomic.Bool
	log      *slog.Logger
	proxy    *vaultProxy // nil: no credential proxy
	bound    *boundHosts // with the credential proxy: resolves the hosts bindings name

	// updateMu makes read-modify-write updates (PATCH, DELETE) and the hook call
	// one step, so two concurrent PATCHes cannot lose each other's rules.
	updateMu sync.Mutex
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(agentproto.PathPolicy, a.authorized(a.handlePolicy))
	mux.HandleFunc(agentproto.PathHealthz, a.handleHealthz)
	(&vaultAPI{api: a}).routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// authorized admits only requests signed with the token (egressauth), when one is set,
// and signs the answer so that the gateway can tell it from a fake enforcer's.
func (a *api) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.verifier == nil {
			next(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
		if err != nil || len(body) > maxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, CodeInvalidPolicy, fmt.Sprintf("request body exceeds %d bytes or could not be read", maxBodyBytes))
			return
		}
		nonce, err := a.verifier.Verify(r, body, time.Now())
		if err != nil {
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "the request is not signed by the gateway: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &signingWriter{header: http.Header{}}
		next(rec, r)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set(egressauth.HeaderResponseSignature, egressauth.SignResponse(a.token, nonce, rec.status, rec.body.Bytes()))
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// signingWriter buffers an answer (they are small JSON documents) so that its signature
// can be sent ahead of it.
type signingWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (s *signingWriter) Header() http.Header { return s.header }

func (s *signingWriter) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
}

func (s *signingWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.body.Write(b)
}

func (a *api) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, CodeNotReady, "egress rules are not installed yet")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "deniedQueries": deniedQueries.Load()})
}

func (a *api) handlePolicy(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, a.response(a.enf.currentPolicy()))
		return
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, PUT, PATCH, DELETE")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("method %s is not allowed on /policy", r.Method))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidPolicy, fmt.Sprintf("read request body: %v", err))
		return
	}
	if len(body) > maxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, CodeInvalidPolicy, fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes))
		return
	}

	a.updateMu.Lock()
	defer a.updateMu.Unlock()
	current := a.enf.currentPolicy()
	var proposed Policy
	var op string
	switch r.Method {
	case http.MethodPost, http.MethodPut:
		op = "replace"
		proposed, err = ParsePolicy(body, a.maxRules)
	case http.MethodPatch:
		op = "patch"
		proposed, err = a.patched(current, body)
	case http.MethodDelete:
		op = "delete"
		proposed, err = a.deleted(current, body, r)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidPolicy, err.Error())
		return
	}

	decided, err := a.hook.decide(r.Context(), HookRequest{Operation: op, Current: current, Proposed: proposed})
	var denied *errHookDenied
	switch {
	case errors.As(err, &denied):
		writeError(w, http.StatusForbidden, CodePolicyDenied, denied.message)
		return
	case err != nil:
		a.log.Error("policy hook failed; policy unchanged", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeHookUnavailable, "the platform policy could not be consulted; policy unchanged")
		return
	}
	// What the hook returns is checked like any input: a hook bug must not install
	// garbage or more rules than allowed.
	decided, err = NormalizePolicy(decided, a.maxRules)
	if err != nil {
		a.log.Error("policy hook returned an invalid policy; policy unchanged", "err", err)
		writeError(w, http.StatusServiceUnavailable, CodeHookUnavailable, "the platform policy returned an invalid policy; policy unchanged")
		return
	}
	// The policy is written down before it is installed, so that an enforcer restarted
	// at any moment after this answer comes back with it (never with an older one).
	if err := a.state.save(decided); err != nil {
		a.log.Error("save policy failed; previous policy still in force", "err", err)
		writeError(w, http.StatusInternalServerError, CodeApplyFailed, "could not record the egress policy; the previous policy is still in force")
		return
	}
	if err := a.enf.apply(decided); err != nil {
		if serr := a.state.save(current); serr != nil {
			a.log.Error("restore the saved policy failed", "err", serr)
		}
		a.log.Error("apply policy failed; previous policy still in force", "err", err)
		writeError(w, http.StatusInternalServerError, CodeApplyFailed, "could not install the egress rules; the previous policy is still in force")
		return
	}
	a.log.Info("egress policy updated", "operation", op, "mode", decided.Mode(), "rules", len(decided.Egress))
	writeJSON(w, http.StatusOK, a.response(decided))
}

// patched merges a PATCH body (an array of rules, or {"egress": [...]}) ahead of the
// current rules.
func (a *api) patched(current Policy, body []byte) (Policy, error) {
	var rules []Rule
	trimmed := strings.TrimSpace(string(body))
	if strings.HasPrefix(trimmed, "{") {
		var wrapper struct {
			Egress []Rule `json:"egress"`
		}
		if err := strictjson.Decode([]byte(trimmed), &wrapper); err != nil {
			return Policy{}, invalidf("PATCH body must be an array of rules: %v", err)
		}
		rules = wrapper.Egress
	} else if err := strictjson.Decode([]byte(trimmed), &rules); err != nil {
		return Policy{}, invalidf("PATCH body must be an array of rules: %v", err)
	}
	patch, err := NormalizePolicy(Policy{DefaultAction: current.DefaultAction, Egress: rules}, 0)
	if err != nil {
		return Policy{}, err
	}
	return NormalizePolicy(Policy{DefaultAction: current.DefaultAction, Egress: MergeRules(current.Egress, patch.Egress)}, a.maxRules)
}

// deleted removes the targets named by a DELETE body (an array of target strings) or
// by repeated ?target= query parameters.
func (a *api) deleted(current Policy, body []byte, r *http.Request) (Policy, error) {
	targets := r.URL.Query()["target"]
	if trimmed := strings.TrimSpace(string(body)); trimmed != "" {
		var fromBody []string
		if err := strictjson.Decode([]byte(trimmed), &fromBody); err != nil {
			return Policy{}, invalidf("DELETE body must be an array of targets: %v", err)
		}
		targets = append(targets, fromBody...)
	}
	if len(targets) == 0 {
		return Policy{}, invalidf("DELETE needs at least one target")
	}
	norm := make([]string, 0, len(targets))
	for _, t := range targets {
		n, err := NormalizeTarget(t)
		if err != nil {
			return Policy{}, err
		}
		norm = append(norm, n)
	}
	rules, _ := RemoveTargets(current.Egress, norm)
	return Policy{DefaultAction: current.DefaultAction, Egress: rules}, nil
}

func (a *api) response(p Policy) policyResponse {
	resp := policyResponse{Status: "ok", Mode: p.Mode(), EnforcementMode: EnforcementMode, Policy: p}
	for _, r := range a.enf.platform {
		resp.PlatformDeny = append(resp.PlatformDeny, r.Target)
	}
	return resp
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, apiError{Code: code, Message: message})
}
