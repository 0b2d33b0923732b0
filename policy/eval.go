package policy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// errUndefined is the cause when a policy produced no result.
var errUndefined = errors.New("policy result is undefined")

// Access decides whether in.Principal may perform in.Action on in.Resource. A decision
// the policy version in force has made before for the same input comes from its cache
// (under the built-in policy alone, for an input that differs only in which sandbox ids
// it names, not in how they relate: see accessKey).
func (e *Engine) Access(ctx context.Context, in AccessInput) Decision {
	v := e.current.Load()
	key, cacheable := v.accessCache.keyOf(in)
	if cacheable {
		if r, ok := v.accessCache.get(key); ok {
			hash := r.hash
			if key.byRelation {
				// The decision is shared by inputs that differ in their ids; the hash
				// is this one's.
				raw, err := json.Marshal(in)
				if err != nil {
					return e.failed(Decision{DecisionID: uuid.NewString(), PolicyVersion: v.id}, AccessQuery, fmt.Errorf("encode policy input: %w", err))
				}
				hash = hashOf(raw)
			}
			return Decision{DecisionID: uuid.NewString(), PolicyVersion: v.id, InputHash: hash, Allow: r.allow, Code: r.code, Message: r.message}
		}
	}
	d := e.evalAccess(ctx, v, in)
	if cacheable && d.Cause == nil {
		v.accessCache.put(key, accessResult{allow: d.Allow, code: d.Code, message: d.Message, hash: d.InputHash})
	}
	return d
}

// CheckAccess is Access for a caller that keeps no record of an allowed decision: the
// proxy, which asks on every request it forwards and logs only denials. An allowed
// decision from the cache comes back without DecisionID and InputHash, whose uuid, JSON
// encoding of the input and SHA-256 were most of a cached decision's cost; any other
// decision (a denial, a first evaluation, an input not cached) is Access's, whole.
func (e *Engine) CheckAccess(ctx context.Context, in AccessInput) Decision {
	v := e.current.Load()
	if key, cacheable := v.accessCache.keyOf(in); cacheable {
		if r, ok := v.accessCache.get(key); ok && r.allow {
			return Decision{Allow: true, Code: r.code, Message: r.message, PolicyVersion: v.id}
		}
	}
	return e.Access(ctx, in)
}

// evalAccess evaluates the access query of v on in.
func (e *Engine) evalAccess(ctx context.Context, v *version, in AccessInput) Decision {
	d, value := e.eval(ctx, v, v.access, AccessQuery, in, in.astValue)
	if d.Cause != nil {
		return d
	}
	// Read the result without a JSON round trip: this is the hot path.
	obj, _ := value.(map[string]any)
	allow, okAllow := obj["allow"].(bool)
	code, okCode := obj["code"].(string)
	message, okMessage := obj["message"].(string)
	if !okAllow || !okCode || !okMessage {
		return e.failed(d, AccessQuery, fmt.Errorf("access decision has the wrong shape: %v", value))
	}
	d.Allow, d.Code, d.Message = allow, code, message
	return d
}

// Admit checks a create request against the tenant's quotas and the
// platform's admission rules. A denial lists every violation, sorted by code.
func (e *Engine) Admit(ctx context.Context, in AdmissionInput) Decision {
	v := e.current.Load()
	d, value := e.eval(ctx, v, v.admission, AdmissionQuery, in, nil)
	if d.Cause != nil {
		return d
	}
	var violations []Violation
	if err := decodeResult(value, &violations); err != nil {
		return e.failed(d, AdmissionQuery, fmt.Errorf("admission deny set has the wrong shape: %w", err))
	}
	for _, vio := range violations {
		if vio.Code == "" {
			return e.failed(d, AdmissionQuery, fmt.Errorf("admission violation without a code: %v", value))
		}
	}
	if len(violations) == 0 {
		d.Allow, d.Code, d.Message = true, CodeOK, "admitted"
		return d
	}
	slices.SortFunc(violations, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Code, b.Code), strings.Compare(a.Message, b.Message))
	})
	d.Code, d.Message, d.Violations = violations[0].Code, violations[0].Message, violations
	return d
}

// Egress computes the effective network policy of a sandbox: platform
// always-deny rules, then always-allow rules, then the sandbox's own. The
// request is first validated (precise messages, code EGRESS::INVALID_POLICY).
// When the decision denies, the policy returned denies everything, so that a
// caller that applies it regardless still fails closed.
func (e *Engine) Egress(ctx context.Context, in EgressInput) (NetworkPolicy, Decision) {
	v := e.current.Load()
	if in.NetworkPolicy != nil {
		normalized, err := ValidateNetworkPolicy(*in.NetworkPolicy, v.maxRules)
		if err != nil {
			d := e.newDecision(v, in)
			d.Code, d.Message = CodeInvalidEgress, err.Error()
			return DenyAll(), d
		}
		in.NetworkPolicy = &normalized
	}
	d, value := e.eval(ctx, v, v.egress, EgressQuery, in, nil)
	if d.Cause != nil {
		return DenyAll(), d
	}
	var out struct {
		Allow   *bool          `json:"allow"`
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Policy  *NetworkPolicy `json:"policy"`
	}
	if err := decodeResult(value, &out); err != nil || out.Allow == nil {
		return DenyAll(), e.failed(d, EgressQuery, fmt.Errorf("egress decision has the wrong shape: %v", value))
	}
	if !*out.Allow {
		d.Code, d.Message = out.Code, out.Message
		if d.Code == "" {
			d.Code = CodeInvalidEgress
		}
		return DenyAll(), d
	}
	if out.Policy == nil {
		return DenyAll(), e.failed(d, EgressQuery, errors.New("egress decision allows without a policy"))
	}
	// The policy's own output must be applicable too: an operator rule that
	// emits a bad target must not reach the enforcer.
	effective, err := ValidateNetworkPolicy(*out.Policy, len(out.Policy.Egress)+1)
	if err != nil {
		return DenyAll(), e.failed(d, EgressQuery, fmt.Errorf("egress policy produced an invalid rule: %w", err))
	}
	if effective.DefaultAction == "" {
		effective.DefaultAction = ActionDeny
	}
	d.Allow, d.Code, d.Message = true, CodeOK, "allowed"
	return effective, d
}

// DenyAll is the policy of last resort: no egress at all.
func DenyAll() NetworkPolicy { return NetworkPolicy{DefaultAction: ActionDeny} }

// eval runs a prepared query on input. It returns a denial with Cause set
// on any failure, else a pending decision (Allow false, no code) and the
// query's value for the caller to interpret. The input hash is always taken
// over the JSON form; toValue, when given, builds the OPA value directly
// (it must agree with the JSON form), else the JSON is parsed.
func (e *Engine) eval(ctx context.Context, v *version, pq rego.PreparedEvalQuery, query string, input any, toValue func() (ast.Value, error)) (Decision, any) {
	raw, err := json.Marshal(input)
	d := Decision{DecisionID: uuid.NewString(), PolicyVersion: v.id}
	if err != nil {
		return e.failed(d, query, fmt.Errorf("encode policy input: %w", err)), nil
	}
	d.InputHash = hashOf(raw)
	var value ast.Value
	if toValue != nil {
		value, err = toValue()
	} else {
		value, err = ast.ValueFromReader(bytes.NewReader(raw))
	}
	if err != nil {
		return e.failed(d, query, fmt.Errorf("convert policy input: %w", err)), nil
	}
	rs, err := pq.Eval(ctx, rego.EvalParsedInput(value))
	if err != nil {
		return e.failed(d, query, fmt.Errorf("evaluate %s: %w", query, err)), nil
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return e.failed(d, query, errUndefined), nil
	}
	return d, rs[0].Expressions[0].Value
}

// newDecision starts a decision whose input never reached the policy.
func (e *Engine) newDecision(v *version, input any) Decision {
	d := Decision{DecisionID: uuid.NewString(), PolicyVersion: v.id}
	if raw, err := json.Marshal(input); err == nil {
		d.InputHash = hashOf(raw)
	}
	return d
}

// hashOf is a decision's InputHash: the hex SHA-256 of its JSON input.
func hashOf(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// failed turns a decision into a fail-closed denial and logs the cause.
func (e *Engine) failed(d Decision, query string, cause error) Decision {
	d.Allow, d.Code, d.Message, d.Cause = false, CodeEvaluationFailed, evaluationFailedText, cause
	d.Violations = nil
	e.logger.Warn("policy evaluation failed; denied",
		"query", query, "decision_id", d.DecisionID, "policy_version", d.PolicyVersion, "error", cause)
	return d
}

// decodeResult converts a query value (plain JSON types) into out.
func decodeResult(value any, out any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	return dec.Decode(out)
}
