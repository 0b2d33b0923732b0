package gateway

// Credential vault. A sandbox created with credentialProxy: {"enabled":
// true} (and a networkPolicy) gets a vault in its egress enforcer: the enforcer holds
// the real credentials and injects them into the workload's matching requests. The
// gateway relays the vault API (/credential-vault on the enforcer's port) with its own
// signature, as it does /policy, after the Rego vault policy (data.sandgate.vault)
// has approved every binding a POST or PATCH would create. Bodies are never logged:
// they hold the credentials' values.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultproto"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
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
// the policy's code and nothing reaches the enforcer, and so is a body the gateway
// cannot decode (400 VAULT::INVALID_REQUEST): what is not judged is not relayed.
// method is the verb of the vault API's request (its operations are named by their
// HTTP methods).
func (s *Service) VaultRequest(ctx context.Context, caller Caller, sb *store.Sandbox, method, path string, body []byte) (*EgressChange, error) {
	if method == "POST" || method == "PATCH" {
		if err := s.checkVaultBindings(ctx, sb, method, body); err != nil {
			return nil, err
		}
	}
	answer, err := s.agents.Vault(ctx, sb.Address, sb.EgressToken, method, path, body, enforcerCallTimeout)
	if err != nil {
		return nil, s.vaultError(sb, path, answer, err)
	}
	if method != "GET" {
		s.emit(ctx, sb, "sandbox.vault.updated", map[string]any{"operation": strings.ToLower(method), "key": caller.KeyID, "status": answer.Status})
	}
	return &EgressChange{Status: answer.Status, Body: answer.Body}, nil
}

// vaultBindingsOf returns the bindings a POST or PATCH body would create or replace. It
// decodes the body into the enforcer's own request shapes (vaultproto) with the
// enforcer's own decoder (strictjson), so that the bindings judged here are the ones the
// enforcer installs; a body it cannot decode is refused (400 VAULT::INVALID_REQUEST)
// and never relayed. The error names no value: the body holds credentials.
func vaultBindingsOf(method string, body []byte) ([]policy.VaultBinding, error) {
	var bindings []vaultproto.Binding
	var err error
	switch method {
	case "POST":
		var req vaultproto.Create
		err = strictjson.Decode(body, &req)
		bindings = req.Bindings
	case "PATCH":
		var req vaultproto.Patch
		err = strictjson.Decode(body, &req)
		if req.Bindings != nil {
			bindings = append(req.Bindings.Add, req.Bindings.Replace...)
		}
	}
	if err != nil {
		return nil, Errorf(KindInvalid, CodeVaultInvalidRequest, "request body is not a valid vault document: %s; the vault is unchanged", strictjson.Reason(err))
	}
	out := make([]policy.VaultBinding, len(bindings))
	for i, b := range bindings {
		out[i].Name = b.Name
		out[i].Match.Schemes = b.Match.Schemes
		out[i].Match.Ports = b.Match.Ports
		out[i].Match.Hosts = b.Match.Hosts
		out[i].Match.Methods = b.Match.Methods
		out[i].Match.Paths = b.Match.Paths
		out[i].Auth.Type = b.Auth.Type
		out[i].Auth.Name = b.Auth.Name
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
	return out, nil
}

func (s *Service) checkVaultBindings(ctx context.Context, sb *store.Sandbox, method string, body []byte) error {
	bindings, err := vaultBindingsOf(method, body)
	if err != nil || len(bindings) == 0 {
		return err
	}
	current, err := s.getEgress(ctx, sb)
	if err != nil {
		return err
	}
	var cur struct {
		Policy policy.NetworkPolicy `json:"policy"`
	}
	if !current.OK() || json.Unmarshal(current.Body, &cur) != nil {
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

// vaultError is the caller's view of a failed call to the vault API: a path that makes
// no request is the caller's mistake; anything else (no answer, or an unsigned one)
// leaves the vault unchanged.
func (s *Service) vaultError(sb *store.Sandbox, path string, a agentclient.Answer, err error) error {
	if errors.Is(err, agentclient.ErrInvalidRequest) {
		return Errorf(KindInvalid, CodeInvalidParameter, "vault path %q is not valid", path)
	}
	if errors.Is(err, agentclient.ErrUnsigned) {
		s.log.Warn("egress enforcer vault answer not signed; ignored", "sandbox", sb.ID, "status", a.Status)
	}
	return &Error{Kind: KindUpstream, Code: CodeEgressUnavailable,
		Message: fmt.Sprintf("the egress enforcer of sandbox %s did not answer; its credential vault is unchanged", sb.ID), Cause: err}
}

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
		data, err := s.agents.DrainVaultAudit(context.Background(), rec.Address, rec.EgressToken, enforcerCallTimeout)
		if err != nil {
			s.log.Debug("drain vault audit", "sandbox", rec.ID, "err", err)
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
