package gateway

// Credential vault (issue 16). A sandbox created with credentialProxy: {"enabled":
// true} (and a networkPolicy) gets a vault in its egress enforcer: the enforcer holds
// the real credentials and injects them into the workload's matching requests. The
// gateway relays the vault API (/credential-vault on the enforcer's port) with its own
// signature, as it does /policy, after the Rego vault policy (data.sandgate.vault)
// has approved every binding a POST or PATCH would create. Bodies are never logged:
// they hold the credentials' values.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/egress/egressauth"
)

// runsCredentialProxy reports whether the runtime can run the credential vault.
func (s *Service) runsCredentialProxy() bool {
	r, ok := s.runtime.(runtimes.CredentialProxyRuntime)
	return ok && s.enforcesEgress() && r.RunsCredentialProxy()
}

// claimCredentialProxy refuses a claim that asks for the credential proxy from a pool
// whose warm sandboxes were started without it.
func claimCredentialProxy(tmpl, req CreateRequest) error {
	want, err := credentialProxyEnabled(req.CredentialProxy)
	if err != nil || !want {
		return err
	}
	if have, _ := credentialProxyEnabled(tmpl.CredentialProxy); !have {
		return Errorf(KindInvalid, CodeCredentialProxyNotInPool,
			"credentialProxy.enabled: the pool's template starts its sandboxes without the credential proxy; enable it in the pool's template")
	}
	return nil
}

// IsVaultPath reports whether path (as the enforcer would see it) is the vault API's.
func IsVaultPath(path string) bool {
	return path == "/credential-vault" || strings.HasPrefix(path, "/credential-vault/")
}

// VaultRequest relays one request of a sandbox's vault API to its enforcer, signed
// (the caller's credential never reaches the enforcer). A POST or PATCH is first
// checked binding by binding against the Rego vault policy; a denial is a 403 with
// the policy's code and nothing reaches the enforcer. A body the gateway cannot read
// goes on unchanged, for the enforcer to refuse with its precise 400.
func (s *Service) VaultRequest(ctx context.Context, caller Caller, sb *store.Sandbox, method, path string, body []byte) (*EgressChange, error) {
	if method == http.MethodPost || method == http.MethodPatch {
		if err := s.checkVaultBindings(ctx, sb, method, body); err != nil {
			return nil, err
		}
	}
	status, data, err := s.vaultCall(ctx, sb, method, path, body)
	if err != nil {
		return nil, err
	}
	if method != http.MethodGet {
		s.emit(ctx, sb, "sandbox.vault.updated", map[string]any{"operation": strings.ToLower(method), "key": caller.KeyID, "status": status})
	}
	return &EgressChange{Status: status, Body: data}, nil
}

// vaultBindingsOf returns the bindings a POST or PATCH body would create or replace.
func vaultBindingsOf(method string, body []byte) ([]policy.VaultBinding, bool) {
	var out []policy.VaultBinding
	switch method {
	case http.MethodPost:
		var req struct {
			Bindings []policy.VaultBinding `json:"bindings"`
		}
		if json.Unmarshal(body, &req) != nil {
			return nil, false
		}
		out = req.Bindings
	case http.MethodPatch:
		var req struct {
			Bindings *struct {
				Add     []policy.VaultBinding `json:"add"`
				Replace []policy.VaultBinding `json:"replace"`
			} `json:"bindings"`
		}
		if json.Unmarshal(body, &req) != nil {
			return nil, false
		}
		if req.Bindings != nil {
			out = append(req.Bindings.Add, req.Bindings.Replace...)
		}
	}
	for i := range out {
		// The enforcer's defaults, so that the policy judges what will be in force.
		m := &out[i].Match
		if len(m.Schemes) == 0 {
			m.Schemes = []string{"https"}
		}
		for j, sch := range m.Schemes {
			m.Schemes[j] = strings.ToLower(sch)
		}
		for j, h := range m.Hosts {
			m.Hosts[j] = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		}
		if len(m.Ports) == 0 {
			for _, sch := range m.Schemes {
				if sch == "http" {
					m.Ports = append(m.Ports, 80)
				} else {
					m.Ports = append(m.Ports, 443)
				}
			}
		}
		if len(m.Methods) == 0 {
			m.Methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
		}
		if len(m.Paths) == 0 {
			m.Paths = []string{"/*"}
		}
	}
	return out, true
}

func (s *Service) checkVaultBindings(ctx context.Context, sb *store.Sandbox, method string, body []byte) error {
	bindings, ok := vaultBindingsOf(method, body)
	if !ok || len(bindings) == 0 {
		return nil
	}
	status, data, err := s.egressRequest(ctx, sb, http.MethodGet, nil)
	if err != nil {
		return err
	}
	var cur struct {
		Policy policy.NetworkPolicy `json:"policy"`
	}
	if status != http.StatusOK || json.Unmarshal(data, &cur) != nil {
		return &Error{Kind: KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress policy of sandbox %s could not be read, so the bindings could not be checked; the vault is unchanged", sb.ID)}
	}
	for _, b := range bindings {
		d := s.policy.Vault(ctx, policy.VaultInput{Tenant: sb.Tenant, Sandbox: sb.ID, Binding: b, NetworkPolicy: &cur.Policy})
		if !d.Allow {
			s.log.Info("vault binding denied by policy", "sandbox", sb.ID, "binding", b.Name, "code", d.Code, "decision", d.DecisionID)
			e := decisionError(d)
			if d.Cause != nil {
				// The vault policy failed to evaluate: the binding is refused (fail
				// closed), and the caller may retry once the policy is fixed.
				e.Kind = KindUnavailable
			}
			return e
		}
	}
	return nil
}

// vaultCall sends one signed request to the enforcer's vault API and returns its
// answer only if the enforcer signed it (as egressRequest does for /policy).
func (s *Service) vaultCall(ctx context.Context, sb *store.Sandbox, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := "http://" + net.JoinHostPort(sb.Address, strconv.Itoa(runtimes.EgressPort)) + path
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, Errorf(KindInvalid, CodeInvalidParameter, "vault path %q is not valid", path)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	nonce := egressauth.Sign(req, sb.EgressToken, body, time.Now())
	unavailable := func(cause error) error {
		return &Error{Kind: KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress enforcer of sandbox %s did not answer; its credential vault is unchanged", sb.ID), Cause: cause}
	}
	resp, err := s.agents.HTTP().Do(req)
	if err != nil {
		return 0, nil, unavailable(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, unavailable(err)
	}
	if !egressauth.VerifyResponse(sb.EgressToken, nonce, resp.StatusCode, data, resp.Header.Get(egressauth.HeaderResponseSignature)) {
		s.log.Warn("egress enforcer vault answer not signed; ignored", "sandbox", sb.ID, "status", resp.StatusCode)
		return 0, nil, unavailable(errors.New("egress answer signature mismatch"))
	}
	return resp.StatusCode, data, nil
}

// vaultAuditPath is the enforcer's drain of injection records (sandgate's own route).
const vaultAuditPath = "/sandgate/vault-audit"

// drainVaultAudit moves the injection records of a running sandbox with the vault from
// its enforcer into the tenant's audit stream (source "vault"), in the background and at
// most one drain per sandbox at a time. Records hold the binding, host, method, path and
// status of each injection, never a value.
func (s *Service) drainVaultAudit(rec *store.Sandbox, inst runtimes.Instance) {
	if rec.State != StateRunning || rec.Address == "" || inst.Labels[runtimes.LabelCredentialProxy] == "" {
		return
	}
	if !s.vaultAudits.begin(rec.ID) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.vaultAudits.end(rec.ID)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		status, data, err := s.vaultCall(ctx, rec, http.MethodPost, vaultAuditPath, nil)
		if err != nil || status != http.StatusOK {
			s.log.Debug("drain vault audit", "sandbox", rec.ID, "status", status, "err", err)
			return
		}
		var out struct {
			Records []struct {
				Time    time.Time `json:"time"`
				Binding string    `json:"binding"`
				Host    string    `json:"host"`
				Method  string    `json:"method"`
				Path    string    `json:"path"`
				Status  int       `json:"status"`
			} `json:"records"`
			Dropped int `json:"dropped"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			s.log.Warn("the enforcer's vault audit records are unreadable", "sandbox", rec.ID, "err", err)
			return
		}
		if out.Dropped > 0 {
			s.log.Warn("vault audit records dropped by the enforcer before the gateway drained them", "sandbox", rec.ID, "dropped", out.Dropped)
		}
		for _, r := range out.Records {
			js, err := json.Marshal(map[string]any{"type": "vault.injection", "sandboxId": rec.ID, "binding": r.Binding, "host": r.Host,
				"method": r.Method, "path": r.Path, "status": r.Status, "time": r.Time})
			if err == nil {
				s.recordAuditFrom(rec.Tenant, "vault", r.Time, js)
			}
		}
	}()
}

// recordAuditFrom queues one audit record of source for tenant (see RecordAudit).
func (s *Service) recordAuditFrom(tenant, source string, at time.Time, record []byte) {
	ps := s.ensurePluginState()
	select {
	case ps.audit <- auditEntry{tenant: tenant, source: source, at: at, record: record}:
	default:
		if n := ps.auditDropped.Add(1); n&(n-1) == 0 {
			s.log.Warn("audit records dropped: the writer is behind", "dropped", n)
		}
	}
}
