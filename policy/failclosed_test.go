package policy

import (
	"context"
	"strings"
	"testing"
)

// Each operator policy below is real Rego that fails at evaluation time in a
// different way; the engine must deny with CodeEvaluationFailed, keep the
// cause, and never show it to the user.
func TestFailClosed(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantCause string
	}{
		{
			name: "builtin error",
			files: map[string]string{"extra.rego": `package sandgate.access

permitted if to_number(input.principal.id) > 0
`},
			wantCause: "to_number",
		},
		{
			name: "conflicting values",
			files: map[string]string{"extra.rego": `package sandgate.access

verdict := "yes" if input.action
verdict := "no" if input.tenant

permitted if verdict == "yes"
`},
			wantCause: "conflict",
		},
		{
			name: "undefined result",
			files: map[string]string{"access.rego": `package sandgate.access

decision := {"allow": true, "code": "OK", "message": "ok"} if input.tenant == "never"
`},
			wantCause: "undefined",
		},
		{
			name: "wrong shape",
			files: map[string]string{"access.rego": `package sandgate.access

decision := "allow"
`},
			wantCause: "wrong shape",
		},
		{
			name: "allow without code",
			files: map[string]string{"access.rego": `package sandgate.access

decision := {"allow": true}
`},
			wantCause: "wrong shape",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			e := newTestEngine(t, Options{Dir: dir})
			// A viewer deleting: no default rule permits it, so every
			// permitted rule (the failing one too) gets evaluated.
			in := AccessInput{Principal: apiKey("viewer", "t1"), Tenant: "t1", Action: "sandbox.delete", Resource: Resource{Kind: "sandbox", ID: "sb-1"}}
			in.Principal.ID = "not-a-number"
			d := e.Access(context.Background(), in)
			if d.Allow || d.Code != CodeEvaluationFailed {
				t.Fatalf("decision = %+v, want a fail-closed denial", d)
			}
			if d.Cause == nil || !strings.Contains(d.Cause.Error(), tt.wantCause) {
				t.Errorf("cause = %v, want it to mention %q", d.Cause, tt.wantCause)
			}
			if strings.Contains(d.Message, tt.wantCause) || d.Message != evaluationFailedText {
				t.Errorf("user message %q leaks the cause", d.Message)
			}
			if d.DecisionID == "" || d.InputHash == "" {
				t.Errorf("fail-closed decision lacks ids: %+v", d)
			}
			if d.Outcome() != Denied {
				t.Errorf("outcome = %d, want Denied", d.Outcome())
			}
		})
	}
}

func TestFailClosedAdmissionAndEgress(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"admission_extra.rego": `package sandgate.admission

deny contains "not an object" if input.request.image == "bad"
`,
		"egress_extra.rego": `package sandgate.egress

invalid contains msg if {
	input.sandbox == "boom"
	msg := sprintf("%d", [to_number("not a number")])
}
`,
	})
	e := newTestEngine(t, Options{Dir: dir})
	ctx := context.Background()
	if d := e.Admit(ctx, AdmissionInput{Request: CreateRequest{Image: "bad"}}); d.Allow || d.Code != CodeEvaluationFailed {
		t.Errorf("admission with a malformed violation: %+v", d)
	}
	if d := e.Admit(ctx, AdmissionInput{Request: CreateRequest{Image: "good"}}); !d.Allow {
		t.Errorf("admission otherwise: %+v", d)
	}
	np, d := e.Egress(ctx, EgressInput{Sandbox: "boom", NetworkPolicy: &NetworkPolicy{DefaultAction: "allow"}})
	if d.Allow || d.Code != CodeEvaluationFailed {
		t.Errorf("egress with an erroring rule: %+v", d)
	}
	if np.DefaultAction != ActionDeny || len(np.Egress) != 0 {
		t.Errorf("failed egress returned %+v, want deny-all", np)
	}
}

func TestFailClosedOnBadOperatorEgressTarget(t *testing.T) {
	dir := t.TempDir()
	// An operator replaces the egress policy with one that emits a URL.
	writeFiles(t, dir, map[string]string{"egress.rego": `package sandgate.egress

decision := {"allow": true, "policy": {"defaultAction": "deny", "egress": [{"action": "allow", "target": "https://pypi.org"}]}}
`})
	e := newTestEngine(t, Options{Dir: dir})
	np, d := e.Egress(context.Background(), EgressInput{})
	if d.Allow || d.Code != CodeEvaluationFailed || np.DefaultAction != ActionDeny || len(np.Egress) != 0 {
		t.Fatalf("got %+v, %+v; want deny-all and a fail-closed decision", np, d)
	}
}
