package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"

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
