package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// errEnforcementOff refuses a networkPolicy on a gateway that could not keep it.
const errEnforcementOff = "networkPolicy: egress enforcement is turned off on this gateway, so a network policy cannot be honoured"

// Spec decides, through the Rego egress policy, the rules a new sandbox id of tenant
// starts with, from its create's networkPolicy (the platform default without one), and
// whether its enforcer runs the credential vault. It returns nil when the runtime
// enforces no egress, and refuses a networkPolicy it could not keep.
func (m *Manager) Spec(ctx context.Context, tenant, id string, networkPolicy json.RawMessage, credentialProxy bool) (*runtimes.EgressSpec, error) {
	np, err := parseNetworkPolicy(networkPolicy)
	if err != nil {
		return nil, err
	}
	if !m.Enforces() {
		if np != nil {
			return nil, invalid(errEnforcementOff)
		}
		return nil, nil
	}
	effective, err := m.effective(ctx, tenant, id, np)
	if err != nil {
		return nil, err
	}
	deny, err := m.platformDeny(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(effective)
	if err != nil {
		return nil, fmt.Errorf("encode egress policy: %w", err)
	}
	return &runtimes.EgressSpec{Policy: js, PlatformDeny: deny, CredentialProxy: credentialProxy}, nil
}

// PolicyOf is what a record keeps of the policy a new sandbox starts with (nil for none),
// so that a restored enforcer gets it back.
func PolicyOf(spec *runtimes.EgressSpec) json.RawMessage {
	if spec == nil || len(spec.Policy) == 0 {
		return nil
	}
	return json.RawMessage(spec.Policy)
}

// BindClaim pushes a claim's networkPolicy to a warm sandbox's enforcer. Without one,
// the sandbox keeps the policy its pool's template gave it at start.
func (m *Manager) BindClaim(ctx context.Context, sb *store.Sandbox, networkPolicy json.RawMessage) error {
	np, err := parseNetworkPolicy(networkPolicy)
	if err != nil || np == nil {
		return err
	}
	if !m.Enforces() {
		return invalid(errEnforcementOff)
	}
	effective, err := m.effective(ctx, sb.Tenant, sb.ID, np)
	if err != nil {
		return err
	}
	answer, err := m.putPolicy(ctx, sb, effective)
	if err != nil {
		return err
	}
	if !answer.OK() {
		return fmt.Errorf("egress enforcer refused the claim's policy: %d: %s", answer.Status, answer.Body)
	}
	m.recordPolicy(ctx, sb.ID, effective)
	return nil
}

// ValidateClaim checks a claim's networkPolicy (shape and Rego) without starting
// anything, so that a claim can refuse bad input before it binds warm sandboxes.
func (m *Manager) ValidateClaim(ctx context.Context, tenant string, networkPolicy json.RawMessage) error {
	np, err := parseNetworkPolicy(networkPolicy)
	if err != nil || np == nil {
		return err
	}
	if !m.Enforces() {
		return invalid(errEnforcementOff)
	}
	_, err = m.effective(ctx, tenant, "", np)
	return err
}

// ValidateTemplate checks a pool template's networkPolicy (shape and Rego) when the pool
// is made; its members start with it later.
func (m *Manager) ValidateTemplate(ctx context.Context, tenant string, networkPolicy json.RawMessage) error {
	np, err := parseNetworkPolicy(networkPolicy)
	if err != nil || np == nil {
		return err
	}
	_, err = m.effective(ctx, tenant, "", np)
	return err
}

// parseNetworkPolicy decodes a request's networkPolicy; nil when absent or null.
func parseNetworkPolicy(raw json.RawMessage) (*policy.NetworkPolicy, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil
	}
	var np policy.NetworkPolicy
	if err := strictjson.Decode(trimmed, &np); err != nil {
		return nil, invalid("networkPolicy: %v (want {\"defaultAction\": \"allow\"|\"deny\", \"egress\": [{\"action\", \"target\"}]})", err)
	}
	return &np, nil
}

// effective asks Rego for the policy a sandbox really gets; a denial (invalid input, or
// a policy error: fail closed) becomes the decision's kind and code.
func (m *Manager) effective(ctx context.Context, tenant, id string, np *policy.NetworkPolicy) (policy.NetworkPolicy, error) {
	start := time.Now()
	effective, d := m.policy.Egress(ctx, policy.EgressInput{Tenant: tenant, Sandbox: id, NetworkPolicy: np})
	m.metrics.PolicyDecision(metrics.PolicyEgress, d.Allow, start)
	if !d.Allow {
		if d.Cause != nil {
			m.log.Error("egress policy failed; denying", "decision", d)
		}
		return policy.NetworkPolicy{}, decisionError(d)
	}
	return effective, nil
}

// platformRules are the rules Rego puts ahead of every sandbox's own: what a policy with
// no rule of its own comes out as.
func (m *Manager) platformRules(ctx context.Context, tenant, id string) ([]policy.EgressRule, error) {
	p, err := m.effective(ctx, tenant, id, &policy.NetworkPolicy{DefaultAction: policy.ActionDeny})
	if err != nil {
		return nil, err
	}
	return p.Egress, nil
}

// platformDeny lists the targets the platform denies whatever a sandbox asks for.
func (m *Manager) platformDeny(ctx context.Context, tenant, id string) ([]string, error) {
	rules, err := m.platformRules(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return denyTargets(rules), nil
}

// denyTargets are the targets of rules' denies.
func denyTargets(rules []policy.EgressRule) []string {
	var out []string
	for _, r := range rules {
		if r.Action == policy.ActionDeny {
			out = append(out, r.Target)
		}
	}
	return out
}

// recordPolicy keeps the effective policy an enforcer accepted in the sandbox's record,
// so that a restored enforcer gets it back.
func (m *Manager) recordPolicy(ctx context.Context, id string, effective policy.NetworkPolicy) {
	js, err := json.Marshal(effective)
	if err != nil {
		return
	}
	_, err = m.store.ModifySandbox(context.WithoutCancel(ctx), id, func(sb *store.Sandbox) error {
		sb.EgressPolicy = js
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Warn("keep the sandbox's egress policy in its record (a restored enforcer would miss the change)", "sandbox", id, "err", err)
	}
}

// HostAddresses lists the addresses of this host's interfaces, loopback excepted (a
// sandbox's 127.0.0.0/8 is its own): the gateway's host answers on every one of them,
// whichever interface a packet came in on, so the platform denies them all to sandboxes.
func HostAddresses() ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsUnspecified() {
			continue
		}
		out = append(out, ipn.IP.String())
	}
	return out, nil
}
