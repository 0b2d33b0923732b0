package egress

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/policy"
)

func TestPatchedPolicyFirstRuleForATargetWins(t *testing.T) {
	own := policy.NetworkPolicy{DefaultAction: policy.ActionDeny, Egress: []policy.EgressRule{
		{Action: policy.ActionAllow, Target: "a.test"}, {Action: policy.ActionAllow, Target: "b.test"},
	}}
	got, err := patchedPolicy(own, []byte(`[{"action":"deny","target":"b.test"},{"action":"allow","target":"B.test."},{"action":"allow","target":"c.test"},{"action":"deny","target":"c.test"}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := policy.NetworkPolicy{DefaultAction: policy.ActionDeny, Egress: []policy.EgressRule{
		{Action: policy.ActionDeny, Target: "b.test"}, {Action: policy.ActionAllow, Target: "c.test"}, {Action: policy.ActionAllow, Target: "a.test"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("patched policy (-want +got):\n%s", diff)
	}
}

// policyAnswer is the part of a policy answer these tests read.
type policyAnswer struct {
	Status       string               `json:"status"`
	Policy       policy.NetworkPolicy `json:"policy"`
	PlatformDeny []string             `json:"platformDeny"`
}

// TestChange: each operation of the egress API computes the new policy from the one in
// force, Rego adds the platform's rules back, the enforcer gets the result, the record
// keeps it and an event names the operation and the key; what the caller reads back
// holds the sandbox's own rules, the platform's denies apart.
func TestChange(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	rule := func(action, target string) policy.EgressRule {
		return policy.EgressRule{Action: action, Target: target}
	}
	tests := []struct {
		name   string
		change PolicyChange
		want   []policy.EgressRule // the sandbox's own rules after it
		action string
	}{
		{"set", PolicyChange{Op: PolicySet, Body: []byte(`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "a.test"}]}`), KeyID: "k1"},
			[]policy.EgressRule{rule("allow", "a.test")}, "deny"},
		{"merge an array", PolicyChange{Op: PolicyMerge, Body: []byte(`[{"action": "allow", "target": "b.test"}]`)},
			[]policy.EgressRule{rule("allow", "b.test"), rule("allow", "a.test")}, "deny"},
		{"merge an object", PolicyChange{Op: PolicyMerge, Body: []byte(`{"egress": [{"action": "deny", "target": "a.test"}]}`)},
			[]policy.EgressRule{rule("deny", "a.test"), rule("allow", "b.test")}, "deny"},
		{"remove by body and targets", PolicyChange{Op: PolicyRemove, Body: []byte(`["a.test"]`), Targets: []string{"B.test."}},
			[]policy.EgressRule{}, "deny"},
		{"replace with what a read showed", PolicyChange{Op: PolicyReplace, Body: []byte(`{"defaultAction": "allow", "egress": [{"action": "deny", "target": "blocked.test"}, {"action": "deny", "target": "c.test"}]}`)},
			[]policy.EgressRule{rule("deny", "c.test")}, "allow"},
		{"replace with nothing", PolicyChange{Op: PolicyReplace}, []policy.EgressRule{}, "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, err := s.m.Change(ctx, sb, tt.change)
			if err != nil {
				t.Fatal(err)
			}
			var got policyAnswer
			decodeAnswer(t, answer, &got)
			if answer.Status != 200 || got.Policy.DefaultAction != tt.action || !slices.Equal(got.Policy.Egress, tt.want) {
				t.Fatalf("answer %d %+v, want %s %v", answer.Status, got.Policy, tt.action, tt.want)
			}
			if !slices.Contains(got.PlatformDeny, blockedTarget) {
				t.Errorf("platformDeny %v lacks %s", got.PlatformDeny, blockedTarget)
			}
			if in := enf.policyInReport(t); !slices.Contains(in.Egress, rule("deny", blockedTarget)) {
				t.Errorf("the enforcer's policy %+v lacks the platform's deny", in)
			}
			events := s.host.events("sandbox.egress.updated")
			if ev := events[len(events)-1]; ev.Data["operation"] != string(tt.change.Op) || ev.Data["key"] != tt.change.KeyID || ev.Data["status"] != 200 {
				t.Errorf("event data %v", ev.Data)
			}
			rec, err := s.d.Store.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			var kept policy.NetworkPolicy
			if err := json.Unmarshal(rec.EgressPolicy, &kept); err != nil || kept.DefaultAction != tt.action {
				t.Errorf("record keeps %s, %v", rec.EgressPolicy, err)
			}
		})
	}

	read, err := s.m.Policy(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	var got policyAnswer
	decodeAnswer(t, read, &got)
	if got.Status != "ok" || len(got.Policy.Egress) != 0 || !slices.Contains(got.PlatformDeny, blockedTarget) {
		t.Errorf("read %+v", got)
	}
}

// TestChangeRefused: invalid input is refused before the enforcer is asked; the
// enforcer's refusals are relayed as it gave them, its silence and its unsigned answers
// are the gateway's errors.
func TestChangeRefused(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, true)
	sb, enf := s.runningSandbox(t, "t1")
	tests := []struct {
		name   string
		change PolicyChange
		kind   fault.Kind
		code   string
	}{
		{"set to no policy", PolicyChange{Op: PolicySet, Body: []byte(`{"defaultAction": "deny", "extra": 1}`)}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"set that Rego refuses", PolicyChange{Op: PolicySet, Body: []byte(`{"defaultAction": "maybe"}`)}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"merge of no rules", PolicyChange{Op: PolicyMerge, Body: []byte(`"a.test"`)}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"merge of an invalid rule", PolicyChange{Op: PolicyMerge, Body: []byte(`[{"action": "maybe", "target": "a.test"}]`)}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"remove of nothing", PolicyChange{Op: PolicyRemove}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"remove of no target", PolicyChange{Op: PolicyRemove, Targets: []string{"not a target"}}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"remove with a body of no targets", PolicyChange{Op: PolicyRemove, Body: []byte(`{}`)}, fault.KindInvalid, policy.CodeInvalidEgress},
		{"an operation the API lacks", PolicyChange{Op: "copy"}, fault.KindMethodNotAllowed, CodeEgressMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.m.Change(ctx, sb, tt.change)
			wantCode(t, err, tt.kind, tt.code)
		})
	}
	if n := len(s.host.events("sandbox.egress.updated")); n != 0 {
		t.Fatalf("%d events of refused changes", n)
	}

	enf.set(func(f *fakeEnforcer) { f.refuse = 500 })
	for name, call := range map[string]func() (*Answer, error){
		"read":   func() (*Answer, error) { return s.m.Policy(ctx, sb) },
		"change": func() (*Answer, error) { return s.m.Change(ctx, sb, PolicyChange{Op: PolicySet}) },
	} {
		answer, err := call()
		if err != nil || answer.Status != 500 || string(answer.Body) != `{"code":"EGRESS::APPLY_FAILED","message":"refused"}` {
			t.Errorf("%s of a refusing enforcer = %+v, %v; want its answer relayed", name, answer, err)
		}
	}

	enf.set(func(f *fakeEnforcer) { f.refuse, f.unsigned = 0, true })
	_, err := s.m.Policy(ctx, sb)
	wantCode(t, err, fault.KindUpstream, CodeEgressUnavailable)
	_, err = s.m.Change(ctx, sb, PolicyChange{Op: PolicySet})
	wantCode(t, err, fault.KindUpstream, CodeEgressUnavailable)

	enf.set(func(f *fakeEnforcer) { f.unsigned = false; f.report = []byte(`not json`) })
	if _, err := s.m.Policy(ctx, sb); err == nil {
		t.Error("an unreadable report was read")
	}
	if _, err := s.m.Change(ctx, sb, PolicyChange{Op: PolicySet}); err == nil {
		t.Error("a change over an unreadable report was made")
	}

	_ = enf.srv.Close()
	_, err = s.m.Policy(ctx, sb)
	wantCode(t, err, fault.KindUpstream, CodeEgressUnavailable)
}
