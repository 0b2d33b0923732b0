package gateway

// Egress: every network policy a sandbox gets, at create, at a pool claim or through
// its egress API (port 18080), is first turned into the effective policy by the Rego
// egress policy (policy.Engine.Egress), and only that result reaches the enforcer.
// The platform's deny targets also go to the enforcer's --platform-deny at start, so
// that no later change, even one made straight to the enforcer, can undo them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/sandbox-agent/agentclient"
	"github.com/sandgate/sandgate/sandbox-agent/strictjson"
)

func (s *Service) enforcesEgress() bool {
	e, ok := s.runtime.(runtimes.EgressEnforcer)
	return ok && e.EnforcesEgress()
}

// egressSpec decides, through the Rego egress policy, the rules a new sandbox starts with.
// A request without a networkPolicy gets the platform default. It returns nil when the
// runtime enforces no egress, and refuses a networkPolicy it could not keep.
func (s *Service) egressSpec(ctx context.Context, caller Caller, id string, req CreateRequest) (*runtimes.EgressSpec, error) {
	np, err := parseNetworkPolicy(req.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	if !s.enforcesEgress() {
		if np != nil {
			return nil, invalid("networkPolicy: egress enforcement is turned off on this gateway, so a network policy cannot be honoured")
		}
		return nil, nil
	}
	effective, err := s.effectiveEgress(ctx, caller.Tenant, id, np)
	if err != nil {
		return nil, err
	}
	deny, err := s.platformDeny(ctx, caller.Tenant, id)
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(effective)
	if err != nil {
		return nil, fmt.Errorf("encode egress policy: %w", err)
	}
	proxy, err := credentialProxyEnabled(req.CredentialProxy)
	if err != nil {
		return nil, err
	}
	return &runtimes.EgressSpec{Policy: js, PlatformDeny: deny, CredentialProxy: proxy}, nil
}

// bindClaimEgress pushes a claim's networkPolicy to a warm sandbox's enforcer. Without
// one, the sandbox keeps the policy its pool's template gave it at start.
func (s *Service) bindClaimEgress(ctx context.Context, caller Caller, sb *store.Sandbox, req CreateRequest) error {
	np, err := parseNetworkPolicy(req.NetworkPolicy)
	if err != nil {
		return err
	}
	if np == nil {
		return nil
	}
	if !s.enforcesEgress() {
		return invalid("networkPolicy: egress enforcement is turned off on this gateway, so a network policy cannot be honoured")
	}
	effective, err := s.effectiveEgress(ctx, caller.Tenant, sb.ID, np)
	if err != nil {
		return err
	}
	answer, err := s.putEgress(ctx, sb, effective)
	if err != nil {
		return err
	}
	if !answer.OK() {
		return fmt.Errorf("egress enforcer refused the claim's policy: %d: %s", answer.Status, answer.Body)
	}
	s.recordEgressPolicy(ctx, sb.ID, effective)
	return nil
}

// ValidateEgressRequest checks a create request's networkPolicy (shape and Rego) without
// starting anything, so that a claim can refuse bad input before it binds warm sandboxes.
func (s *Service) ValidateEgressRequest(ctx context.Context, caller Caller, req CreateRequest) error {
	np, err := parseNetworkPolicy(req.NetworkPolicy)
	if err != nil || np == nil {
		return err
	}
	if !s.enforcesEgress() {
		return invalid("networkPolicy: egress enforcement is turned off on this gateway, so a network policy cannot be honoured")
	}
	_, err = s.effectiveEgress(ctx, caller.Tenant, "", np)
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

// effectiveEgress asks Rego for the policy a sandbox really gets; a denial (invalid
// input, or a policy error: fail closed) becomes the decision's status and code.
func (s *Service) effectiveEgress(ctx context.Context, tenant, id string, np *policy.NetworkPolicy) (policy.NetworkPolicy, error) {
	start := time.Now()
	effective, d := s.policy.Egress(ctx, policy.EgressInput{Tenant: tenant, Sandbox: id, NetworkPolicy: np})
	s.metrics.PolicyDecision(metrics.PolicyEgress, d.Allow, start)
	if !d.Allow {
		if d.Cause != nil {
			s.log.Error("egress policy failed; denying", "decision", d)
		}
		return policy.NetworkPolicy{}, decisionError(d)
	}
	return effective, nil
}

// platformRules are the rules Rego puts ahead of every sandbox's own: what a policy with
// no rule of its own comes out as.
func (s *Service) platformRules(ctx context.Context, tenant, id string) ([]policy.EgressRule, error) {
	p, err := s.effectiveEgress(ctx, tenant, id, &policy.NetworkPolicy{DefaultAction: policy.ActionDeny})
	if err != nil {
		return nil, err
	}
	return p.Egress, nil
}

// platformDeny lists the targets the platform denies whatever a sandbox asks for.
func (s *Service) platformDeny(ctx context.Context, tenant, id string) ([]string, error) {
	rules, err := s.platformRules(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rules {
		if r.Action == policy.ActionDeny {
			out = append(out, r.Target)
		}
	}
	return out, nil
}

// getEgress reads the policy in force in a sandbox's enforcer, and putEgress replaces
// it. Both are signed with the sandbox's enforcer token (egressauth) and return the
// answer only if the enforcer signed it: the token itself never goes on the wire,
// because while the enforcer restarts the workload could be the one listening on its
// port; and an unsigned answer (a fake enforcer's) is an error, so nothing it says is
// relayed or believed.
func (s *Service) getEgress(ctx context.Context, sb *store.Sandbox) (agentclient.Answer, error) {
	a, err := s.agents.GetPolicy(ctx, sb.Address, sb.EgressToken, enforcerCallTimeout)
	return a, s.egressError(sb, a, err)
}

func (s *Service) putEgress(ctx context.Context, sb *store.Sandbox, np policy.NetworkPolicy) (agentclient.Answer, error) {
	js, err := json.Marshal(np)
	if err != nil {
		return agentclient.Answer{}, err
	}
	a, err := s.agents.PutPolicy(ctx, sb.Address, sb.EgressToken, js, enforcerCallTimeout)
	return a, s.egressError(sb, a, err)
}

// egressError is the caller's view of a failed call to the policy API.
func (s *Service) egressError(sb *store.Sandbox, a agentclient.Answer, err error) error {
	switch {
	case errors.Is(err, agentclient.ErrUnsigned):
		s.log.Warn("egress enforcer answer not signed; ignored", "sandbox", sb.ID, "status", a.Status)
		return &Error{Kind: KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress enforcer of sandbox %s gave an answer it did not sign (it may be restarting); the answer is ignored", sb.ID),
			Cause:   err}
	case err != nil:
		return &Error{Kind: KindUpstream, Code: CodeEgressUnavailable,
			Message: fmt.Sprintf("the egress enforcer of sandbox %s did not answer; its policy is unchanged", sb.ID), Cause: err}
	}
	return nil
}

// EgressPolicy answers GET /policy of a sandbox's egress API: the enforcer's report
// with the platform's rules kept out of policy.egress (they are listed in platformDeny
// only), so that a client that PUTs back the policy it read changes nothing.
func (s *Service) EgressPolicy(ctx context.Context, sb *store.Sandbox) (*EgressChange, error) {
	answer, err := s.getEgress(ctx, sb)
	if err != nil {
		return nil, err
	}
	return s.ownPolicyAnswer(ctx, sb, answer)
}

// ownPolicyAnswer rewrites a successful answer of the enforcer so that policy.egress
// holds the sandbox's own rules and platformDeny the platform's deny targets.
func (s *Service) ownPolicyAnswer(ctx context.Context, sb *store.Sandbox, answer agentclient.Answer) (*EgressChange, error) {
	if !answer.OK() {
		return &EgressChange{Status: answer.Status, Body: answer.Body}, nil
	}
	data := answer.Body
	var fields map[string]json.RawMessage
	var cur struct {
		Policy policy.NetworkPolicy `json:"policy"`
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("decode the enforcer's policy: %w", err)
	}
	if err := json.Unmarshal(data, &cur); err != nil {
		return nil, fmt.Errorf("decode the enforcer's policy: %w", err)
	}
	platform, err := s.platformRules(ctx, sb.Tenant, sb.ID)
	if err != nil {
		return nil, err
	}
	own := policy.NetworkPolicy{DefaultAction: cur.Policy.DefaultAction, Egress: withoutRules(cur.Policy.Egress, platform)}
	deny := []string{}
	for _, r := range platform {
		if r.Action == policy.ActionDeny {
			deny = append(deny, r.Target)
		}
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
	return &EgressChange{Status: answer.Status, Body: out}, nil
}

// egressLocks serialize the read-modify-write of one sandbox's policy within this
// gateway (striped, so that no per-sandbox entry outlives its sandbox).
var egressLocks [64]sync.Mutex

func egressLock(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &egressLocks[h.Sum32()%uint32(len(egressLocks))]
}

// EgressChange is the enforcer's answer to a policy change, relayed to the caller.
type EgressChange struct {
	Status int
	Body   []byte
}

// ChangeEgress applies a change made through a sandbox's egress API (POST or PUT
// replace, PATCH merges rules ahead, DELETE removes targets, as the enforcer does): it
// computes the policy the sandbox asks for from the one in force, runs it through the
// Rego egress policy and installs the result with a PUT. Invalid input is a 400
// EGRESS::INVALID_POLICY and leaves the policy unchanged. method is the verb of the
// egress API's request (egress-api.yaml names its operations by their HTTP methods).
func (s *Service) ChangeEgress(ctx context.Context, caller Caller, sb *store.Sandbox, method string, query url.Values, body []byte) (*EgressChange, error) {
	mu := egressLock(sb.ID)
	mu.Lock()
	defer mu.Unlock()

	current, err := s.getEgress(ctx, sb)
	if err != nil {
		return nil, err
	}
	if !current.OK() {
		return &EgressChange{Status: current.Status, Body: current.Body}, nil
	}
	var cur struct {
		Policy policy.NetworkPolicy `json:"policy"`
	}
	if err := json.Unmarshal(current.Body, &cur); err != nil {
		return nil, fmt.Errorf("decode the enforcer's policy: %w", err)
	}
	platform, err := s.platformRules(ctx, sb.Tenant, sb.ID)
	if err != nil {
		return nil, err
	}
	own := policy.NetworkPolicy{DefaultAction: cur.Policy.DefaultAction, Egress: withoutRules(cur.Policy.Egress, platform)}

	var proposed policy.NetworkPolicy
	switch method {
	case "POST", "PUT":
		proposed, err = replacedPolicy(body)
		// GET shows the platform rules too; a client that sends back what it read (the
		// console's editor) must not get them twice.
		proposed.Egress = withoutRules(proposed.Egress, platform)
	case "PATCH":
		proposed, err = patchedPolicy(own, body)
	case "DELETE":
		proposed, err = deletedPolicy(own, body, query)
	default:
		return nil, Errorf(KindMethodNotAllowed, CodeEgressMethodNotAllowed, "method %s is not allowed on /policy", method)
	}
	if err != nil {
		return nil, err
	}
	effective, err := s.effectiveEgress(ctx, sb.Tenant, sb.ID, &proposed)
	if err != nil {
		return nil, err
	}
	answer, err := s.putEgress(ctx, sb, effective)
	if err != nil {
		return nil, err
	}
	if answer.OK() {
		s.recordEgressPolicy(ctx, sb.ID, effective)
	}
	s.emit(ctx, sb, "sandbox.egress.updated", map[string]any{"operation": strings.ToLower(method), "key": caller.KeyID, "status": answer.Status})
	return s.ownPolicyAnswer(ctx, sb, answer)
}

func invalidEgress(format string, args ...any) *Error {
	return Errorf(KindInvalid, policy.CodeInvalidEgress, format, args...)
}

// replacedPolicy reads a POST/PUT body; empty, {} and null mean deny-all, as the
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

// patchedPolicy merges a PATCH body (an array of rules, or {"egress": [...]}) ahead of
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

// deletedPolicy removes the targets named by a DELETE body (an array of targets) or by
// ?target= parameters.
func deletedPolicy(own policy.NetworkPolicy, body []byte, query url.Values) (policy.NetworkPolicy, error) {
	targets := query["target"]
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
