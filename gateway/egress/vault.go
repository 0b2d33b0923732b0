package egress

// Credential vault. A sandbox created with credentialProxy: {"enabled": true} (and a
// networkPolicy) gets a vault in its egress enforcer: the enforcer holds the real
// credentials and injects them into the workload's matching requests. The gateway
// relays the vault API (/credential-vault on the enforcer's port) with its own
// signature, as it does /policy, after the Rego vault policy (data.sandgate.vault) has
// approved every binding a create or a change would install. Bodies are never logged:
// they hold the credentials' values.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/egress/vaultproto"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// VaultOp is an operation of a sandbox's vault API. The vault API names its operations
// after the verbs that carry them; the value is that name, as the sandbox.vault.updated
// event records it.
type VaultOp string

// The operations relayed to a sandbox's vault API.
const (
	// VaultRead reads the vault or a part of it (its credentials, its bindings, one of
	// either).
	VaultRead VaultOp = "get"
	// VaultCreate creates the vault (vaultproto.Create); its bindings are judged first.
	VaultCreate VaultOp = "post"
	// VaultChange changes the vault (vaultproto.Patch); the bindings it adds or
	// replaces are judged first.
	VaultChange VaultOp = "patch"
	// VaultDelete deletes the vault.
	VaultDelete VaultOp = "delete"
	// VaultReplace is no operation of the vault API: the enforcer refuses it, after
	// saying whether the sandbox has a vault at all, and that answer is relayed.
	VaultReplace VaultOp = "put"
)

// verbs are the enforcer's verbs of the vault operations.
var verbs = map[VaultOp]string{VaultRead: "GET", VaultCreate: "POST", VaultChange: "PATCH", VaultDelete: "DELETE", VaultReplace: "PUT"}

// VaultRequest is one request of a sandbox's vault API.
type VaultRequest struct {
	Op VaultOp
	// Path is the path the enforcer serves it on, /credential-vault or below (IsVaultPath).
	Path string
	// Body is the request's document as the caller sent it (credentials' values
	// included): judged here, relayed as it is.
	Body []byte
	// KeyID is the key that made the request (the event of a change names it), "" when
	// none did.
	KeyID string
}

// IsVaultPath reports whether path (as the enforcer would see it) is the vault API's.
func IsVaultPath(path string) bool {
	return path == "/credential-vault" || strings.HasPrefix(path, "/credential-vault/")
}

// Vault relays one request of a sandbox's vault API to its enforcer, signed (the
// caller's credential never reaches the enforcer). A create or a change is first
// checked binding by binding against the Rego vault policy; a denial is the policy's
// error and nothing reaches the enforcer, and so is a body the gateway cannot decode
// (VAULT::INVALID_REQUEST): what is not judged is not relayed.
func (m *Manager) Vault(ctx context.Context, sb *store.Sandbox, req VaultRequest) (*Answer, error) {
	verb, ok := verbs[req.Op]
	if !ok {
		return nil, fault.Errorf(fault.KindMethodNotAllowed, CodeVaultInvalidRequest, "operation %q is not an operation of the vault API", req.Op)
	}
	if req.Op == VaultCreate || req.Op == VaultChange {
		if err := m.checkBindings(ctx, sb, req.Op, req.Body); err != nil {
			return nil, err
		}
	}
	answer, err := m.agents.Vault(ctx, sb.Address, sb.EgressToken, verb, req.Path, req.Body, callTimeout)
	if err != nil {
		return nil, m.vaultError(sb, req.Path, answer, err)
	}
	if req.Op != VaultRead {
		m.host.Emit(ctx, sb, "sandbox.vault.updated", map[string]any{"operation": string(req.Op), "key": req.KeyID, "status": answer.Status})
	}
	return answerOf(answer), nil
}

// bindingsOf returns the bindings a create or a change would install or replace. It
// decodes the body into the enforcer's own request shapes (vaultproto) with the
// enforcer's own decoder (strictjson), so that the bindings judged here are the ones the
// enforcer installs; a body it cannot decode is refused (VAULT::INVALID_REQUEST) and
// never relayed. The error names no value: the body holds credentials.
func bindingsOf(op VaultOp, body []byte) ([]policy.VaultBinding, error) {
	var bindings []vaultproto.Binding
	var err error
	switch op {
	case VaultCreate:
		var req vaultproto.Create
		err = strictjson.Decode(body, &req)
		bindings = req.Bindings
	case VaultChange:
		var req vaultproto.Patch
		err = strictjson.Decode(body, &req)
		if req.Bindings != nil {
			bindings = append(req.Bindings.Add, req.Bindings.Replace...)
		}
	}
	if err != nil {
		return nil, fault.Errorf(fault.KindInvalid, CodeVaultInvalidRequest, "request body is not a valid vault document: %s; the vault is unchanged", strictjson.Reason(err))
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
		withEnforcerDefaults(&out[i])
	}
	return out, nil
}

// withEnforcerDefaults fills a binding's match as the enforcer does, so that the policy
// judges what will be in force.
func withEnforcerDefaults(b *policy.VaultBinding) {
	m := &b.Match
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

// checkBindings asks the Rego vault policy about every binding body would install,
// against the egress policy in force.
func (m *Manager) checkBindings(ctx context.Context, sb *store.Sandbox, op VaultOp, body []byte) error {
	bindings, err := bindingsOf(op, body)
	if err != nil || len(bindings) == 0 {
		return err
	}
	current, err := m.getPolicy(ctx, sb)
	if err != nil {
		return err
	}
	var cur policy.NetworkPolicy
	if current.OK() {
		cur, err = policyOfReport(current.Body)
	}
	if !current.OK() || err != nil {
		return &fault.Error{Kind: fault.KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress policy of sandbox %s could not be read, so the bindings could not be checked; the vault is unchanged", sb.ID)}
	}
	for _, b := range bindings {
		d := m.policy.Vault(ctx, policy.VaultInput{Tenant: sb.Tenant, Sandbox: sb.ID, Binding: b, NetworkPolicy: &cur})
		if !d.Allow {
			m.log.Info("vault binding denied by policy", "sandbox", sb.ID, "binding", b.Name, "code", d.Code, "decision", d.DecisionID)
			e := decisionError(d)
			if d.Cause != nil {
				// The vault policy failed to evaluate: the binding is refused (fail
				// closed), and the caller may retry once the policy is fixed.
				e.Kind = fault.KindUnavailable
			}
			return e
		}
	}
	return nil
}

// vaultError is the caller's view of a failed call to the vault API: a path that makes
// no request is the caller's mistake; anything else (no answer, or an unsigned one)
// leaves the vault unchanged.
func (m *Manager) vaultError(sb *store.Sandbox, path string, a agentclient.Answer, err error) error {
	if errors.Is(err, agentclient.ErrInvalidRequest) {
		return invalid("vault path %q is not valid", path)
	}
	if errors.Is(err, agentclient.ErrUnsigned) {
		m.log.Warn("egress enforcer vault answer not signed; ignored", "sandbox", sb.ID, "status", a.Status)
	}
	return &fault.Error{Kind: fault.KindUpstream, Code: CodeEgressUnavailable,
		Message: fmt.Sprintf("the egress enforcer of sandbox %s did not answer; its credential vault is unchanged", sb.ID), Cause: err}
}

// auditRecords is the enforcer's answer to a drain of its vault audit records.
type auditRecords struct {
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

// DrainVaultAudit moves the injection records of a running sandbox with the vault from
// its enforcer into the tenant's audit stream (source "vault"), in the background and at
// most one drain per sandbox at a time. Records hold the binding, host, method, path and
// status of each injection, never a value. The reconciler calls it for each record it
// syncs, with the runtime's instance of it.
func (m *Manager) DrainVaultAudit(rec *store.Sandbox, inst runtimes.Instance) {
	if rec.State != stateRunning || rec.Address == "" || inst.Labels[runtimes.LabelCredentialProxy] == "" {
		return
	}
	if !m.drains.begin(rec.ID) {
		return
	}
	started := m.group.Go(func() {
		defer m.drains.end(rec.ID)
		m.drainVaultAudit(rec)
	})
	if !started {
		m.drains.end(rec.ID)
	}
}

func (m *Manager) drainVaultAudit(rec *store.Sandbox) {
	data, err := m.agents.DrainVaultAudit(context.Background(), rec.Address, rec.EgressToken, callTimeout)
	if err != nil {
		m.log.Debug("drain vault audit", "sandbox", rec.ID, "err", err)
		return
	}
	var out auditRecords
	if err := json.Unmarshal(data, &out); err != nil {
		m.log.Warn("the enforcer's vault audit records are unreadable", "sandbox", rec.ID, "err", err)
		return
	}
	if out.Dropped > 0 {
		m.log.Warn("vault audit records dropped by the enforcer before the gateway drained them", "sandbox", rec.ID, "dropped", out.Dropped)
	}
	for _, r := range out.Records {
		js, err := json.Marshal(map[string]any{"type": "vault.injection", "sandboxId": rec.ID, "binding": r.Binding, "host": r.Host,
			"method": r.Method, "path": r.Path, "status": r.Status, "time": r.Time})
		if err == nil {
			m.host.Audit(rec.Tenant, "vault", r.Time, js)
		}
	}
}
