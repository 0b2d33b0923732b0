package gateway

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/policy"
)

// TestPolicyBodiesWithTrailingDataRefused: a vault or egress policy body with anything
// after its JSON value (a stray '}' or ']', which json.Decoder.More does not see) is
// refused by the gateway with a 400 and never relayed. The vault's bodies are the
// attack: relayed unjudged to an enforcer whose decoder accepts them, they would
// install a plain-http binding to a host the egress denies, which the Rego vault
// policy refuses.
func TestPolicyBodiesWithTrailingDataRefused(t *testing.T) {
	const denied = `{"name": "steal", "match": {"schemes": ["http"], "hosts": ["collect.attacker.test"]}, "auth": {"type": "bearer", "credential": "tok"}}`
	vaultBodies := []struct{ name, method, body string }{
		{"POST with a stray brace", "POST", `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + denied + `]}}`},
		{"POST with a stray bracket", "POST", `{"credentials": [{"name": "tok", "source": {"value": "v"}}], "bindings": [` + denied + `]}]`},
		{"PATCH with a stray brace", "PATCH", `{"bindings": {"add": [` + denied + `]}}}`},
		{"PATCH with a stray bracket after white space", "PATCH", "{\"bindings\": {\"add\": [" + denied + "]}}\n]"},
		{"PATCH with a second document", "PATCH", `{"bindings": {"add": []}} {"bindings": {"add": [` + denied + `]}}`},
		{"PATCH that is not JSON", "PATCH", `{"bindings": `},
		{"PATCH with an unknown field", "PATCH", `{"bindings": {"add": [` + denied + `]}, "extra": 1}`},
		{"POST with an unknown field in a binding", "POST", `{"credentials": null, "bindings": [{"name": "b", "match": {"hosts": ["a.test"], "extra": 1}, "auth": {"type": "bearer", "credential": "tok"}}]}`},
		{"POST with null lists and a stray brace", "POST", `{"credentials": null, "bindings": null}}`},
	}
	c := newTestCore(t, Config{})
	// The sandbox has no address, so nothing is ever dialled: a body that got past the
	// gateway's check would come back as another error than the 400.
	sb := &store.Sandbox{ID: "trailing-data", Tenant: DefaultTenant, EgressToken: "token", State: StateRunning}
	for _, tt := range vaultBodies {
		t.Run("vault "+tt.name, func(t *testing.T) {
			_, err := c.svc.VaultRequest(context.Background(), admin, sb, tt.method, "/credential-vault", []byte(tt.body))
			wantCode(t, err, KindInvalid, CodeVaultInvalidRequest)
			if e, _ := AsError(err); strings.Contains(e.Message, `"v"`) {
				t.Fatalf("the message quotes the body: %s", e.Message)
			}
		})
	}

	own := policy.NetworkPolicy{DefaultAction: policy.ActionDeny, Egress: []policy.EgressRule{}}
	egressBodies := []struct {
		name  string
		parse func() error
	}{
		{"POST/PUT with a stray brace", func() error { _, err := replacedPolicy([]byte(`{"defaultAction": "allow"}}`)); return err }},
		{"POST/PUT with a stray bracket", func() error { _, err := replacedPolicy([]byte(`{"defaultAction": "allow"}]`)); return err }},
		{"PATCH array with a stray bracket", func() error {
			_, err := patchedPolicy(own, []byte(`[{"action": "allow", "target": "a.test"}]]`))
			return err
		}},
		{"PATCH object with a stray brace", func() error {
			_, err := patchedPolicy(own, []byte(`{"egress": [{"action": "allow", "target": "a.test"}]}}`))
			return err
		}},
		{"DELETE with a stray bracket", func() error { _, err := deletedPolicy(own, []byte(`["a.test"]]`), url.Values{}); return err }},
	}
	for _, tt := range egressBodies {
		t.Run("egress "+tt.name, func(t *testing.T) {
			wantCode(t, tt.parse(), KindInvalid, policy.CodeInvalidEgress)
		})
	}
}

// TestVaultCreateWithNullLists: a create whose lists are null is an empty vault to the
// gateway, as to the enforcer (both decode vaultproto.Create with strictjson): nothing
// to judge, nothing refused.
func TestVaultCreateWithNullLists(t *testing.T) {
	for _, body := range []string{`{"credentials": null, "bindings": null}`, `{"credentials": [], "bindings": null}`} {
		got, err := vaultBindingsOf("POST", []byte(body))
		if err != nil || len(got) != 0 {
			t.Fatalf("vaultBindingsOf(%s) = %v, %v; want no bindings, no error", body, got, err)
		}
	}
}
