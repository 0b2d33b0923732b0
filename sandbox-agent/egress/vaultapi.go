package egress

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/sandbox-agent/agentproto"
)

// vaultAPI serves /credential-vault on the egress API (behind the same signature check
// as /policy). Nothing it logs or answers holds a credential value.
type vaultAPI struct {
	api *api
	mu  sync.Mutex // one change at a time (read, check, save, install)
}

func (v *vaultAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("/credential-vault", v.api.authorized(v.handleVault))
	mux.HandleFunc("/credential-vault/", v.api.authorized(v.handleParts))
	mux.HandleFunc(VaultAuditPath, v.api.authorized(v.handleAudit))
}

// VaultAuditPath is sandgate's own route (not OpenSandbox's) from which the gateway
// drains the injection records: POST answers {records, dropped} and forgets them.
const VaultAuditPath = agentproto.PathVaultAudit

func (v *vaultAPI) handleAudit(w http.ResponseWriter, r *http.Request) {
	if !v.enabled(w) {
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" is not allowed on "+VaultAuditPath)
		return
	}
	var records []VaultAuditRecord
	dropped := 0
	if v.api.proxy != nil {
		records, dropped = v.api.proxy.drainAudit()
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": records, "dropped": dropped})
}

func writeVaultError(w http.ResponseWriter, err *VaultError) {
	writeError(w, err.Status, err.Code, err.Message)
}

// enabled answers 412 when the sandbox was created without credentialProxy.
func (v *vaultAPI) enabled(w http.ResponseWriter) bool {
	if v.api.enf.vaultPort == 0 {
		writeVaultError(w, vaultErrorf(http.StatusPreconditionFailed, CodeVaultNotEnabled,
			"the credential proxy is not enabled for this sandbox; create it with credentialProxy: {\"enabled\": true} and a networkPolicy"))
		return false
	}
	return true
}

func (v *vaultAPI) current(w http.ResponseWriter) *vaultState {
	st := v.api.enf.vault.Load()
	if st == nil {
		writeVaultError(w, vaultErrorf(http.StatusNotFound, CodeVaultNotFound, "this sandbox has no credential vault yet; create it with POST /credential-vault"))
	}
	return st
}

func (v *vaultAPI) handleVault(w http.ResponseWriter, r *http.Request) {
	if !v.enabled(w) {
		return
	}
	switch r.Method {
	case http.MethodGet:
		if st := v.current(w); st != nil {
			writeJSON(w, http.StatusOK, st.view())
		}
		return
	case http.MethodPost, http.MethodPatch, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, POST, PATCH, DELETE")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" is not allowed on /credential-vault")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, CodeVaultInvalid, "request body could not be read or is too large")
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := v.api.enf.vault.Load()
	var next *vaultState
	var verr *VaultError
	status := http.StatusOK
	switch r.Method {
	case http.MethodPost:
		if cur != nil {
			writeVaultError(w, vaultErrorf(http.StatusConflict, CodeVaultExists, "this sandbox has a credential vault already (revision %d); change it with PATCH", cur.Revision))
			return
		}
		var req VaultCreate
		if req, verr = decodeVaultCreate(body); verr == nil {
			next, verr = newVault(req)
		}
		status = http.StatusCreated
	case http.MethodPatch:
		if cur = v.current(w); cur == nil {
			return
		}
		var m VaultMutation
		if verr = decodeVaultJSON(body, &m); verr == nil {
			next, verr = cur.mutate(m)
		}
	case http.MethodDelete:
		if cur = v.current(w); cur == nil {
			return
		}
	}
	if verr != nil {
		writeVaultError(w, verr)
		return
	}
	// Saved before installed, like the policy: a restart after this answer injects.
	if err := v.api.state.saveVault(next); err != nil {
		v.api.log.Error("save credential vault failed; vault unchanged", "err", err)
		writeError(w, http.StatusInternalServerError, CodeApplyFailed, "could not record the credential vault; it is unchanged")
		return
	}
	if err := v.api.enf.setVault(next); err != nil {
		if serr := v.api.state.saveVault(cur); serr != nil {
			v.api.log.Error("restore the saved credential vault failed", "err", serr)
		}
		v.api.log.Error("install credential vault failed; vault unchanged", "err", err)
		writeError(w, http.StatusInternalServerError, CodeApplyFailed, "could not install the interception rules; the credential vault is unchanged")
		return
	}
	if v.api.bound != nil && next != nil {
		// Before the answer: once the client hears of the binding, a connection to its
		// host's address is intercepted whether or not the workload asked DNS.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		v.api.bound.refresh(ctx, true)
		cancel()
	}
	if next == nil {
		v.api.log.Info("credential vault deleted")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	v.api.log.Info("credential vault updated", "method", r.Method, "revision", next.Revision, "credentials", len(next.Credentials), "bindings", len(next.Bindings))
	writeJSON(w, status, next.view())
}

// handleParts serves GET /credential-vault/credentials[/{name}] and
// /credential-vault/bindings[/{name}].
func (v *vaultAPI) handleParts(w http.ResponseWriter, r *http.Request) {
	if !v.enabled(w) {
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/credential-vault/")
	kind, name, _ := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
	if (kind != "credentials" && kind != "bindings") || strings.Contains(name, "/") {
		writeError(w, http.StatusNotFound, CodeNotFound, "no route for GET "+r.URL.Path)
		return
	}
	st := v.current(w)
	if st == nil {
		return
	}
	view := st.view()
	switch {
	case name == "" && kind == "credentials":
		view.Bindings = []BindingView{}
		writeJSON(w, http.StatusOK, view)
	case name == "":
		view.Credentials = []CredentialView{}
		writeJSON(w, http.StatusOK, view)
	case kind == "credentials":
		for _, c := range view.Credentials {
			if c.Name == name {
				writeJSON(w, http.StatusOK, c)
				return
			}
		}
		writeVaultError(w, vaultErrorf(http.StatusNotFound, CodeVaultNotFound, "credential %q is not in the vault", name))
	default:
		for _, b := range view.Bindings {
			if b.Name == name {
				writeJSON(w, http.StatusOK, b)
				return
			}
		}
		writeVaultError(w, vaultErrorf(http.StatusNotFound, CodeVaultNotFound, "binding %q is not in the vault", name))
	}
}
