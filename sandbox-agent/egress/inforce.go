package egress

import (
	"encoding/json"
	"fmt"
	"slices"
)

// CheckPolicyInForce compares what an enforcer says it enforces (answer: the body of its
// GET /policy, which the caller has checked is signed) with what it was started with:
// policy, the JSON policy it was given, and platformDeny, its --platform-deny targets.
// It returns nil when they are the same once normalized, and an error naming the first
// difference otherwise. A runtime calls it before it lets a workload's entrypoint run:
// an enforcer that came up with any other policy (one found in a state file it should
// not have had, say) must not be taken for one enforcing the sandbox's.
func CheckPolicyInForce(answer, policy []byte, platformDeny []string) error {
	var got policyResponse
	if err := json.Unmarshal(answer, &got); err != nil {
		return fmt.Errorf("the enforcer's policy answer is not JSON: %w", err)
	}
	inForce, err := NormalizePolicy(got.Policy, 0)
	if err != nil {
		return fmt.Errorf("the enforcer reports an invalid policy: %w", err)
	}
	sent, err := ParsePolicy(policy, 0)
	if err != nil {
		return fmt.Errorf("the policy sent is invalid: %w", err)
	}
	if inForce.DefaultAction != sent.DefaultAction {
		return fmt.Errorf("the enforcer's default action is %q, not %q", inForce.DefaultAction, sent.DefaultAction)
	}
	if !slices.Equal(inForce.Egress, sent.Egress) {
		return fmt.Errorf("the enforcer enforces %d rules that are not the %d it was given", len(inForce.Egress), len(sent.Egress))
	}
	want := make([]string, 0, len(platformDeny))
	for _, t := range platformDeny {
		n, err := NormalizeTarget(t)
		if err != nil {
			return fmt.Errorf("platform deny target: %w", err)
		}
		want = append(want, n)
	}
	have := slices.Clone(got.PlatformDeny)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(slices.Compact(have), slices.Compact(want)) {
		return fmt.Errorf("the enforcer's platform deny targets are %v, not %v", got.PlatformDeny, platformDeny)
	}
	return nil
}
