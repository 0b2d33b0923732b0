package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

// PolicyOp is an operation of a sandbox's egress API on its policy. The egress API
// names its operations after the verbs that carry them; the value is that name, as the
// sandbox.egress.updated event records it.
type PolicyOp string

// The operations on a sandbox's policy, each as the enforcer itself performs it.
const (
	// PolicySet and PolicyReplace replace the policy with the body's; an empty body, {}
	// and null mean deny-all.
	PolicySet     PolicyOp = "post"
	PolicyReplace PolicyOp = "put"
	// PolicyMerge puts the body's rules (an array, or {"egress": [...]}) ahead of the
	// sandbox's own, replacing rules with the same target.
	PolicyMerge PolicyOp = "patch"
	// PolicyRemove removes the targets the body names (an array) and Targets.
	PolicyRemove PolicyOp = "delete"
)

// PolicyChange is one change to a sandbox's policy through its egress API.
type PolicyChange struct {
	Op PolicyOp
	// Body is the request's document as the caller sent it; it is decoded here, with the
	// enforcer's own decoder, and never relayed.
	Body []byte
	// Targets are more targets PolicyRemove removes (the egress API's ?target=).
	Targets []string
	// KeyID is the key that made the change (the event names it), "" when none did.
	KeyID string
}

// lock is the lock of sandbox id's policy.
func (m *Manager) lock(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &m.policyLocks[h.Sum32()%uint32(len(m.policyLocks))]
}

// Policy reads the policy in force in a sandbox's enforcer, as its egress API's read
// answers it: the enforcer's report with the platform's rules kept out of policy.egress
// (they are listed in platformDeny only), so that a client that writes back the policy
// it read changes nothing.
func (m *Manager) Policy(ctx context.Context, sb *store.Sandbox) (*Answer, error) {
	answer, err := m.getPolicy(ctx, sb)
	if err != nil {
		return nil, err
	}
	return m.ownPolicyAnswer(ctx, sb, answer)
}

// Change applies a change made through a sandbox's egress API: it computes the policy
// the sandbox asks for from the one in force, runs it through the Rego egress policy and
// installs the result. Invalid input is an EGRESS::INVALID_POLICY error and leaves the
// policy unchanged; the enforcer's answer is relayed as Policy's.
func (m *Manager) Change(ctx context.Context, sb *store.Sandbox, c PolicyChange) (*Answer, error) {
	mu := m.lock(sb.ID)
	mu.Lock()
	defer mu.Unlock()

	current, err := m.getPolicy(ctx, sb)
	if err != nil {
		return nil, err
	}
	if !current.OK() {
		return answerOf(current), nil
	}
	cur, err := policyOfReport(current.Body)
	if err != nil {
		return nil, err
	}
	platform, err := m.platformRules(ctx, sb.Tenant, sb.ID)
	if err != nil {
		return nil, err
	}
	own := policy.NetworkPolicy{DefaultAction: cur.DefaultAction, Egress: withoutRules(cur.Egress, platform)}

	var proposed policy.NetworkPolicy
	switch c.Op {
	case PolicySet, PolicyReplace:
		proposed, err = replacedPolicy(c.Body)
		// A read shows the platform rules too; a client that sends back what it read
		// (the console's editor) must not get them twice.
		proposed.Egress = withoutRules(proposed.Egress, platform)
	case PolicyMerge:
		proposed, err = patchedPolicy(own, c.Body)
	case PolicyRemove:
		proposed, err = deletedPolicy(own, c.Body, c.Targets)
	default:
		return nil, fault.Errorf(fault.KindMethodNotAllowed, CodeEgressMethodNotAllowed, "operation %q is not allowed on /policy", c.Op)
	}
	if err != nil {
		return nil, err
	}
	effective, err := m.effective(ctx, sb.Tenant, sb.ID, &proposed)
	if err != nil {
		return nil, err
	}
	answer, err := m.putPolicy(ctx, sb, effective)
	if err != nil {
		return nil, err
	}
	if answer.OK() {
		m.recordPolicy(ctx, sb.ID, effective)
	}
	m.host.Emit(ctx, sb, "sandbox.egress.updated", map[string]any{"operation": string(c.Op), "key": c.KeyID, "status": answer.Status})
	return m.ownPolicyAnswer(ctx, sb, answer)
}

// getPolicy reads the policy in force in a sandbox's enforcer, and putPolicy replaces
// it. Both are signed with the sandbox's enforcer token (egressauth) and return the
// answer only if the enforcer signed it: the token itself never goes on the wire,
// because while the enforcer restarts the workload could be the one listening on its
// port; and an unsigned answer (a fake enforcer's) is an error, so nothing it says is
// relayed or believed.
func (m *Manager) getPolicy(ctx context.Context, sb *store.Sandbox) (agentclient.Answer, error) {
	a, err := m.agents.GetPolicy(ctx, sb.Address, sb.EgressToken, callTimeout)
	return a, m.enforcerError(sb, a, err)
}

func (m *Manager) putPolicy(ctx context.Context, sb *store.Sandbox, np policy.NetworkPolicy) (agentclient.Answer, error) {
	js, err := json.Marshal(np)
	if err != nil {
		return agentclient.Answer{}, err
	}
	a, err := m.agents.PutPolicy(ctx, sb.Address, sb.EgressToken, js, callTimeout)
	return a, m.enforcerError(sb, a, err)
}

// enforcerError is the caller's view of a failed call to the policy API.
func (m *Manager) enforcerError(sb *store.Sandbox, a agentclient.Answer, err error) error {
	switch {
	case errors.Is(err, agentclient.ErrUnsigned):
		m.log.Warn("egress enforcer answer not signed; ignored", "sandbox", sb.ID, "status", a.Status)
		return &fault.Error{Kind: fault.KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress enforcer of sandbox %s gave an answer it did not sign (it may be restarting); the answer is ignored", sb.ID),
			Cause:   err}
	case err != nil:
		return &fault.Error{Kind: fault.KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress enforcer of sandbox %s did not answer; its policy is unchanged", sb.ID), Cause: err}
	}
	return nil
}

// policyOfReport is the policy an enforcer's report (its answer to a read) names.
func policyOfReport(report []byte) (policy.NetworkPolicy, error) {
	var cur struct {
		Policy policy.NetworkPolicy `json:"policy"`
	}
	if err := json.Unmarshal(report, &cur); err != nil {
		return policy.NetworkPolicy{}, fmt.Errorf("decode the enforcer's policy: %w", err)
	}
	return cur.Policy, nil
}

// ownPolicyAnswer rewrites a successful answer of the enforcer so that policy.egress
// holds the sandbox's own rules and platformDeny the platform's deny targets.
func (m *Manager) ownPolicyAnswer(ctx context.Context, sb *store.Sandbox, answer agentclient.Answer) (*Answer, error) {
	if !answer.OK() {
		return answerOf(answer), nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(answer.Body, &fields); err != nil {
		return nil, fmt.Errorf("decode the enforcer's policy: %w", err)
	}
	cur, err := policyOfReport(answer.Body)
	if err != nil {
		return nil, err
	}
	platform, err := m.platformRules(ctx, sb.Tenant, sb.ID)
	if err != nil {
		return nil, err
	}
	own := policy.NetworkPolicy{DefaultAction: cur.DefaultAction, Egress: withoutRules(cur.Egress, platform)}
	deny := denyTargets(platform)
	if deny == nil {
		deny = []string{}
	}
	if fields["policy"], err = json.Marshal(own); err != nil {
		return nil, err
	}
	if fields["platformDeny"], err = json.Marshal(deny); err != nil {
		return nil, err
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return &Answer{Status: answer.Status, Body: out}, nil
}

// replacedPolicy reads the body of a replace; empty, {} and null mean deny-all, as the
// enforcer reads them.
func replacedPolicy(body []byte) (policy.NetworkPolicy, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return policy.NetworkPolicy{DefaultAction: policy.ActionDeny}, nil
	}
	var np policy.NetworkPolicy
	if err := strictjson.Decode(trimmed, &np); err != nil {
		return np, invalidEgress("policy: %v (want {\"defaultAction\": \"allow\"|\"deny\", \"egress\": [{\"action\", \"target\"}]})", err)
	}
	return np, nil
}

// patchedPolicy merges a merge's body (an array of rules, or {"egress": [...]}) ahead of
// the sandbox's own rules, replacing rules with the same target; within the patch the
// first rule for a target wins.
func patchedPolicy(own policy.NetworkPolicy, body []byte) (policy.NetworkPolicy, error) {
	trimmed := bytes.TrimSpace(body)
	var rules []policy.EgressRule
	var err error
	if bytes.HasPrefix(trimmed, []byte("{")) {
		var wrapper struct {
			Egress []policy.EgressRule `json:"egress"`
		}
		err = strictjson.Decode(trimmed, &wrapper)
		rules = wrapper.Egress
	} else {
		err = strictjson.Decode(trimmed, &rules)
	}
	if err != nil {
		return policy.NetworkPolicy{}, invalidEgress("PATCH body must be an array of rules: %v", err)
	}
	// Validate the patch alone first, so that its messages index the caller's rules.
	patch, err := policy.ValidateNetworkPolicy(policy.NetworkPolicy{DefaultAction: own.DefaultAction, Egress: rules}, len(rules)+1)
	if err != nil {
		return policy.NetworkPolicy{}, invalidEgress("%s", strings.Replace(err.Error(), "networkPolicy.egress", "patch", 1))
	}
	seen := make(map[string]bool, len(patch.Egress))
	merged := make([]policy.EgressRule, 0, len(patch.Egress)+len(own.Egress))
	for _, r := range patch.Egress {
		// Within one patch the first rule for a target wins (egress-api.yaml).
		if !seen[r.Target] {
			merged = append(merged, r)
			seen[r.Target] = true
		}
	}
	for _, r := range own.Egress {
		if !seen[r.Target] {
			merged = append(merged, r)
		}
	}
	return policy.NetworkPolicy{DefaultAction: own.DefaultAction, Egress: merged}, nil
}

// deletedPolicy removes the targets named by a remove's body (an array of targets) and
// by targets.
func deletedPolicy(own policy.NetworkPolicy, body []byte, targets []string) (policy.NetworkPolicy, error) {
	targets = append([]string(nil), targets...)
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 {
		var fromBody []string
		if err := strictjson.Decode(trimmed, &fromBody); err != nil {
			return policy.NetworkPolicy{}, invalidEgress("DELETE body must be an array of targets: %v", err)
		}
		targets = append(targets, fromBody...)
	}
	if len(targets) == 0 {
		return policy.NetworkPolicy{}, invalidEgress("DELETE needs at least one target (a JSON array body or ?target=)")
	}
	drop := make(map[string]bool, len(targets))
	for _, t := range targets {
		n, err := policy.NormalizeEgressTarget(t)
		if err != nil {
			return policy.NetworkPolicy{}, invalidEgress("target: %v", err)
		}
		drop[n] = true
	}
	kept := make([]policy.EgressRule, 0, len(own.Egress))
	for _, r := range own.Egress {
		if !drop[r.Target] {
			kept = append(kept, r)
		}
	}
	return policy.NetworkPolicy{DefaultAction: own.DefaultAction, Egress: kept}, nil
}

// withoutRules returns rules minus those the platform adds itself (Rego puts them back).
func withoutRules(rules, platform []policy.EgressRule) []policy.EgressRule {
	skip := make(map[policy.EgressRule]bool, len(platform))
	for _, r := range platform {
		skip[r] = true
	}
	out := make([]policy.EgressRule, 0, len(rules))
	for _, r := range rules {
		if !skip[r] {
			out = append(out, r)
		}
	}
	return out
}
