package egress

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/policy"
	"github.com/sandgate/sandgate/runtimes"
)

// TestSpec: a new sandbox's policy is Rego's effective policy (the platform's denies
// ahead of its own rules, the platform default without one), the platform's deny
// targets go with it, and a runtime without enforcers gets none, refusing a
// networkPolicy it could not keep.
func TestSpec(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	spec, err := s.m.Spec(ctx, "t1", "sb1", json.RawMessage(`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}`), true)
	if err != nil {
		t.Fatal(err)
	}
	var got policy.NetworkPolicy
	if err := json.Unmarshal(spec.Policy, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Egress, policy.EgressRule{Action: policy.ActionAllow, Target: "pypi.org"}) ||
		!slices.Contains(got.Egress, policy.EgressRule{Action: policy.ActionDeny, Target: blockedTarget}) {
		t.Errorf("effective policy %+v lacks the sandbox's rule or the platform's deny", got)
	}
	if !slices.Contains(spec.PlatformDeny, blockedTarget) || !spec.CredentialProxy {
		t.Errorf("spec %+v: want %s among the platform's denies and the credential proxy", spec, blockedTarget)
	}
	if string(PolicyOf(spec)) != string(spec.Policy) || PolicyOf(nil) != nil || PolicyOf(&runtimes.EgressSpec{}) != nil {
		t.Error("PolicyOf does not keep the spec's policy, or keeps one of a spec without")
	}

	def, err := s.m.Spec(ctx, "t1", "sb2", nil, false)
	if err != nil || def == nil || len(def.Policy) == 0 {
		t.Fatalf("spec without a networkPolicy = %+v, %v; want the platform default", def, err)
	}

	open := startManager(t, false)
	if spec, err := open.m.Spec(ctx, "t1", "sb3", nil, false); spec != nil || err != nil {
		t.Errorf("spec on a runtime without enforcers = %+v, %v; want none", spec, err)
	}
	_, err = open.m.Spec(ctx, "t1", "sb3", json.RawMessage(`{"defaultAction": "deny"}`), false)
	wantCode(t, err, fault.KindInvalid, fault.CodeInvalidParameter)
}

// TestValidatePolicies: a claim's and a pool template's networkPolicy are checked for
// shape and by Rego before anything starts; a claim's is refused where no enforcer runs.
func TestValidatePolicies(t *testing.T) {
	s := startManager(t, true)
	open := startManager(t, false)
	tests := []struct {
		name  string
		m     *Manager
		check func(*Manager, json.RawMessage) error
		np    string
		code  string // "" for none
	}{
		{"claim without a policy", s.m, claim, ``, ""},
		{"claim with null", s.m, claim, `null`, ""},
		{"claim with a valid policy", s.m, claim, `{"defaultAction": "deny", "egress": [{"action": "allow", "target": "a.test"}]}`, ""},
		{"claim that is not a policy", s.m, claim, `{"defaultAction": "deny", "extra": 1}`, fault.CodeInvalidParameter},
		{"claim Rego refuses", s.m, claim, `{"defaultAction": "maybe"}`, policy.CodeInvalidEgress},
		{"claim where no enforcer runs", open.m, claim, `{"defaultAction": "deny"}`, fault.CodeInvalidParameter},
		{"template with a valid policy", s.m, template, `{"defaultAction": "allow"}`, ""},
		{"template Rego refuses", s.m, template, `{"defaultAction": "deny", "egress": [{"action": "allow", "target": ""}]}`, policy.CodeInvalidEgress},
		{"template that is not JSON", s.m, template, `{`, fault.CodeInvalidParameter},
		{"template where no enforcer runs", open.m, template, `{"defaultAction": "deny"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(tt.m, json.RawMessage(tt.np))
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantCode(t, err, fault.KindInvalid, tt.code)
		})
	}
}

func claim(m *Manager, np json.RawMessage) error {
	return m.ValidateClaim(context.Background(), "t1", np)
}

func template(m *Manager, np json.RawMessage) error {
	return m.ValidateTemplate(context.Background(), "t1", np)
}

// TestBindClaim: a claim's networkPolicy reaches the member's enforcer as Rego's
// effective policy and is kept in its record; without one the member keeps its policy.
func TestBindClaim(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	before := enf.policyInReport(t)
	if err := s.m.BindClaim(ctx, sb, nil); err != nil {
		t.Fatal(err)
	}
	if got := enf.policyInReport(t); got.DefaultAction != before.DefaultAction || len(got.Egress) != len(before.Egress) {
		t.Fatalf("a claim without a policy changed the member's: %+v", got)
	}
	if err := s.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}`)); err != nil {
		t.Fatal(err)
	}
	got := enf.policyInReport(t)
	if !slices.Contains(got.Egress, policy.EgressRule{Action: policy.ActionAllow, Target: "pypi.org"}) {
		t.Fatalf("enforcer's policy %+v lacks the claim's rule", got)
	}
	rec, err := s.d.Store.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kept policy.NetworkPolicy
	if err := json.Unmarshal(rec.EgressPolicy, &kept); err != nil || !slices.Contains(kept.Egress, policy.EgressRule{Action: policy.ActionAllow, Target: "pypi.org"}) {
		t.Fatalf("record keeps %s, %v; want the claim's effective policy", rec.EgressPolicy, err)
	}

	enf.set(func(f *fakeEnforcer) { f.refuse = 503 })
	if err := s.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "allow"}`)); err == nil {
		t.Fatal("a refused claim policy was not an error")
	}
	open := startManager(t, false)
	wantCode(t, open.m.BindClaim(ctx, sb, json.RawMessage(`{"defaultAction": "allow"}`)), fault.KindInvalid, fault.CodeInvalidParameter)
}

// TestHostAddresses: the host's addresses the platform denies leave loopback out.
func TestHostAddresses(t *testing.T) {
	addrs, err := HostAddresses()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip == nil || ip.IsLoopback() {
			t.Errorf("host address %q is loopback or no address", a)
		}
	}
}
