package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/rego"
)

// VaultQuery decides which credential-vault bindings a sandbox may hold: a set of
// {"code", "message"} denials (policy/rego/vault.rego); empty allows. A policy set
// without the rule denies every binding (fail closed).
const VaultQuery = "data.sandgate.vault.deny"

// CodeVaultDenied is the code of a binding the vault policy refused without one.
const CodeVaultDenied = "VAULT::POLICY_DENIED"

// VaultInput is the input of the vault policy: one binding as it would be created
// (never a credential's value) and the sandbox's effective egress policy.
type VaultInput struct {
	Tenant        string         `json:"tenant"`
	Sandbox       string         `json:"sandbox"`
	Binding       VaultBinding   `json:"binding"`
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
}

// VaultBinding is a binding's match and auth kind.
type VaultBinding struct {
	Name  string `json:"name"`
	Match struct {
		Schemes []string `json:"schemes"`
		Ports   []int    `json:"ports"`
		Hosts   []string `json:"hosts"`
		Methods []string `json:"methods"`
		Paths   []string `json:"paths"`
	} `json:"match"`
	Auth struct {
		Type string `json:"type"`
		Name string `json:"name,omitempty"`
	} `json:"auth"`
}

// Vault evaluates the vault policy for one binding. Vault changes are rare, so the
// query is prepared per call rather than kept with every policy version.
func (e *Engine) Vault(ctx context.Context, in VaultInput) Decision {
	v := e.current.Load()
	pq, err := rego.New(rego.Compiler(v.compiler), rego.Store(v.store), rego.Query(VaultQuery), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		return e.failed(e.newDecision(v, in), VaultQuery, fmt.Errorf("prepare %s: %w", VaultQuery, err))
	}
	d, value := e.eval(ctx, v, pq, VaultQuery, in, nil)
	if d.Cause != nil {
		return d
	}
	var violations []Violation
	if err := decodeResult(value, &violations); err != nil {
		return e.failed(d, VaultQuery, fmt.Errorf("vault deny set has the wrong shape: %w", err))
	}
	if len(violations) == 0 {
		d.Allow, d.Code, d.Message = true, CodeOK, "binding allowed"
		return d
	}
	slices.SortFunc(violations, func(a, b Violation) int { return strings.Compare(a.Message, b.Message) })
	d.Code, d.Message, d.Violations = violations[0].Code, violations[0].Message, violations
	if d.Code == "" {
		d.Code = CodeVaultDenied
	}
	return d
}
